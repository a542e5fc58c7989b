"""Keeps orbax's asyncio leftovers from printing tracebacks after a failed
restore or save.

When one array read fails, orbax's restore returns that error and closes the
event loop it ran in, while TensorStore still completes the other reads of
the batch on its own threads. Each completion then calls
`loop.call_soon_threadsafe` on the closed loop ("RuntimeError: Event loop is
closed"), and the batch's coroutines are collected holding their own copy of
the read error ("Encountered error while reading array index"). Python
reports both through `sys.unraisablehook`, seconds later, as a wall of
tracebacks around the one line kjax prints; a failed write leaves asyncio's
"Task exception was never retrieved" records the same way. They are echoes
of an error kjax has already turned into a message, so the CLI drops them
(`install`);
anything else still reaches the previous hooks, and KJAX_DEBUG=1 keeps all.
"""
from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import threading

ECHOES = ("Event loop is closed", "Encountered error while reading array index",
          "was never awaited", "cannot schedule new futures after shutdown")
ORPHANS = ("exception was never retrieved",)
_installed = False


def is_echo(exc: BaseException | None) -> bool:
    """An echo of an error kjax reports itself; once kjax gave up on an
    unreachable object store, every thread's failure is that outage again."""
    from kjax import store_outage
    return exc is not None and (any(text in str(exc) for text in ECHOES)
                                or store_outage.unreachable_in(exc) is not None)


def install() -> None:
    """Filters the echoes out of the unraisable, thread and asyncio reports (idempotent)."""
    global _installed
    if _installed or os.environ.get("KJAX_DEBUG"):
        return
    _installed = True
    previous_unraisable, previous_thread = sys.unraisablehook, threading.excepthook

    def unraisable(info):
        if not is_echo(info.exc_value):
            previous_unraisable(info)

    def thread_hook(args):
        if not is_echo(args.exc_value):
            previous_thread(args)

    sys.unraisablehook, threading.excepthook = unraisable, thread_hook
    # kjax itself runs no asyncio: what asyncio logs are orbax's orphaned tasks.
    logging.getLogger("asyncio").addFilter(
        lambda record: not is_echo(record.exc_info[1] if record.exc_info else None)
        and not any(text in record.getMessage() for text in ECHOES + ORPHANS))


@contextlib.contextmanager
def quiet_restore():
    """On failure, collects the failed batch's coroutines at once (so their
    echoes, if any, come now and through the filters, not at exit)."""
    try:
        yield
    except BaseException:
        gc.collect()
        raise
