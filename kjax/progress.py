"""Progress that tells the truth, in a terminal and in a log file.

On a terminal (stderr is a TTY) a tqdm bar: count, total, rate, ETA and the
verb's figures (loss, ...). Anywhere else (nohup, a job scheduler, CI) tqdm's
carriage-return redraws would be one endless line, so the same facts go out
as plain lines, one every `KJAX_LOG_EVERY_S` seconds (default 30) and at the
end:

    train: 1200/10000 steps (12%) 0:03:05 elapsed, ETA 0:22:40, 6.47 steps/s | loss 6.91

Both go to stderr, so stdout keeps only a verb's results (JSON, tables).
`update` is called with what is *done* (a step whose result is on the host,
a chunk that is written), never with what was merely dispatched.
`Ticker` is the same for work with no count (a C++ trainer): elapsed time.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from tqdm import tqdm


def interactive() -> bool:
    return sys.stderr.isatty()


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _every() -> float:
    try:
        return float(os.environ.get("KJAX_LOG_EVERY_S", "30"))
    except ValueError:
        return 30.0


class Progress:
    """tqdm on a terminal, periodic plain lines elsewhere (see module doc)."""

    def __init__(self, desc: str, total: float | None = None, initial: float = 0,
                 unit: str = "it", enabled: bool = True, unit_scale: bool = False,
                 every_s: float | None = None):
        self.desc, self.total, self.n, self.unit = desc, total, initial, unit
        self.enabled, self.initial, self.unit_scale = enabled, initial, unit_scale
        self.every = _every() if every_s is None else every_s
        self.postfix: dict = {}
        self.start = self.last_line = time.monotonic()
        self.last_update = self.start
        self.rate_from = None   # (time, count) of the first update: the rate leaves out
        #                         what came before it (compilation, opening the corpus)
        self.bar = tqdm(desc=desc, total=total, initial=initial, unit=unit, dynamic_ncols=True,
                        unit_scale=unit_scale) if enabled and interactive() else None

    def _amount(self, n: float) -> str:
        if not self.unit_scale:
            return f"{n:,.0f}"
        for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
            if n >= scale:
                return f"{n / scale:.1f}{suffix}"
        return f"{n:.0f}"

    def line(self) -> str:
        """The plain-text state: count/total (%), elapsed, ETA, rate | figures."""
        now = time.monotonic()
        elapsed = now - self.start
        rate = 0.0    # over the updates (not the time after the last one: saving, ...)
        if self.rate_from is not None and self.n > self.rate_from[1] and \
                self.last_update > self.rate_from[0]:
            rate = (self.n - self.rate_from[1]) / (self.last_update - self.rate_from[0])
        text = f"{self.desc}: {self._amount(self.n)}"
        if self.total:
            text += f"/{self._amount(self.total)} {self.unit} ({self.n / self.total:.0%})"
        else:
            text += f" {self.unit}"
        text += f" {_clock(elapsed)} elapsed"
        if self.total and rate > 0:
            text += f", ETA {_clock((self.total - self.n) / rate)}"
        if rate >= 1 or (rate > 0 and self.unit_scale):
            shown = self._amount(rate) if self.unit_scale or rate >= 100 else f"{rate:.3g}"
            text += f", {shown} {self.unit}/s"
        elif rate > 0:
            text += f", {1 / rate:.2f} s/{self.unit}"
        if self.postfix:
            text += " | " + " ".join(f"{k} {v}" for k, v in self.postfix.items())
        return text

    def update(self, n: float = 1, **figures) -> None:
        self.n += n
        if n:
            self.last_update = time.monotonic()
        if self.rate_from is None and n:
            self.rate_from = (time.monotonic(), self.n)
        if figures:
            self.postfix.update(figures)
        if self.bar is not None:
            self.bar.update(n)
            if figures:
                self.bar.set_postfix(self.postfix, refresh=False)
        elif self.enabled and time.monotonic() - self.last_line >= self.every:
            self._print()

    def set(self, n: float, **figures) -> None:
        """Moves to an absolute count (bytes read so far, ...)."""
        self.update(n - self.n, **figures)

    def write(self, message: str) -> None:
        """A line of its own (an eval result) without breaking the bar."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(message, file=sys.stderr)
        else:
            print(message, file=sys.stderr, flush=True)

    def _print(self) -> None:
        print(self.line(), file=sys.stderr, flush=True)
        self.last_line = time.monotonic()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.enabled and self.n != self.initial:
            self._print()          # the final state, once
        self.enabled = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Ticker:
    """Elapsed time of work that reports no count, redrawn every second on a
    terminal (a thread), a plain line every KJAX_LOG_EVERY_S elsewhere; the
    duration is printed at the end."""

    def __init__(self, desc: str, enabled: bool = True):
        self.desc, self.enabled = desc, enabled
        self.done = threading.Event()
        self.start = time.monotonic()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        tty, every = interactive(), _every()
        while not self.done.wait(1.0 if tty else max(every, 1.0)):
            elapsed = _clock(time.monotonic() - self.start)
            if tty:
                print(f"\r{self.desc}: {elapsed} elapsed", end="", file=sys.stderr, flush=True)
            else:
                print(f"{self.desc}: {elapsed} elapsed", file=sys.stderr, flush=True)

    def __enter__(self):
        if self.enabled:
            print(f"{self.desc} ...", file=sys.stderr, flush=True)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.done.set()
            self.thread.join()
            tail = "" if exc[0] is None else " (failed)"
            print(f"\r{self.desc}: done in {_clock(time.monotonic() - self.start)}{tail}",
                  file=sys.stderr, flush=True)
