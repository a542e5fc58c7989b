"""Where a run's logs live when its workdir is remote (gs://...).

Checkpoints go through orbax, which writes gs:// itself. The logs
(metrics.jsonl, goodput.json, TensorBoard events, loss_curve.png) are small
files appended to every few steps, which object stores cannot append to, so
process 0 writes them to a local mirror and copies the mirror to
WORKDIR/logs/ after every checkpoint save and at the end. A restarted run
(a new VM after a preemption) first copies WORKDIR/logs/ back, so goodput's
restart count and the metrics history survive the VM. Local workdirs are
used as they are.
"""
from __future__ import annotations

import hashlib
import os

from kjax import paths

LOCAL_MIRRORS = os.environ.get("KJAX_LOCAL_LOGS", os.path.join("runs", "remote_logs"))


def is_remote(workdir: str) -> bool:
    return "://" in workdir


def local_log_dir(workdir: str) -> str:
    """The folder the writers use: the workdir itself, or its local mirror."""
    if not is_remote(workdir):
        return workdir
    name = workdir.rstrip("/").rsplit("/", 1)[-1] or "run"
    digest = hashlib.sha1(workdir.encode()).hexdigest()[:8]   # two buckets, same run name
    return os.path.join(LOCAL_MIRRORS, f"{name}-{digest}")


def push_logs(workdir: str, into: str = "logs") -> None:
    """Local mirror → WORKDIR/logs (whole small files, overwritten); `into=""`:
    into WORKDIR itself (fine-tuning runs keep their outputs at the top)."""
    if not is_remote(workdir):
        return
    local = local_log_dir(workdir)
    if os.path.isdir(local):
        paths.copy_tree(local, paths.join(workdir, into) if into else workdir)


def pull_logs(workdir: str, into: str = "logs") -> None:
    """WORKDIR/logs → the local mirror, when this machine has none (a resumed
    run); checkpoints stay where orbax reads them."""
    if not is_remote(workdir):
        return
    local = local_log_dir(workdir)
    remote = paths.join(workdir, into) if into else workdir
    if not os.path.exists(local) and paths.isdir(remote):
        paths.copy_tree(remote, local, skip=("checkpoints/",))


def read_run_metrics(workdir: str) -> list[dict]:
    """The metrics rows of a run, wherever its workdir is (for readers such
    as `kjax export`'s model card; a gs:// run keeps them in WORKDIR/logs)."""
    from kjax.train.metrics import read_metrics
    if not is_remote(workdir):
        return read_metrics(workdir)
    import tempfile
    with tempfile.TemporaryDirectory(prefix="kjax-logs-") as tmp:
        remote = paths.join(workdir, "logs", "metrics.jsonl")
        if paths.isfile(remote):
            paths.download(remote, os.path.join(tmp, "metrics.jsonl"))
        return read_metrics(tmp)
