"""A multi-process restore is agreed. Each process reads only the shards its
devices hold, so one process can find a step damaged alone; it must still
pass orbax's barrier at the end of the restore and kjax's gathers in the
order of a process that read everything (else its peer waits out orbax's
300 s there and fails with DEADLINE_EXCEEDED), and every process must raise
the same kind of error, or none (kjax.checkpoint.manager.agree). The peers
are faked here; tests/test_multiprocess.py damages a file only one of two
real processes reads."""
import json
import os
import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from orbax.checkpoint._src.multihost import multihost

from fault_helpers import checkpoints_of, same_tree, trained  # noqa: F401 (a fixture)
from kjax.checkpoint import fingerprint, manager, recovery
from kjax.checkpoint.manager import (REASON_BYTES, ConfigMismatch, DamagedCheckpoint,
                                     UnreadableCheckpoint, agree)
from kjax.checkpoint.recovery import DAMAGED_DIR, restore_newest

PATH = "gs://bucket/run/checkpoints/16"


def test_a_process_that_cannot_read_its_shards_meets_its_peers_as_one_that_can(
        trained, tmp_path, monkeypatch, capsys):  # noqa: F811
    workdir = str(tmp_path / "run")
    shutil.copytree(trained["workdir"], workdir)
    events = []
    real_sync, real_restore = multihost.sync_global_processes, ocp.StandardCheckpointHandler.restore

    def sync(name, **kwargs):   # orbax's barriers (a no-op in one process)
        if "Checkpointer:restore" in name:
            events.append("orbax restore barrier")
        return real_sync(name, **kwargs)

    def gather(tree):
        events.append("gather")
        return jax.tree.map(lambda x: np.asarray(x)[None], tree)

    def restore(self, directory, args=None):   # this process's shard of step 6 unreadable
        if os.path.basename(os.path.dirname(str(directory))) == "6":
            raise ValueError("DATA_LOSS: Error reading chunk 2 of opt_state/mu (zeroed)")
        return real_restore(self, directory, args=args)

    monkeypatch.setattr(multihost, "sync_global_processes", sync)
    monkeypatch.setattr(ocp.StandardCheckpointHandler, "restore", restore)
    monkeypatch.setattr(manager, "host_allgather", gather)
    monkeypatch.setattr(fingerprint, "host_allgather", gather)
    monkeypatch.setattr(recovery, "processes_meet", lambda name: events.append(name))
    ckpt = checkpoints_of(workdir, read_only=False)
    state, _, step = restore_newest(ckpt, trained["target"], move_damaged=True)
    ckpt.abandon()
    assert step == 3 and same_tree(state, trained["states"][3])
    verdicts = ["gather", "orbax restore barrier", "gather"]   # config, arrays read, verdict
    assert events == [*verdicts, "move-aside-6", *verdicts, "gather"]   # last: fingerprints
    assert os.listdir(os.path.join(workdir, "checkpoints", DAMAGED_DIR))[0].startswith("6-")
    with open(os.path.join(workdir, "checkpoints", "3", "_CHECKPOINT_METADATA")) as f:
        named = json.load(f)["item_handlers"]["state"]
    assert named == ocp.StandardCheckpointHandler.typestr()   # plain orbax reads it
    err = capsys.readouterr().err
    assert "checkpoint" in err and "6 is damaged (an array cannot be read (DATA_LOSS: Error " \
        "reading chunk 2 of opt_state/mu (zeroed))); moved it" in err


def peer_says(monkeypatch, code: int, text: str = "") -> None:
    """Two processes: this one is process 0, its peer says `code` and `text`."""
    theirs = np.frombuffer(text.encode()[:REASON_BYTES].ljust(REASON_BYTES, b"\0"), np.uint8)
    monkeypatch.setattr(manager, "host_allgather", lambda tree: (
        np.stack([tree[0], np.int32(code)]), np.stack([tree[1], theirs])))


DAMAGED_READ = "an array cannot be read (DATA_LOSS: zeroed chunk)"
UNREACHABLE = f"cannot read checkpoint {PATH} (UNAVAILABLE: 503); the files were left as they are"


