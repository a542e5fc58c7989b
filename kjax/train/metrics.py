"""Where metrics go (JSONL + TensorBoard, process 0 only), the loss-curve
picture, the peak FLOP/s that MFU is measured against, and goodput: where
each session's wall time went, summed over restarts in goodput.json."""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

# Datasheet dense bf16 FLOP/s per JAX device. TPU v2/v3 expose each core as a
# device (2 per chip): v2 45 and v3 123 TFLOP/s per chip.
DATASHEET_PEAKS = {
    "TPU v2": 22.5e12, "TPU v3": 61.5e12, "TPU v4": 275e12, "TPU v5 lite": 197e12,
    "TPU v5e": 197e12, "TPU v5p": 459e12, "TPU v6 lite": 918e12, "TPU v6e": 918e12,
    "H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12,
}


def measure_matmul_flops(dtype: str = "float32", n: int = 1024, reps: int = 10) -> float:
    """FLOP/s of a square matmul on this host: the CPU 'peak' for MFU. The
    fastest of `reps` runs, not their mean: a peak measured while other jobs
    share the cores would be low and put MFU above 100 %."""
    a = jnp.ones((n, n), dtype)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    fastest = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        f(a).block_until_ready()
        fastest = min(fastest, time.perf_counter() - start)
    return 2 * n ** 3 / fastest


def peak_flops(config) -> tuple[float, str]:
    """Whole-mesh peak FLOP/s and where the figure came from."""
    if config.train.peak_flops > 0:
        return config.train.peak_flops * jax.device_count(), "config"
    kind = jax.devices()[0].device_kind
    for name, flops in DATASHEET_PEAKS.items():
        if name.lower() in kind.lower():
            return flops * jax.device_count(), f"datasheet {name}"
    # CPU: all fake devices share the same cores, so the machine's matmul rate
    # is the whole mesh's peak.
    return measure_matmul_flops(config.model.dtype), "measured matmul"


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


# Compile time comes from jax's own monitoring events (tracing, lowering,
# XLA compile, persistent-cache reads), so it is exact wherever it happens.
_COMPILE_EVENTS = ("/jax/core/compile/", "/jax/compilation_cache/cache_retrieval_time_sec")
_compile_seconds = [0.0]


def _on_duration(event: str, duration: float, **_) -> None:
    if event.startswith(_COMPILE_EVENTS):
        _compile_seconds[0] += duration


jax.monitoring.register_event_duration_secs_listener(_on_duration)

BUCKETS = ("step", "compile", "checkpoint", "data_wait", "eval", "other")


class Goodput:
    """Host-side timers for one `kjax train` session. `step` (productive time)
    is the training loop's wall time minus everything else inside it; compile
    time is taken out of whichever bucket it happened in; `other` is startup,
    init and the end of the run. Device work overlaps host time, so a bucket
    holds the time the host was blocked there. Restarts (sessions that resumed
    from a checkpoint) and lost steps (computed again after a restart, seen at
    log granularity) accumulate in WORKDIR/goodput.json (process 0 writes)."""

    def __init__(self, workdir: str, enabled: bool = True):
        self.enabled, self.path = enabled, os.path.join(workdir, "goodput.json")
        self.t0, self.c0 = time.perf_counter(), _compile_seconds[0]
        self.spent = dict.fromkeys(("checkpoint", "data_wait", "eval"), 0.0)
        self.loop = None
        self.previous = self._load() if enabled else {}
        self.resumed_at, self.last_step = None, 0

    def _load(self) -> dict:
        try:
            with open(self.path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}  # first session, or an unreadable file: start counting afresh

    @contextlib.contextmanager
    def timed(self, bucket: str):
        t, c = time.perf_counter(), _compile_seconds[0]
        try:
            yield
        finally:
            self.spent[bucket] += time.perf_counter() - t - (_compile_seconds[0] - c)

    def start_loop(self, start_step: int) -> None:
        self.resumed_at = start_step if start_step > 0 else None
        self.last_step = start_step
        self.loop = [time.perf_counter(), _compile_seconds[0], sum(self.spent.values()), None]

    def end_loop(self) -> None:
        if self.loop is not None and self.loop[3] is None:
            self.loop[3] = (time.perf_counter(), _compile_seconds[0], sum(self.spent.values()))

    def session(self) -> dict:
        """Seconds per bucket for this session so far."""
        wall, compile_s = time.perf_counter() - self.t0, _compile_seconds[0] - self.c0
        step = 0.0
        if self.loop is not None:
            t, c, other = self.loop[3] or (time.perf_counter(), _compile_seconds[0],
                                           sum(self.spent.values()))
            step = (t - self.loop[0]) - (c - self.loop[1]) - (other - self.loop[2])
        out = {"step": step, "compile": compile_s, **self.spent}
        out["other"] = max(0.0, wall - sum(out.values()))
        out["wall"] = wall
        return out

    def totals(self, step: int) -> dict:
        """All sessions in this workdir, this one included."""
        p = self.previous
        self.last_step = max(self.last_step, step)
        lost = p.get("lost_steps", 0)
        if self.resumed_at is not None:
            lost += max(0, p.get("last_step", self.resumed_at) - self.resumed_at)
        secs = dict(p.get("seconds", {}))
        for k, v in self.session().items():
            secs[k] = secs.get(k, 0.0) + v
        return {"sessions": p.get("sessions", 0) + 1,
                "restarts": p.get("restarts", 0) + (self.resumed_at is not None),
                "lost_steps": lost, "last_step": self.last_step, "seconds": secs}

    def save(self, step: int) -> None:
        """Persist (at log steps too), so a run killed hard still counts."""
        if self.enabled:
            tmp = self.path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self.totals(step), f)
            os.replace(tmp, self.path)

    def summary(self, step: int) -> dict:
        """Flat figures for metrics.jsonl and the result; prints one line."""
        now, total = self.session(), self.totals(step)
        row = {f"{k}_seconds": v for k, v in now.items()}
        row["goodput"] = now["step"] / max(now["wall"], 1e-9)
        row.update(restarts=total["restarts"], lost_steps=total["lost_steps"],
                   sessions=total["sessions"], total_wall_seconds=total["seconds"]["wall"],
                   total_goodput=total["seconds"]["step"] / max(total["seconds"]["wall"], 1e-9))
        self.save(step)
        if self.enabled:
            parts = ", ".join(f"{k.replace('_', ' ')} {now[k]:.1f} s" for k in BUCKETS)
            print(f"goodput {row['goodput']:.1%} of {now['wall']:.1f} s ({parts}); restarts "
                  f"{row['restarts']}, lost steps {row['lost_steps']}; all {row['sessions']} "
                  f"sessions: {row['total_goodput']:.1%} of {row['total_wall_seconds']:.1f} s",
                  file=sys.stderr, flush=True)
        return row
