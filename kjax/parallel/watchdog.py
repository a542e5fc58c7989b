"""A lost process in a multi-process run: every other process stops within
KJAX_PEER_TIMEOUT seconds (default 60) with one line naming it, instead of
waiting in a collective that will never complete.

A crashed host (kill -9, a kernel panic, a TPU VM taken away) sends nothing:
its peers sit in the next all-reduce, or in orbax's save barrier, until
jax's coordination service misses its heartbeats (jax's default: 100 s) and
aborts every process with a C++ stack dump. kjax's watchdog, one daemon
thread per process started right after `jax.distributed.initialize`, does
the same job politely: every `interval` seconds it bumps this process's
counter in the coordination service's key-value store and reads everyone's
(one RPC each way); a peer whose counter has not moved for the timeout, or a
coordinator that no longer answers, ends this process with

    kjax: error: process 1 of 2 stopped responding (...)

and exit code PEER_LOST_EXIT. jax's own heartbeat timeout is set above ours
(mesh.py), so ours speaks first. A process whose command returned marks
itself done, so a peer still writing its last checkpoint is never taken for
lost; one that exits with an error marks itself failed, which its peers
count as silence (they may sit in a collective it will never join). The
same line and exit code come when a library aborts the process while a peer
is silent (gloo's checks in its I/O thread, jax's coordination client): see
`guard_aborts`. Nothing is written to the checkpoints: the step being saved
when the peer died is never committed (orbax), and all processes started
again with the same command resume from the last complete one.
"""
from __future__ import annotations

import atexit
import math
import os
import sys
import threading
import time

from kjax.errors import env_seconds

TIMEOUT_ENV = "KJAX_PEER_TIMEOUT"
DEFAULT_TIMEOUT = 60.0
PEER_LOST_EXIT = 69   # EX_UNAVAILABLE (sysexits.h): a service (here: a peer) is gone
KEYS = "kjax_alive/"
_REPORTED = threading.Lock()
_running: list = []   # this process's watchdog, once started
DONE = "done"       # the process's command returned: not waited for
FAILED = "failed"   # it exits with an error: silent from now on


def peer_timeout() -> float:
    return env_seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT, "how long a silent process is waited for")


class Watchdog(threading.Thread):
    def __init__(self, client, index: int, count: int, timeout: float):
        super().__init__(name="kjax-watchdog", daemon=True)
        self.client, self.index, self.count, self.timeout = client, index, count, timeout
        self.interval = max(0.2, min(2.0, timeout / 10))
        self.stopped = threading.Event()

    def _beat(self, value: str) -> None:
        self.client.key_value_set(f"{KEYS}{self.index}", value, allow_overwrite=True)

    def run(self) -> None:
        start = time.monotonic()
        seen: dict[int, str] = {}
        moved = {i: start for i in range(self.count) if i != self.index}
        answered, beat = start, 0
        while not self.stopped.wait(self.interval):
            beat += 1
            try:
                self._beat(str(beat))
                values = self._values()
            except Exception as e:  # noqa: BLE001 - the coordinator did not answer
                if time.monotonic() - answered > self.timeout:
                    first = " ".join(str(e).split())[:120]
                    self._lost(0, f"the coordinator at {os.environ.get('JAX_COORDINATOR_ADDRESS')}"
                               f" has not answered for {self.timeout:.0f} s: {first}")
                continue
            now = answered = time.monotonic()
            for i in list(moved):
                value = values.get(str(i))
                if value == DONE:
                    del moved[i]          # finished normally: not waited for
                elif value != seen.get(i):
                    seen[i], moved[i] = value, now
                elif now - moved[i] > self.timeout:
                    self._lost(i, f"it exited with an error {now - moved[i]:.0f} s ago"
                               if value == FAILED else
                               f"no sign of life for {now - moved[i]:.0f} s")

    def _values(self) -> dict[str, str]:
        return {k.rsplit("/", 1)[-1]: v for k, v in self.client.key_value_dir_get(KEYS)}

    def silent_peer(self) -> int | None:
        """A peer whose counter does not move over three intervals (0 when the
        coordinator does not answer), or None: asked when a collective failed."""
        try:
            before = self._values()
            time.sleep(3 * self.interval)
            after = self._values()
        except Exception:  # noqa: BLE001
            return 0
        return next((i for i in range(self.count) if i != self.index and
                     after.get(str(i)) != DONE and before.get(str(i)) == after.get(str(i))), None)

    def _lost(self, peer: int, why: str) -> None:
        with _REPORTED:   # the thread and the CLI may both find it: one line
            if self.stopped.is_set():
                return
            self.stopped.set()
        print(f"kjax: error: process {peer} of {self.count} stopped responding ({why}; its "
              f"host crashed, was preempted or lost the network); process {self.index} stops "
              f"too. Restart all {self.count} processes with the same command: they resume "
              f"from the last complete checkpoint", file=sys.stderr, flush=True)
        os._exit(PEER_LOST_EXIT)   # the main thread may sit in a collective that never returns

    def stop(self, outcome: str = FAILED) -> None:
        """This process is finishing (DONE: its command returned; FAILED: an
        error ends it): say so, and stop watching. The first call counts."""
        with _REPORTED:
            if self.stopped.is_set():
                return
            self.stopped.set()
        try:
            self._beat(outcome)
        except Exception:  # noqa: BLE001 - the coordinator may be gone already
            pass

    def on_abort(self) -> None:
        """A library is aborting this process: when a peer is silent, that is
        the cause, and the process ends with the lost-process line instead."""
        if self.stopped.is_set():
            return
        peer = self.silent_peer()
        if peer is not None:
            self._lost(peer, "silent when a collective library aborted this process")


