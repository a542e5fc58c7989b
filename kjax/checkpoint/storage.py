"""Storage faults as one line: a full disk, a read-only file system or a
denied permission, wherever they surface (the workdir check before
compiling, orbax's background write threads, TensorStore's status codes,
metrics appends), become one `KjaxError` that names the path, the last
complete checkpoint and what to do. Paths go through etils.epath, so the
same checks work on gs:// (where "full" means a quota and "denied" a 403).

`write_small_arrays_whole` and `size_tensorstore_retries` set how orbax
writes arrays (who writes a replicated one; how long TensorStore retries).

`quiet_library_logs` keeps orbax's own log records (warnings meant for its
developers, and error records with tracebacks from its background threads,
for failures kjax reports itself) off the CLI's stderr; KJAX_DEBUG=1 shows
them.
"""
from __future__ import annotations

import errno
import functools
import logging
import os
import re
import uuid

from kjax import paths, store_outage
from kjax.errors import KjaxError

FULL, READ_ONLY, DENIED = "full", "read-only", "denied"
_ERRNO_KIND = {errno.ENOSPC: FULL, errno.EDQUOT: FULL, errno.EFBIG: FULL,
               errno.EROFS: READ_ONLY, errno.EACCES: DENIED, errno.EPERM: DENIED}
# TensorStore/absl status codes and the strerror texts orbax passes on as text.
_TEXT_KIND = ((re.compile(r"RESOURCE_EXHAUSTED|No space left|quota|File too large"), FULL),
              (re.compile(r"Read-only file system"), READ_ONLY),
              (re.compile(r"PERMISSION_DENIED|Permission denied|Operation not permitted|"
                          r"\b403\b"), DENIED))
_REASON = {FULL: "no space left on the device (or a quota or file-size limit)",
           READ_ONLY: "the file system is read-only", DENIED: "permission denied"}
_FIX = {FULL: "Free space there (or pass a --workdir with room)",
        READ_ONLY: "Make it writable again (remount it read-write) or pass another --workdir",
        DENIED: "Give this user write access there (chmod/chown, bucket IAM) or pass "
                "another --workdir"}
