"""The data item of a checkpoint: one JSON record per process
(`process_I-of-N.json`) holding its iterator state and the fingerprints of
the array shards it wrote (fingerprint.py), with a CRC32 of the record
itself, so a garbled record is refused rather than resumed from."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import zlib

import jax
import orbax.checkpoint as ocp
from etils import epath

from kjax.checkpoint import fingerprint

RECORD = "kjax_checkpoint"   # marks a per-process record (iterator + fingerprints)


def _process_file() -> str:
    return f"process_{jax.process_index()}-of-{jax.process_count()}.json"


def _crc(body: dict) -> int:
    return zlib.crc32(json.dumps(body, sort_keys=True).encode())


class ProcessJsonHandler(ocp.AsyncCheckpointHandler):
    """One JSON document per process, like grain's own orbax handler, but for a
    plain dict (the iterator state and fingerprints), so restore can hand it
    back before an iterator exists. The record may be a Future (the
    fingerprints, summed while orbax copies the arrays): it is awaited and
    written in orbax's commit phase, before the step is committed."""

    @classmethod
    def typestr(cls) -> str:   # the name every kjax checkpoint's metadata has given it
        return "kjax.checkpoint.manager.ProcessJsonHandler"

    def save(self, directory, args=None):
        record = args.state.result() if hasattr(args.state, "result") else args.state
        directory.mkdir(parents=True, exist_ok=True)
        (directory / _process_file()).write_text(json.dumps(record))

    async def async_save(self, directory, args=None):
        async def write():
            await asyncio.to_thread(self.save, directory, args)
        return [ocp.future.CommitFutureAwaitingContractedSignals(write(), name="kjax_data")]

    def restore(self, directory, args=None):
        return read_records(directory)[0]


@ocp.args.register_with_handler(ProcessJsonHandler, for_save=True)
@dataclasses.dataclass
class DataSave(ocp.args.CheckpointArgs):
    state: dict


# Unused by kjax (restore reads the records itself, read_records), but orbax
# wraps a handler without restore args as a legacy one and then rejects DataSave.
@ocp.args.register_with_handler(ProcessJsonHandler, for_restore=True)
@dataclasses.dataclass
class DataRestore(ocp.args.CheckpointArgs):
    pass


def read_records(directory) -> tuple[dict, list[dict] | None]:
    """(this process's iterator state, every process's fingerprints or None).
    A state saved by another process count is read from process 0's file:
    kjax's loader counts positions in global batches. Checkpoints written
    before fingerprints (a bare iterator state, or orbax's JsonSave `metadata`
    file) give None: restored unverified."""
    directory = epath.Path(directory)
    files = sorted(directory.glob("process_*-of-*.json"))
    if not files:
        legacy = directory / "metadata"
        if legacy.exists():
            return json.loads(legacy.read_text()), None
        raise ValueError(f"{directory} holds no process_*-of-*.json")
    counts = {f.name.rsplit("-of-", 1)[1][:-5] for f in files}
    if len(counts) != 1:
        raise ValueError(f"{directory} mixes process counts {sorted(counts)}")
    n = int(counts.pop())
    records = {}
    for i in range(n):
        path = directory / f"process_{i}-of-{n}.json"
        if not path.exists():
            raise ValueError(f"{path.name} is missing")
        try:
            record = json.loads(path.read_text())
        except ValueError:
            raise ValueError(f"{path.name} is not valid JSON") from None
        if isinstance(record, dict) and RECORD in record:
            body = {k: v for k, v in record.items() if k != "crc32"}
            if record.get("crc32") != _crc(body):
                raise ValueError(f"{path.name} does not match its CRC32")
        records[i] = record
    own = records.get(jax.process_index()) if n == jax.process_count() else records[0]
    if not all(isinstance(r, dict) and RECORD in r for r in records.values()):
        return own, None  # written before fingerprints
    return own["iterator"], [r["arrays"] for r in records.values()]


def make_record(sums: fingerprint.PendingSums, data_state) -> dict:
    body = {RECORD: 1, "iterator": data_state, "arrays": sums.result()}
    return {**body, "crc32": _crc(body)}
