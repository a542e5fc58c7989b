"""Goodput: where each `kjax train` session's wall time went (step, compile,
checkpoint, data wait, eval, other), summed over restarts in goodput.json."""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import jax

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
