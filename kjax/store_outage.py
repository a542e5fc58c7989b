"""Riding out an object-store outage: every gs:// request kjax makes (its own
files through kjax/paths.py, orbax's folders and metadata through
etils.epath; both reach gcsfs) is retried with backoff while the store is
unreachable, up to a limit, and then ends in one `StoreUnreachable` line.

- The limit: KJAX_STORE_OUTAGE_LIMIT seconds (default 300, five minutes:
  what orbax's own save and barrier timeouts allow for). It counts from the
  first failed request of an outage, whichever thread made it; any request
  that succeeds ends the outage.
- One line when the waiting starts and one when the store answers again, on
  stderr, however many threads wait together.
- Past the limit every request fails at once (no second wait per thread), so
  the run stops promptly with the last complete checkpoint named by the
  trainer (kjax/pretrain/trainer.py) and exit code STORE_EXIT.
- What counts as "unreachable" is what gcsfs itself retries (connection
  errors, timeouts, HTTP 408/429/5xx); a 404 or 403 is an answer, not an outage.
- orbax's array bytes go through TensorStore's own GCS driver, which has its
  own retries: kjax/checkpoint/manager.py sizes them to the same limit.

`register()` (kjax/__init__.py) makes `RetryingGCSFileSystem` fsspec's `gs`
implementation; the class is only imported when gs:// is first used.
"""
from __future__ import annotations

import asyncio
import os
import random
import re
import sys
import threading
import time

from kjax.errors import KjaxError, env_seconds

LIMIT_ENV = "KJAX_STORE_OUTAGE_LIMIT"
DEFAULT_LIMIT = 300.0
STORE_EXIT = 75   # EX_TEMPFAIL (sysexits.h): a temporary failure; run the same command again
MAX_DELAY = 16.0  # the longest pause between two tries (seconds)


class StoreUnreachable(KjaxError):
    """The object store stayed unreachable past the limit. `saved` says what
    was last saved (the trainer adds it: "the last complete checkpoint is step 20")."""
    exit_code = STORE_EXIT

    def __init__(self, store: str | None, waited: float, error: str | None,
                 saved: str | None = None):
        self.store, self.waited, self.error, self.saved = store, waited, error, saved
        saved = f"; {saved}" if saved else ""
        super().__init__(
            f"{store or 'the object store'} was unreachable for {waited:.0f} s, longer than "
            f"{LIMIT_ENV}={limit():.0f} s (last error: {error}){saved}. Run the same command "
            f"again once it answers: nothing saved before is lost")

    def saving(self, saved: str) -> "StoreUnreachable":
        """The same error, naming what was last saved."""
        return StoreUnreachable(self.store, self.waited, self.error, saved)


def limit() -> float:
    return env_seconds(LIMIT_ENV, DEFAULT_LIMIT, "how long kjax waits for an unreachable "
                       "object store", allow_zero=True)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Outage:
    """The state of the current outage, shared by every thread of the process."""

    def __init__(self):
        self.lock = threading.Lock()
        self.since = self.store = self.error = None
        self.gave_up = False

    def failed(self, store: str, error: BaseException) -> float:
        """Notes a failed request; returns the seconds the outage has lasted."""
        now = time.monotonic()
        with self.lock:
            self.error = _short(error)
            if self.since is None:
                self.since, self.store = now, store
                _say(f"kjax: warning: {store} is unreachable ({self.error}); retrying for up "
                     f"to {limit():.0f} s ({LIMIT_ENV})")
            return now - self.since

    def answered(self, sent: float) -> None:
        """A request sent at `sent` (time.monotonic) got an answer. Only one
        sent after the outage began says the store is back: one sent before
        may have been answered before the cut and reach kjax only now, while
        the store is still away."""
        if self.since is None:   # (read without the lock: the common case costs nothing)
            return
        with self.lock:
            if self.since is not None and sent >= self.since and not self.gave_up:
                _say(f"kjax: {self.store} is reachable again after "
                     f"{time.monotonic() - self.since:.0f} s; carrying on")
                self.since = None

    def give_up(self) -> StoreUnreachable:
        with self.lock:
            self.gave_up = True
            waited = time.monotonic() - (self.since or time.monotonic())
        return StoreUnreachable(self.store, waited, self.error)


OUTAGE = Outage()


