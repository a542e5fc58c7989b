"""Where metrics go (JSONL + TensorBoard, process 0 only) and the loss-curve
picture. The peak FLOP/s MFU is measured against: peak_flops.py; where a
session's wall time went: goodput.py."""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

def _tensorboardx():
    """tensorboardX's event-file writer, scalar summary and Event protos,
    imported without PyTorch where torch is installed but not loaded:
    tensorboardX tries `import torch` only to accept torch tensors (kjax hands
    it floats), and that import cost every run with the export extra about 2 s
    of start-up. None in sys.modules makes the import fail, and tensorboardX
    carries on with numpy."""
    hidden = "torch" not in sys.modules
    if hidden:
        sys.modules["torch"] = None
    try:
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event, SessionLog
        from tensorboardX.summary import scalar
    finally:
        if hidden:
            del sys.modules["torch"]
    return EventsWriter, Event, SessionLog, scalar


class MetricWriter:
    """metrics.jsonl + TensorBoard. A run resumed at `resume_step` computes the
    steps after it again (bit-exactly), so the rows a killed session logged
    past that step are dropped from metrics.jsonl (rewritten atomically; a
    torn last line from kill -9 goes too) and TensorBoard is told to purge
    them (a SessionLog.START at resume_step + 1 hides every older event from
    that step on). Each step is then held once, after any number of resumes.
    Session summaries (split "goodput") are kept.

    The events are written in this thread, not by tensorboardX's
    SummaryWriter: its flush() leaves what its writer thread has not yet taken
    from the queue, so "everything so far is in the file" could not be
    promised before a checkpoint (see flush)."""

    FLUSH_SECS = 30   # TensorBoard shows a live run this far behind at most

    def __init__(self, workdir: str, enabled: bool = True, resume_step: int | None = None):
        self.enabled = enabled
        self.path = os.path.join(workdir, "metrics.jsonl")
        self.tb = None
        if enabled:
            os.makedirs(workdir, exist_ok=True)
            if resume_step is not None and os.path.exists(self.path):
                truncate_metrics(self.path, resume_step)
            events_writer, self._event, session_log, self._scalar = _tensorboardx()
            folder = os.path.join(workdir, "tensorboard")
            os.makedirs(folder, exist_ok=True)
            # tensorboardX names the file by the second and host; the nanoseconds
            # after them keep a session that resumes within that second from
            # overwriting it, and sort it after (TensorBoard reads in name order).
            self.tb = events_writer(os.path.join(folder, "events"), f".{time.time_ns()}")
            if resume_step is not None:
                self.tb.write_event(self._event(
                    step=resume_step + 1, wall_time=time.time(),
                    session_log=session_log(status=session_log.START)))
            self.flush()

    def write(self, step: int, metrics: dict, prefix: str = "train") -> None:
        if not self.enabled:
            return
        row = {"step": step, "split": prefix,
               **{k: float(np.asarray(v)) for k, v in metrics.items()}}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        now = time.time()
        for k, v in row.items():
            if k not in ("step", "split"):
                self.tb.write_event(self._event(step=step, wall_time=now,
                                                summary=self._scalar(f"{prefix}/{k}", v)))
        if time.monotonic() - self._flushed > self.FLUSH_SECS:
            self.flush()

    def flush(self) -> None:
        """Puts every row written so far into the files. Called before a
        checkpoint is saved: a run resumed from it never computes those steps
        again, so events still in memory when a kill -9 came would be lost for
        good (metrics.jsonl is written row by row)."""
        if self.tb is not None:
            self.tb.flush()
            self._flushed = time.monotonic()

    def close(self) -> None:
        if self.tb is not None:
            tb, self.tb = self.tb, None
            tb.close()

    def abandon(self) -> None:
        """Closes after an error (a full disk may refuse the last flush)."""
        try:
            self.close()
        except OSError:
            pass


def _rows(path: str) -> tuple[list[dict], bool]:
    """(rows, whether a torn line was dropped): only the last line can be torn."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [line for line in f.read().split("\n") if line.strip()]
    rows, torn = [], False
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except ValueError:
            if i != len(lines) - 1:
                raise
            torn = True  # a write cut by kill -9
    return rows, torn


def truncate_metrics(path: str, resume_step: int) -> bool:
    """Drops the train/eval rows after `resume_step`; True if any row (or a
    torn line) went."""
    rows, torn = _rows(path)
    keep = [r for r in rows if r.get("step", 0) <= resume_step or r.get("split") == "goodput"]
    if len(keep) == len(rows) and not torn:
        return False
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in keep)
    os.replace(tmp, path)
    return True


def read_metrics(workdir: str) -> list[dict]:
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.isfile(path):
        return []
    return _rows(path)[0]


def loss_lines(rows: list[dict]) -> list[tuple[str, str, int, list]]:
    """(split, key, colour number, [(step, value)]) for every objective's loss
    the run logged — MLM, NSP and UKnowBERT's hypernym/sense/verb losses —
    train first, then eval (same colour per key)."""
    keys = sorted({k for r in rows for k in r if k.endswith("_loss")},
                  key=lambda k: (k not in ("mlm_loss", "nsp_loss"), k))
    out = []
    for split in ("train", "eval"):
        for number, key in enumerate(keys):
            pts = sorted({r["step"]: r[key] for r in rows
                          if r["split"] == split and isinstance(r.get(key), (int, float))}.items())
            if pts:
                out.append((split, key, number, pts))
    return out


def plot_loss_curve(workdir: str) -> str | None:
    rows = read_metrics(workdir)
    if not rows:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    colors = plt.get_cmap("tab10").colors
    for split, key, number, pts in loss_lines(rows):
        ax.plot(*zip(*pts), "-" if split == "train" else "o--", color=colors[number % 10],
                label=f"{split} {key}")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(f"kjax pretraining: {os.path.basename(os.path.abspath(workdir))}")
    ax.grid(alpha=0.3)
    ax.legend()
    path = os.path.join(workdir, "loss_curve.png")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
