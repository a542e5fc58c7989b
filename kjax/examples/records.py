"""Examples on disk: ArrayRecord shards of msgpack-encoded dicts of arrays,
in data.dir: a local folder or a URL (gs://bucket/examples), via kjax/paths.py.

A shard is written locally (ArrayRecord writes only local files) and then
moved into place whole: renamed locally, one object upload remotely. A killed
`prepare` therefore never leaves a half shard that a later run would trust.

Readers need local files too: array_record's reader cannot be pointed at a
GCS emulator (0.8.6 hangs on gs:// there, looking for the real service), so
`local_shards` copies remote shards once into this host's cache
(KJAX_CACHE_DIR, default ~/.cache/kjax; docs/TPU.md "Paths") and the loader
reads those: random access at local-disk speed on every host of a pod.
"""
from __future__ import annotations

import concurrent.futures as cf
import os
import re
import tempfile

import numpy as np
from array_record.python.array_record_module import ArrayRecordWriter
from flax import serialization

from kjax import paths
from kjax.errors import KjaxError

META_FILE = "meta.json"


def encode_example(example: dict[str, np.ndarray]) -> bytes:
    return serialization.msgpack_serialize({k: np.asarray(v) for k, v in example.items()})


def decode_example(record: bytes) -> dict[str, np.ndarray]:
    return serialization.msgpack_restore(record)


def shard_path(directory: str, split: str, index: int) -> str:
    return paths.join(directory, f"{split}-{index:05d}.array_record")


def write_shard(path: str, examples: list[dict]) -> None:
    local_dir = None if paths.is_remote(path) else paths.parent(path)
    if local_dir:
        os.makedirs(local_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".array_record.tmp", dir=local_dir)
    os.close(fd)
    try:
        writer = ArrayRecordWriter(tmp, "group_size:1")
        for ex in examples:
            writer.write(encode_example(ex))
        writer.close()
        paths.upload(tmp, path, move=True)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def list_shards(directory: str, split: str) -> list[str]:
    pattern = re.compile(rf"{split}-\d+\.array_record$")
    shards = [paths.join(directory, n) for n in paths.listdir(directory) if pattern.match(n)]
    if not shards:
        raise KjaxError(f"no {split} shards in {directory!r}; run `kjax prepare --config ...` "
                        f"first (or point data.dir at a prepared directory)")
    return shards


def local_shards(directory: str, split: str) -> list[str]:
    """The shards as local files: themselves, or this host's cached copies of
    remote ones (downloaded in parallel, once per version of each object)."""
    shards = list_shards(directory, split)
    if not paths.is_remote(directory):
        return shards
    with cf.ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda s: paths.cached_copy(s, "shards"), shards))


def chunk_marker(directory: str, index: int) -> str:
    """Written last for a chunk: its presence means both shards are complete."""
    return paths.join(directory, f"chunk-{index:05d}.json")


def write_json(path: str, obj: dict) -> None:
    paths.write_json(path, obj)


def read_json(path: str) -> dict:
    return paths.read_json(path)


def write_meta(directory: str, meta: dict) -> None:
    write_json(paths.join(directory, META_FILE), meta)


def read_meta(directory: str) -> dict:
    path = paths.join(directory, META_FILE)
    if not paths.isfile(path):
        raise KjaxError(f"{path} not found: {directory!r} is not a finished `kjax prepare` "
                        f"output; run `kjax prepare --config ...`")
    return read_json(path)
