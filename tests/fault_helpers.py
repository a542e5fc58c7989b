"""Ways of damaging a checkpoint step, as a user's disk, a bad copy or a
crash would (tests/test_faults.py): each takes the step folder and returns
nothing. The array chunks are the OCDBT data files under state/."""
import glob
import json
import os
import shutil

import jax
import numpy as np
import pytest

from conftest import tiny_config
from kjax.checkpoint.manager import Checkpointer
from kjax.parallel.mesh import make_mesh
from kjax.train.state import abstract_state, make_model, make_optimizer



def data_files(step_dir: str) -> list[str]:
    """The OCDBT data files of the state item, smallest first."""
    files = glob.glob(os.path.join(step_dir, "state", "**", "d", "*"), recursive=True)
    return sorted(files, key=lambda f: (os.path.getsize(f), f))


def flip_bit(path: str, offset: int, bit: int = 4) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ (1 << bit)]))


def _garbage(path: str) -> None:
    with open(path, "w") as f:
        f.write("garbage{")


def _truncate_all(step_dir: str) -> None:
    for f in data_files(step_dir):
        os.truncate(f, os.path.getsize(f) // 4)


def zero(path: str) -> None:
    size = os.path.getsize(path)
    with open(path, "wb") as f:
        f.write(b"\0" * size)


def _empty(step_dir: str) -> None:
    for p in glob.glob(os.path.join(step_dir, "*")):
        shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)


def _alter_iterator(step_dir: str) -> None:
    for path in glob.glob(os.path.join(step_dir, "data", "*.json")):
        record = json.load(open(path))
        record["iterator"] = {k: (v + 1 if isinstance(v, int) else v)
                              for k, v in record["iterator"].items()}
        json.dump(record, open(path, "w"))     # the stored CRC32 no longer matches


def _json_files(step_dir: str, item: str) -> list[str]:
    return glob.glob(os.path.join(step_dir, item, "*.json"))


def _swap(step_dir: str) -> None:
    a, b = data_files(step_dir)[-2:]
    with open(a, "rb") as fa, open(b, "rb") as fb:
        da, db = fa.read(), fb.read()
    with open(a, "wb") as fa, open(b, "wb") as fb:
        fa.write(db)
        fb.write(da)


# name → damage(step_dir). Flipped bits: see test_faults.
DAMAGES = {
    "state item folder deleted": lambda s: shutil.rmtree(os.path.join(s, "state")),
    "data (iterator) item folder deleted": lambda s: shutil.rmtree(os.path.join(s, "data")),
    "step folder emptied": _empty,
    "largest array chunk file deleted": lambda s: os.remove(data_files(s)[-1]),
    "every array chunk file deleted": lambda s: [os.remove(f) for f in data_files(s)],
    "array chunk files truncated": _truncate_all,
    "largest array chunk file zeroed": lambda s: zero(data_files(s)[-1]),
    "two array chunk files swapped": lambda s: _swap(s),
    "_CHECKPOINT_METADATA deleted": lambda s: os.remove(os.path.join(s, "_CHECKPOINT_METADATA")),
    "_CHECKPOINT_METADATA garbled": lambda s: _garbage(os.path.join(s, "_CHECKPOINT_METADATA")),
    "array metadata (state/_METADATA) garbled": lambda s: _garbage(
        os.path.join(s, "state", "_METADATA")),
    "OCDBT manifests deleted": lambda s: [os.remove(p) for p in glob.glob(
        os.path.join(s, "state", "**", "manifest.ocdbt"), recursive=True)],
    "OCDBT manifests garbled": lambda s: [_garbage(p) for p in glob.glob(
        os.path.join(s, "state", "**", "manifest.ocdbt"), recursive=True)],
    "iterator record deleted": lambda s: [os.remove(p) for p in _json_files(s, "data")],
    "iterator record garbled": lambda s: [_garbage(p) for p in _json_files(s, "data")],
    "iterator position altered": _alter_iterator,
}


def same_tree(a, b) -> bool:
    a, b = jax.device_get(a), jax.device_get(b)
    return jax.tree.structure(a) == jax.tree.structure(b) and all(
        np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def files_under(path: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(r, f), path)
                  for r, _, fs in os.walk(path) for f in fs)


EXTRA = {"train.num_steps": 6, "train.checkpoint_every": 3}


def target_of(config):
    return abstract_state(config, make_mesh(config), make_model(config, False),
                          make_optimizer(config.train))[0]


@pytest.fixture(scope="module")
def trained(prepared, trained_run):
    """A finished run with steps 3 and 6 (conftest's trained_run: EXTRA is
    tiny_config's own 6 steps and saves, asserted below), and host copies of
    both states. Its workdir is shared: copy it to change it."""
    config = tiny_config(prepared, **EXTRA)
    assert config == tiny_config(prepared), "EXTRA is no longer trained_run's config"
    workdir = trained_run
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), 3, 5, read_only=True)
    target = target_of(config)
    states = {s: jax.device_get(ckpt.restore(s, target)[0]) for s in (3, 6)}
    ckpt.abandon()
    return {"config": config, "workdir": workdir, "states": states, "target": target}


def checkpoints_of(workdir, read_only=True):
    return Checkpointer(os.path.join(workdir, "checkpoints"), 3, 5, read_only=read_only)


def purged_scalars(tb_dir: str, tag: str) -> list[int]:
    """The steps TensorBoard shows for `tag`: events in file order, where a
    SessionLog.START at step s hides every earlier event at step >= s (what
    tensorboard's EventAccumulator does with purge_step)."""
    from tensorboardX.proto import event_pb2
    seen: list[int] = []
    for name in sorted(os.listdir(tb_dir)):
        data = open(os.path.join(tb_dir, name), "rb").read()
        at = 0
        while at < len(data):
            length = int.from_bytes(data[at:at + 8], "little")
            event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
            at += 16 + length
            if event.HasField("session_log") and event.session_log.status == 1:  # START
                seen = [s for s in seen if s < event.step]
            for value in event.summary.value:
                if value.tag == tag:
                    seen.append(event.step)
    return seen


def tensorboard_at_each_save(monkeypatch, tb_dir: str) -> dict:
    """{step: the train/loss steps TensorBoard's files hold as that step's
    checkpoint save begins}, filled as the run saves."""
    seen, save = {}, Checkpointer.save

    def looking(self, step, *args, **kwargs):
        seen[step] = purged_scalars(tb_dir, "train/loss")
        return save(self, step, *args, **kwargs)
    monkeypatch.setattr(Checkpointer, "save", looking)
    return seen