def _short(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text[:160]


def gave_up() -> bool:
    return OUTAGE.gave_up


def _in_chain(exc: BaseException | None) -> StoreUnreachable | None:
    seen = set()
    e = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, StoreUnreachable):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def unreachable_in(exc: BaseException | None) -> StoreUnreachable | None:
    """The StoreUnreachable behind `exc` (in its cause chain), or a new one when
    this process gave up on the store (a library wrapped the error in its own)."""
    e = _in_chain(exc)
    if e is not None:
        return e
    if OUTAGE.gave_up and exc is not None:
        return StoreUnreachable(OUTAGE.store, limit(), OUTAGE.error)
    return None


def _store_of(method_path_args: tuple) -> str:
    """gs://BUCKET of a gcsfs request: its path is a template ("b/{}/o/{}",
    the bucket the first argument) or a URL (".../b/BUCKET/o/...")."""
    args = [str(a) for a in method_path_args]
    if len(args) > 2 and args[1].startswith("b/{}"):
        return f"gs://{args[2]}"
    found = re.search(r"(?:^|/)b/([^/?{}]+)", args[1]) if len(args) > 1 else None
    return f"gs://{found.group(1)}" if found else "the gs:// store"


async def ride_out(call, store: str):
    """`await call()` until it answers, through an outage of up to `limit()` seconds."""
    from gcsfs.retry import is_retriable
    attempt = 0
    while True:
        sent = time.monotonic()
        try:
            result = await call()
        except Exception as e:  # noqa: BLE001 - classified here
            if isinstance(e, FileNotFoundError) or not is_retriable(e):
                OUTAGE.answered(sent)   # an answer (404, 403, ...): the store is up
                raise
            if OUTAGE.gave_up:
                raise OUTAGE.give_up() from None
            waited, budget = OUTAGE.failed(store, e), limit()
            if waited >= budget:
                raise OUTAGE.give_up() from None
            delay = min(0.5 * 2 ** attempt, MAX_DELAY) * (0.5 + random.random() / 2)
            await asyncio.sleep(min(delay, budget - waited + 0.05))
            attempt += 1
            continue
        OUTAGE.answered(sent)
        return result


# the libraries' loggers that log an exception they then raise again: a read
# prefetched in the background (fsspec.prefetcher), a deferred close (gcsfs)
LIBRARY_LOGGERS = ("fsspec", "fsspec.prefetcher", "fsspec.caching", "fsspec.asyn", "gcsfs")


def _not_ours(record) -> bool:
    """False for a library's log of a StoreUnreachable: kjax says it in its own
    line when the error reaches the command, so its traceback is noise."""
    return _in_chain(record.exc_info[1] if record.exc_info else None) is None


def quiet_library_logs() -> None:
    import logging
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if _not_ours not in logger.filters:
            logger.addFilter(_not_ours)


def register() -> None:
    """Makes fsspec's `gs` (and `gcs`) RetryingGCSFileSystem, without importing gcsfs now."""
    try:
        import fsspec
    except ImportError:
        return
    for protocol in ("gs", "gcs"):
        fsspec.register_implementation(protocol, f"{__name__}.RetryingGCSFileSystem",
                                       clobber=True)


def __getattr__(name):   # the class needs gcsfs: built on first use
    if name != "RetryingGCSFileSystem":
        raise AttributeError(name)
    import gcsfs

    # gcsfs's own decorated requests retry ~30 s and log a traceback when they
    # give up; the bare functions under the decorator are retried here instead.
    raw_request = gcsfs.GCSFileSystem._request.__wrapped__
    raw_get = gcsfs.GCSFileSystem._get_file_request.__wrapped__

    class RetryingGCSFileSystem(gcsfs.GCSFileSystem):
        async def _request(self, *args, **kwargs):
            return await ride_out(lambda: raw_request(self, *args, **kwargs), _store_of(args))

        async def _get_file_request(self, rpath, lpath, *args, **kwargs):
            return await ride_out(lambda: raw_get(self, rpath, lpath, *args, **kwargs),
                                  f"gs://{str(rpath).split('://')[-1].split('/')[0]}")

    quiet_library_logs()
    globals()["RetryingGCSFileSystem"] = RetryingGCSFileSystem
    return RetryingGCSFileSystem