_PATH_IN_TEXT = re.compile(r"(?:local file|file) \"([^\"]+)\"|'(/[^']+)'")


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def fault_kind(exc: BaseException) -> str | None:
    """FULL / READ_ONLY / DENIED when `exc` (or what caused it) is a storage fault."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in _ERRNO_KIND:
            return _ERRNO_KIND[e.errno]
        text = str(e)
        for pattern, kind in _TEXT_KIND:
            if pattern.search(text):
                return kind
    return None


_ORBAX_TMP_STEP = re.compile(r"^(.*/\d+)\.orbax-checkpoint-tmp.*$")


def fault_path(exc: BaseException, default: str) -> str:
    """The file the fault names (OSError.filename, TensorStore's "local file"),
    as the step folder when it lies in orbax's temporary copy of one; else `default`."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.filename:
            path = str(e.filename)
            break
        match = _PATH_IN_TEXT.search(str(e))
        if match:
            path = (match.group(1) or match.group(2)).rstrip("/")
            break
    else:
        return default
    return _ORBAX_TMP_STEP.sub(r"\1", path)


def last_step_text(step: int | None) -> str:
    return (f"the last complete checkpoint is step {step}" if step is not None
            else "no checkpoint was completed yet")


# TensorStore's words for a store it could not reach (its GCS driver's retries
# spent): the status, or, for a write, ABORTED with curl's connection error.
_TS_UNREACHABLE = re.compile(r"UNAVAILABLE|DEADLINE_EXCEEDED|retry attempts failed: CURL error "
                             r"(?:Could not connect|Couldn't connect|Timeout|Failure when)")


def unreachable_error(exc: BaseException, path: str,
                      last_step: int | None) -> store_outage.StoreUnreachable | None:
    """An object store that stayed unreachable past the limit (kjax's own
    retries gave up, or TensorStore's, sized to twice the limit, did), naming
    the last complete checkpoint; None for any other error."""
    error = store_outage.unreachable_in(exc)
    if error is None and "://" in path:
        text = next((str(e) for e in _chain(exc) if _TS_UNREACHABLE.search(str(e))), None)
        if text is not None:
            bucket = path.split("://", 1)[1].split("/")[0]
            error = store_outage.StoreUnreachable(f"{path.split('://')[0]}://{bucket}",
                                                  store_outage.limit(), text[:160])
    if error is None or last_step is None:   # (no step known: none named)
        return error
    # A save whose last request was sent before the store went away may still
    # be finished by the store, unseen here: the resume then starts after it.
    return error.saving(f"{last_step_text(last_step)} (it resumes from there, or from a "
                        f"later save the store finished after kjax lost it)")


def fault_error(exc: BaseException, default_path: str, last_step: int | None,
                doing: str = "writing") -> KjaxError | None:
    """The one-line error for a storage fault, or None if `exc` is not one."""
    unreachable = unreachable_error(exc, default_path, last_step)
    if unreachable is not None:
        return unreachable
    kind = fault_kind(exc)
    if kind is None:
        return None
    resume = f"it resumes from step {last_step}" if last_step is not None else "it starts afresh"
    return KjaxError(f"{doing} {fault_path(exc, default_path)} failed: {_REASON[kind]}; "
                     f"{last_step_text(last_step)}. {_FIX[kind]}, "
                     f"then run the same command: {resume}")


def listed_last_step(checkpoints: str) -> int | None:
    """The highest step folder in CHECKPOINTS (for messages; unverified), or None."""
    from etils import epath
    try:
        steps = [int(p.name) for p in epath.Path(checkpoints).iterdir() if p.name.isdigit()]
    except Exception:  # noqa: BLE001 - missing or unreadable: no step to name
        return None
    return max(steps) if steps else None


def check_writable(directory: str, last_step: int | None = None) -> None:
    """Creates `directory` if needed and writes (then removes) a probe file in it,
    so a read-only or full workdir is reported before anything compiles."""
    from etils import epath
    path = epath.Path(directory)
    # Each process probes under its own name: hosts of a pod may share a pid.
    probe = path / f".kjax-write-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        # One query (fsspec's isfile), not exists() then is_dir() as epath's
        # is_file asks: on an object store a folder exists only while an object
        # lies under it, and another process's probe can vanish between two
        # queries, so the second would see nothing and the folder read as a file.
        if paths.isfile(directory):
            raise KjaxError(f"--workdir {directory} is a file, not a directory; pass a "
                            f"directory (it is created if missing)")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):   # a fifo, or a file above it
            raise KjaxError(f"--workdir {directory} is not a directory, or a folder above it "
                            f"is a file; pass a directory (it is created if missing)") from None
        probe.write_text("kjax")
        probe.unlink()
    except KjaxError:
        raise
    except Exception as e:  # noqa: BLE001 - classified below, else re-raised
        error = fault_error(e, str(probe), last_step)
        if error is None:
            raise
        raise error from None


# A replica's share of a replicated array below this is not worth its own copy and write.
MIN_REPLICA_SLICE_BYTES = 1 << 20


def write_small_arrays_whole() -> None:
    """orbax splits the write of every replicated array among its replicas
    (replica-parallel, its default on CPU and TPU): each replica copies out a
    slice on the device and writes it. That pays for large arrays on a pod and
    only costs for small ones: a slice op per array and device, compiled once
    per shape at a process's first save (~100 of them for a 2-layer model,
    2.5-4 s on a CPU) and a write each for a few KiB. So an array whose slices
    would be under MIN_REPLICA_SLICE_BYTES is written whole by replica 0, as
    with replica-parallel off; the rest still split. orbax's own choice of
    platform stays (off where JAX_PLATFORMS names a GPU). Either way the
    checkpoint reads back the same. orbax takes the option only through its
    registered jax.Array handler, which keeps its array metadata store."""
    import jax
    import orbax.checkpoint as ocp
    if ocp.type_handlers.get_type_handler(jax.Array) is not _array_handler():
        ocp.type_handlers.register_type_handler(jax.Array, _array_handler(), override=True)


