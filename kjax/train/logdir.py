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


def _copy_tree(src, dst) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        if item.is_dir():
            _copy_tree(item, dst / item.name)
        else:
            item.copy(dst / item.name, overwrite=True)


def push_logs(workdir: str) -> None:
    """Local mirror → WORKDIR/logs (whole small files, overwritten)."""
    if not is_remote(workdir):
        return
    from etils import epath
    local = epath.Path(local_log_dir(workdir))
    if local.exists():
        _copy_tree(local, epath.Path(workdir) / "logs")


def pull_logs(workdir: str) -> None:
    """WORKDIR/logs → the local mirror, when this machine has none (a resumed run)."""
    if not is_remote(workdir):
        return
    from etils import epath
    local, remote = epath.Path(local_log_dir(workdir)), epath.Path(workdir) / "logs"
    if not local.exists() and remote.exists():
        _copy_tree(remote, local)
