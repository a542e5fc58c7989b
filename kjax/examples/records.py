"""Examples on disk: ArrayRecord shards of msgpack-encoded dicts of arrays.

Each shard is written to a temporary name and renamed when complete, so a
killed `prepare` never leaves a half shard that a later run would trust.
"""
from __future__ import annotations

import glob
import json
import os

import numpy as np
from array_record.python.array_record_module import ArrayRecordWriter
from flax import serialization

from kjax.errors import KjaxError

META_FILE = "meta.json"


def encode_example(example: dict[str, np.ndarray]) -> bytes:
    return serialization.msgpack_serialize({k: np.asarray(v) for k, v in example.items()})


def decode_example(record: bytes) -> dict[str, np.ndarray]:
    return serialization.msgpack_restore(record)


def shard_path(directory: str, split: str, index: int) -> str:
    return os.path.join(directory, f"{split}-{index:05d}.array_record")


def write_shard(path: str, examples: list[dict]) -> None:
    tmp = path + ".tmp"
    writer = ArrayRecordWriter(tmp, "group_size:1")
    for ex in examples:
        writer.write(encode_example(ex))
    writer.close()
    os.replace(tmp, path)


def list_shards(directory: str, split: str) -> list[str]:
    shards = sorted(glob.glob(os.path.join(directory, f"{split}-*.array_record")))
    if not shards:
        raise KjaxError(f"no {split} shards in {directory!r}; run `kjax prepare --config ...` "
                        f"first (or point data.dir at a prepared directory)")
    return shards


def chunk_marker(directory: str, index: int) -> str:
    """Written last for a chunk: its presence means both shards are complete."""
    return os.path.join(directory, f"chunk-{index:05d}.json")


def write_json(path: str, obj: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=2)
    os.replace(tmp, path)


def read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_meta(directory: str, meta: dict) -> None:
    write_json(os.path.join(directory, META_FILE), meta)


def read_meta(directory: str) -> dict:
    path = os.path.join(directory, META_FILE)
    if not os.path.isfile(path):
        raise KjaxError(f"{path} not found: {directory!r} is not a finished `kjax prepare` "
                        f"output; run `kjax prepare --config ...`")
    return read_json(path)