def test_a_step_one_peer_could_not_read_is_damaged_on_every_process(monkeypatch):
    peer_says(monkeypatch, 0)
    assert agree(PATH, None) is None   # every process read it
    peer_says(monkeypatch, manager.DAMAGED, DAMAGED_READ)
    with pytest.raises(DamagedCheckpoint) as raised:
        agree(PATH, None)
    assert raised.value.reason == f"process 1 of 2: {DAMAGED_READ}"
    assert str(raised.value) == f"checkpoint {PATH} is damaged: process 1 of 2: {DAMAGED_READ}"
    mine = DamagedCheckpoint(PATH, "1 array(s) differ from what was saved")
    with pytest.raises(DamagedCheckpoint) as raised:
        agree(PATH, mine)
    assert raised.value is mine   # its own reason, where it has one


def test_a_peer_that_could_not_reach_the_store_keeps_the_step_from_being_called_damaged(
        monkeypatch):
    """A damaged step is moved aside: one process's storage outage must not
    make the others move a step it never read."""
    peer_says(monkeypatch, manager.OTHER, UNREACHABLE)
    for mine in (None, DamagedCheckpoint(PATH, DAMAGED_READ)):
        with pytest.raises(UnreadableCheckpoint, match=r"^process 1 of 2: cannot read ") as raised:
            agree(PATH, mine)
        assert not isinstance(raised.value, DamagedCheckpoint)
    for mine in (UnreadableCheckpoint(UNREACHABLE), ConfigMismatch("another config")):
        with pytest.raises(type(mine)) as raised:
            agree(PATH, mine)
        assert raised.value is mine


def test_a_long_reason_is_cut_on_a_byte_limit_and_still_reads(monkeypatch):
    long = "배열 조각을 읽을 수 없습니다 " * 40   # 3-byte characters past REASON_BYTES
    peer_says(monkeypatch, manager.DAMAGED, long)
    with pytest.raises(DamagedCheckpoint) as raised:
        agree(PATH, None)
    said = raised.value.reason.removeprefix("process 1 of 2: ")
    assert long.startswith(said) and len(said.encode()) > REASON_BYTES - 3
    assert "\ufffd" not in said


def test_host_gathers_meet_at_the_coordinator_first_and_the_move_aside_is_a_barrier(
        tmp_path, monkeypatch):
    """gloo gives a communicator 30 s to form at a run's first collective,
    which a resume's gathers can be: they wait at the coordination service's
    barrier first, and moving a damaged step aside uses no device collective."""
    from jax._src import distributed
    from jax.experimental import multihost_utils
    from kjax.parallel.mesh import host_allgather
    events = []
    jax.numpy.zeros(1).block_until_ready()   # jax's backend up before the client is faked

    class Client:
        def wait_at_barrier(self, name, timeout_ms):
            events.append(f"meet {name}")

    def gather(tree):
        events.append("gather")
        return jax.tree.map(lambda x: np.stack([np.asarray(x)] * 2), tree)

    def collective(name):
        raise AssertionError(f"sync_global_devices({name!r}): a device collective as a barrier")

    class Steps:
        directory = str(tmp_path)

        def step_path(self, step):
            return str(tmp_path / str(step))

        def reload(self):
            events.append("reload")

    os.mkdir(tmp_path / "6")
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(distributed.global_state, "client", Client())
    monkeypatch.setattr(multihost_utils, "process_allgather", gather)
    monkeypatch.setattr(multihost_utils, "sync_global_devices", collective)
    codes, texts = host_allgather((np.int32(1), np.zeros(REASON_BYTES, np.uint8)))
    assert codes.tolist() == [1, 1] and texts.shape == (2, REASON_BYTES)
    where = recovery.move_aside(Steps(), 6)
    assert events == ["meet kjax/host_allgather", "gather", "meet kjax/move-aside-6", "reload"]
    assert os.path.basename(where).startswith("6-") and not os.path.exists(tmp_path / "6")
