"""How a test waits on another process: for an event, never for time.

`wait_for(what, event, ...)` polls `event()` until it returns something other
than None or False, and returns that. It fails (one pytest failure, never an
unrelated exception) when its deadline passes or when a process the event
depends on exits first, and the failure says what it saw: the test's own
account (`saw`: steps logged, checkpoints committed, ...) and the last lines
of every process it watched. The events the fault tests wait on are here too:
steps logged (metrics.jsonl), checkpoints committed (the checkpoint manager's
own listing, as a restart would see them, not a folder listing) and a
process's exit (`finish`, `run`).
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import time
from typing import Callable, Sequence

import pytest

POLL = 0.05   # seconds between two looks: events here take seconds to minutes


class Watched:
    """A process a test waits on: its name in failures, and where its output goes."""

    def __init__(self, name: str, process: subprocess.Popen, log: str | None = None,
                 lines: Callable[[], list[str]] | None = None):
        self.name, self.process, self.log, self._lines = name, process, log, lines

    def poll(self):
        return self.process.poll()

    def tail(self, n: int = 15) -> str:
        if self._lines is not None:
            lines = self._lines()
        elif self.log and os.path.exists(self.log):
            with open(self.log, errors="replace") as f:
                lines = f.read().replace("\r", "\n").splitlines()
        else:
            lines = []
        lines = [line for line in lines if line.strip()][-n:]
        return "\n".join(f"    {line[:300]}" for line in lines) or "    (no output)"

    def stop(self) -> None:
        """Kills it if it still runs (a failed test must not leave it behind)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def start(cmd: list[str], name: str, log: str, stdout: str | None = None, **popen) -> Watched:
    """CMD started with its stderr in the file LOG, and its stdout there too
    unless STDOUT names a file of its own."""
    with open(log, "w") as err, open(stdout or os.devnull, "w") as out:
        process = subprocess.Popen(cmd, stdout=out if stdout else err, stderr=err, text=True,
                                   **popen)
    return Watched(name, process, log)


def _account(saw, procs: Sequence[Watched]) -> str:
    parts = []
    if saw is not None:
        try:
            parts.append(f"saw: {saw()}")
        except Exception as e:  # noqa: BLE001 - the account must not hide the failure
            parts.append(f"saw: (could not look: {type(e).__name__}: {e})")
    for p in procs:
        state = "running" if p.poll() is None else f"exit code {p.poll()}"
        parts.append(f"{p.name} ({state}), last lines:\n{p.tail()}")
    return "\n".join(parts)


def wait_for(what: str, event: Callable, *, timeout: float, saw: Callable[[], str] | None = None,
             procs: Sequence[Watched] = (), needs: Sequence[Watched] | None = None,
             poll: float = POLL):
    """`event()`'s first value that is not None/False. Fails when `timeout`
    seconds pass first, or when a process of `needs` (default: all of
    `procs`) exits before the event; `procs` are the processes whose last
    lines the failure shows."""
    needs = procs if needs is None else needs
    deadline = time.monotonic() + timeout
    while True:
        value = event()
        if value is not None and value is not False:
            return value
        gone = [p for p in needs if p.poll() is not None]
        if gone:
            value = event()   # it may have happened just before the exit
            if value is not None and value is not False:
                return value
            pytest.fail(f"{gone[0].name} exited with code {gone[0].poll()} before {what}\n"
                        f"{_account(saw, procs)}", pytrace=False)
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout:.0f} s\n{_account(saw, procs)}",
                        pytrace=False)
        time.sleep(poll)


def finish(proc: Watched, timeout: float, what: str | None = None, saw=None,
           procs: Sequence[Watched] = ()) -> int:
    """`proc`'s exit code once it exits; past `timeout` it is killed and the
    test fails with its last lines (and those of `procs`)."""
    try:
        return wait_for(what or f"exit of {proc.name}", proc.poll, timeout=timeout, saw=saw,
                        procs=[proc, *[p for p in procs if p is not proc]], needs=())
    except BaseException:
        proc.stop()
        raise


def run(cmd: list[str], timeout: float, name: str | None = None,
        **popen) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, capture_output=True, text=True) with a deadline
    that fails the test with the command's last lines, not TimeoutExpired."""
    name = name or " ".join(os.path.basename(str(a)) for a in cmd[:4])
    with tempfile.TemporaryDirectory(prefix="kjax-run-") as tmp:
        out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        code = finish(start(cmd, name, err, out, **popen), timeout, f"exit of `{name}`")
        with open(out) as o, open(err) as e:
            return subprocess.CompletedProcess(cmd, code, o.read(), e.read())


# ---- the events -------------------------------------------------------------------

def steps_logged(workdir: str) -> list[int]:
    """The train steps in WORKDIR's metrics.jsonl (a line cut by a kill is skipped)."""
    from kjax.train.metrics import read_metrics
    return [r["step"] for r in read_metrics(workdir) if r.get("split") == "train"]


def last_logged(workdir: str) -> int:
    return max(steps_logged(workdir), default=0)


def committed(checkpoints: str) -> list[int]:
    """The steps kjax's checkpoint manager (orbax's) counts as committed in
    CHECKPOINTS, read afresh: what a restart would restore from. A step still
    being written, or one whose writer died, is not among them."""
    from kjax.checkpoint.manager import Checkpointer
    for attempt in range(3):   # a step folder renamed while orbax lists them: look again
        if not os.path.isdir(checkpoints):
            return []
        try:
            manager = Checkpointer(checkpoints, 1, 1, read_only=True)
        except OSError:
            if attempt == 2:
                raise
            continue
        try:
            return manager.all_steps()
        finally:
            manager.abandon()


def progress(workdir: str) -> str:
    """What a failure says it saw of a training run."""
    steps = steps_logged(workdir)
    return (f"steps logged: {steps[-1] if steps else 'none'} ({len(steps)} rows); checkpoints "
            f"committed: {committed(os.path.join(workdir, 'checkpoints')) or 'none'}")