@functools.cache   # one a process: orbax logs each override of its registry
def _array_handler():
    import orbax.checkpoint as ocp
    from orbax.checkpoint._src.metadata.array_metadata_store import Store
    return ocp.type_handlers.ArrayHandler(
        array_metadata_store=Store(), min_slice_bytes_for_replica_parallel=MIN_REPLICA_SLICE_BYTES)


def size_tensorstore_retries() -> None:
    """TensorStore's GCS driver (orbax's array bytes) retries on its own, by
    default 32 times with up to 32 s between tries (a quarter of an hour):
    sized here to twice kjax's outage limit (kjax/store_outage.py), so an
    array write gives up soon after kjax's own requests do, never first.
    orbax builds every TensorStore context from these two dicts (no public
    option for it)."""
    from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils
    # Twice the limit: TensorStore may meet an outage well before kjax's own
    # requests do (its clock starts then), and kjax's limit is what ends the run.
    budget = 2 * store_outage.limit()
    longest = min(32.0, max(1.0, budget / 8))
    tries, waited, delay = 0, 0.0, 1.0
    while waited < budget:
        waited, delay, tries = waited + min(delay, longest), delay * 2, tries + 1
    retries = {"max_retries": max(tries, 1), "initial_delay": "1s",
               "max_delay": f"{longest:.0f}s"}
    for context in (ts_utils._BASE_TS_CONTEXT, ts_utils._DEFAULT_OCDBT_TS_CONTEXT):
        context["gcs_request_retries"] = retries


class _OrbaxRecords(logging.Filter):
    """Remembers the last exception orbax logged (its background threads log
    a failed write and carry on, so a final save can fail without raising),
    and, once `quiet`, keeps orbax's records off stderr."""

    def __init__(self):
        super().__init__()
        self.quiet, self.last_error = False, None

    def filter(self, record: logging.LogRecord) -> bool:
        if "/orbax/" not in record.pathname.replace(os.sep, "/"):
            return True
        if record.exc_info and record.exc_info[1] is not None:
            self.last_error = record.exc_info[1]
        return not self.quiet


_ORBAX = _OrbaxRecords()


def _absl_logger() -> logging.Logger:
    import absl.logging  # noqa: F401 - first, so "absl" is absl's logger and records name their caller
    logger = logging.getLogger("absl")
    if _ORBAX not in logger.filters:
        logger.addFilter(_ORBAX)
    return logger


def take_orbax_error() -> BaseException | None:
    """The last exception orbax logged since the previous call (then forgotten)."""
    error, _ORBAX.last_error = _ORBAX.last_error, None
    return error


def orbax_error_pending() -> bool:
    """Whether orbax logged an exception since `take_orbax_error` was last called."""
    return _ORBAX.last_error is not None


def watch_orbax() -> None:
    """Starts remembering orbax's logged exceptions (Checkpointer does this)."""
    _absl_logger()


def _no_traceback(record: logging.LogRecord) -> bool:
    return not record.exc_info


def quiet_library_logs() -> None:
    """Drops orbax's log records from stderr (the CLI calls this), and the
    tracebacks gcsfs/fsspec log for a request that failed (an outage is
    reported by kjax/store_outage.py in one line)."""
    _absl_logger()
    _ORBAX.quiet = not os.environ.get("KJAX_DEBUG")
    if _ORBAX.quiet:
        for name in ("gcsfs", "fsspec"):
            logger = logging.getLogger(name)
            if _no_traceback not in logger.filters:
                logger.addFilter(_no_traceback)