def start(timeout: float) -> Watchdog | None:
    """Starts the watchdog of this process (after jax.distributed.initialize)."""
    import jax
    from jax._src import distributed   # the client jax made; private, hence the guard
    client = getattr(distributed.global_state, "client", None)
    if client is None or jax.process_count() < 2 or not math.isfinite(timeout):
        return None
    dog = Watchdog(client, jax.process_index(), jax.process_count(), timeout)
    dog.start()
    _running.append(dog)
    atexit.register(dog.stop)   # FAILED unless finished() came first; before jax's shutdown
    guard_aborts(dog)
    return dog


def finished() -> None:
    """This process's command returned (the CLI calls this): its peers stop
    waiting for it, whatever they are still writing."""
    for dog in _running:
        dog.stop(DONE)


_on_abort = None   # the C handler below, kept alive for as long as it is installed


def guard_aborts(dog: Watchdog) -> None:
    """SIGABRT through `dog.on_abort` first. A peer that dies in the middle of
    a collective can make gloo abort the survivor from its I/O thread (a
    C++ exception nobody catches, e.g. "Received data size doesn't match
    expected size": docs/RECOVERY.md), before the watchdog sees the silence;
    Python's own signal handlers would only run after the abort. The handler
    runs in the aborting thread: with a silent peer it prints the lost-process
    line and exits PEER_LOST_EXIT; otherwise it puts the default action back
    and returns, and the abort goes on (without faulthandler's Python
    traceback, where that was on). Being Python, it needs the GIL: jax
    releases it while a thread waits on the device or a collective."""
    global _on_abort
    import ctypes
    import signal
    try:
        libc = ctypes.CDLL(None)
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.signal.restype = ctypes.c_void_p
    except (OSError, AttributeError):   # no C library to ask: aborts stay aborts
        return

    def on_abort(signum):
        dog.on_abort()   # does not return when a peer is silent
        libc.signal(signal.SIGABRT, None)   # SIG_DFL: abort() raises it again

    _on_abort = ctypes.CFUNCTYPE(None, ctypes.c_int)(on_abort)
    libc.signal(signal.SIGABRT, ctypes.cast(_on_abort, ctypes.c_void_p))


def explain(error: BaseException) -> None:
    """For an error that ends a multi-process run (the CLI calls this): when a
    peer has gone silent, that is the cause (a collective with a dead peer
    fails after gloo's own timeouts, sometimes before the watchdog's thread
    gets to run): the lost-process line and exit code instead of a traceback."""
    dog = _running[0] if _running else None
    if dog is None or dog.stopped.is_set():
        return
    peer = dog.silent_peer()
    if peer is not None:
        first = " ".join(str(error).split())[:120] or type(error).__name__
        dog._lost(peer, f"silent while a collective waited for it: {first}")
