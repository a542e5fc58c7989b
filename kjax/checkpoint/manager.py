"""orbax checkpoints: the train state (params, optimizer state, step, RNG)
and the grain iterator position, saved together, asynchronously, and
verified when restored.

- Policies are the current orbax ones: save every `checkpoint_every` steps
  or on a preemption signal; keep the latest `keep_checkpoints`.
- orbax writes into a temporary directory and renames it when complete, so
  a checkpoint is never half-written. Params with NaN/Inf are never saved.
- Every save records a fingerprint of every array (fingerprint.py) next to
  the iterator state; `restore` recomputes and compares them, so a flipped
  bit, a zeroed chunk or a swapped file is a `DamagedCheckpoint`, not a
  silent restore. Before reading any array, the saved tree (orbax's
  metadata: names, shapes, dtypes) is compared with the config's: a
  complete checkpoint of another config is a `ConfigMismatch`, which names
  the keys that differ and never calls the checkpoint damaged.
- Which step to use, and what happens to damaged ones: recovery.py.
- Storage faults (full, read-only, denied) while saving are one line
  (storage.py); `check_for_errors` surfaces a failed background write at the
  next step instead of at the next save.
- Multi-process: every process calls save/restore (orbax coordinates them
  and writes each array shard once); the data item holds one JSON record per
  process (records.py). Each process reads only the shards its devices
  hold, so one can find a step damaged alone: every process still takes the
  same path through orbax's barrier and kjax's gathers, and all of them
  raise the same kind of error, or none does (`agree`).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

from kjax import store_outage
from kjax.checkpoint import fingerprint, storage
from kjax.checkpoint.quiet import quiet_restore
from kjax.checkpoint.records import DataRestore, DataSave, ProcessJsonHandler, make_record, \
    read_records
from kjax.errors import KjaxError
from kjax.parallel.mesh import host_allgather

ITEMS = ("state", "data")
STEP_METADATA = "_CHECKPOINT_METADATA"
policies = ocp.checkpoint_managers
# TensorStore status codes and errors that say "cannot reach it now", not "it is broken".
TRANSIENT = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "UNAUTHENTICATED", "ABORTED",
             "Connection", "Timeout")


class DamagedCheckpoint(KjaxError):
    """A step's files are missing, unreadable or not the bytes that were written."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"checkpoint {path} is damaged: {reason}")
        self.path, self.reason = path, reason


class ConfigMismatch(KjaxError):
    """A complete checkpoint whose arrays do not fit the config's model."""


class UnreadableCheckpoint(KjaxError):
    """The storage refused or timed out: says nothing about the checkpoint itself."""


class StateReader(ocp.StandardCheckpointHandler):
    """orbax's handler for the train state, restoring, except that a failed
    read's exception is returned, not raised. Each process reads only the shards its
    devices hold, so one process can fail alone; raising would skip orbax's
    barrier at the end of the restore, where the others then wait out its
    300 s and fail with DEADLINE_EXCEEDED instead of agreeing that the step
    is damaged. Saves go through orbax's own handler, which the step's
    metadata names (Checkpointer)."""

    def restore(self, directory, args=None):
        try:
            return super().restore(directory, args=args)
        except Exception as e:  # noqa: BLE001 - raised after the barrier, by Checkpointer.restore
            return e


@ocp.args.register_with_handler(StateReader, for_restore=True)
@dataclasses.dataclass
class StateRestore(ocp.args.StandardRestore):
    pass


DAMAGED, OTHER = 1, 2   # a process's verdict on a step it read; 0: it read it
REASON_BYTES = 256


def agree(path: str, error: Exception | None) -> None:
    """Raises on every process if any process failed to read step `path`, on
    none otherwise. The worst verdict wins: one process that could not reach
    the store (or any other error) makes every process refuse the step
    without calling it damaged, which would move it aside; a damaged read
    makes every process call it damaged, naming the process and its reason.
    A process whose own error is of that kind raises its own."""
    code = 0 if error is None else DAMAGED if isinstance(error, DamagedCheckpoint) else OTHER
    text = "" if error is None else error.reason if code == DAMAGED else str(error)
    said = np.frombuffer(text.encode()[:REASON_BYTES].ljust(REASON_BYTES, b"\0"), np.uint8)
    codes, texts = host_allgather((np.int32(code), said))
    worst = int(codes.max())
    if worst == 0:
        return
    if code == worst:
        raise error
    first = int(np.argmax(codes == worst))
    theirs = f"process {first} of {len(codes)}: " + \
        bytes(texts[first]).rstrip(b"\0").decode(errors="ignore")
    if worst == DAMAGED:
        raise DamagedCheckpoint(path, theirs)
    raise UnreadableCheckpoint(theirs)


def _attempt(read):
    """(read(), None), or (None, the exception it raised)."""
    try:
        return read(), None
    except Exception as e:  # noqa: BLE001 - every process agrees on it first (`agree`)
        return None, e


@jax.jit
def _finite(leaves: list) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


def all_finite(tree) -> bool:
    """Whether every float in `tree` is finite: one compiled reduction over
    the floating leaves (one per leaf was two dispatches and two compiles
    per leaf at a process's first save)."""
    leaves = [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)]
    return bool(_finite(leaves)) if leaves else True


def _shapes(tree) -> dict[str, tuple]:
    return {fingerprint.key_name(p): (tuple(x.shape), str(jnp.dtype(x.dtype)))
            for p, x in jax.tree_util.tree_leaves_with_path(tree)}


def config_differences(saved: dict[str, tuple], wanted: dict[str, tuple]) -> list[str]:
    """What differs between the checkpoint's arrays and the config's, readable."""
    out = [f"{k} is only in the checkpoint" for k in sorted(set(saved) - set(wanted))]
    out += [f"{k} is not in the checkpoint" for k in sorted(set(wanted) - set(saved))]
    out += [f"{k} is {saved[k][1]}{list(saved[k][0])} in the checkpoint, "
            f"{wanted[k][1]}{list(wanted[k][0])} in this config"
            for k in sorted(set(saved) & set(wanted)) if saved[k] != wanted[k]]
    return out


_STORE_NOISE = re.compile(r' in OCDBT database at (?:local file )?"[^"]*"|; at (?:uncompressed )?'
                          r'byte \d+|Error opening "(?:cast|zarr)" driver: ')


def _first_line(e: BaseException) -> str:
    """The most specific cause (TensorStore's, under orbax's wrapper), in one line."""
    while (e.__cause__ or e.__context__) is not None:
        e = e.__cause__ or e.__context__
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = text.split(" See full TensorStore details")[0].split(" [tensorstore_spec=")[0]
    return _STORE_NOISE.sub("", text)[:200]


class Checkpointer:
    def __init__(self, directory: str, every: int, keep: int, read_only: bool = False):
        self.directory = directory.rstrip("/") if "://" in directory else \
            os.path.abspath(directory)
        options = ocp.CheckpointManagerOptions(
            save_decision_policy=policies.AnySavePolicy([
                policies.FixedIntervalPolicy(every), policies.PreemptionCheckpointingPolicy()]),
            preservation_policy=policies.LatestN(keep),
            enable_async_checkpointing=True, read_only=read_only, create=not read_only)
        storage.watch_orbax()
        storage.size_tensorstore_retries()
        storage.write_small_arrays_whole()
        # The newest step seen committed (restored or saved): named when the
        # store cannot be asked any more (an outage past the limit).
        self.known_step = None
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kjax-fingerprint")
        # The step last handed to orbax, and the one not yet seen committed.
        self.saving = self.pending = None
        self.verified = False  # whether the last restore had fingerprints to check
        # The step's metadata names the handler registered last for an item:
        # orbax's own for the state, so plain orbax reads a kjax checkpoint.
        handlers = ocp.handlers.DefaultCheckpointHandlerRegistry()
        data = ProcessJsonHandler()
        for item, args, handler in (
                ("state", StateRestore, StateReader()),
                ("state", ocp.args.StandardSave, ocp.StandardCheckpointHandler()),
                ("data", DataSave, data), ("data", DataRestore, data)):
            handlers.add(item, args, handler)
        self.manager = ocp.CheckpointManager(self.directory, handler_registry=handlers,
                                             options=options)

    def step_path(self, step: int) -> str:
        return f"{self.directory}/{step}"

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def reload(self) -> None:
        self.manager.reload()

    def should_save(self, step: int) -> bool:
        return self.manager.should_save(step)

    def reached_preemption(self, step: int) -> bool:
        return self.manager.reached_preemption(step)

    # --- saving -----------------------------------------------------------
    def last_complete_step(self) -> int | None:
        if store_outage.gave_up():   # asking the store would fail: what this process saw
            if self.pending is not None:   # a save orbax finished without error counts
                try:
                    self.manager.wait_until_finished()
                except Exception:  # noqa: BLE001 - it did not finish: not counted
                    return self.known_step
                if not storage.orbax_error_pending():
                    self.known_step = max(self.pending, self.known_step or self.pending)
            return self.known_step
        try:
            self.manager.reload()
            return self.manager.latest_step()
        except Exception:  # noqa: BLE001 - only used inside an error message
            return self.known_step

    def _fault(self, e: BaseException, doing: str = "writing") -> BaseException:
        where = self.step_path(self.saving) if self.saving is not None else self.directory
        error = storage.fault_error(e, where, self.last_complete_step(), doing)
        return error if error is not None else e

    def save(self, step: int, state, data_state: dict, force: bool = False) -> bool:
        if not all_finite(state["params"]):
            last = self.latest_step()
            raise KjaxError(f"params contain NaN/Inf at step {step}: not saving. The last good "
                            f"checkpoint is step {last}; lower train.learning_rate or raise "
                            f"train.warmup_steps and resume")
        # Fingerprints: started here (views and dispatches, fingerprint.py),
        # summed on a second thread while orbax writes, and awaited in orbax's
        # commit phase by the data item's handler.
        record = self._pool.submit(make_record, fingerprint.PendingSums(state), data_state)
        try:
            self.settle()
            storage.check_writable(self.directory, self.latest_step())
            self.saving = self.pending = step
            return self.manager.save(step, args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), data=DataSave(record)), force=force)
        except KjaxError:
            raise
        except Exception as e:  # noqa: BLE001 - storage faults become one line
            raise self._fault(e) from None

    def check_for_errors(self) -> None:
        """Raises (one line) if a background write failed since the last save."""
        try:
            self.manager.check_for_errors()
        except Exception as e:  # noqa: BLE001
            raise self._fault(e) from None

    def settle(self) -> None:
        """Waits for the pending save and raises (one line) unless it was
        committed: orbax's finalize thread logs a failed background write
        instead of raising it, so the step listing is what tells."""
        pending, self.pending = self.pending, None
        try:
            self.manager.wait_until_finished()
            self.manager.check_for_errors()
        except Exception as e:  # noqa: BLE001
            raise self._fault(e) from None
        if pending is None:
            return
        try:
            self.manager.reload()
        except Exception as e:  # noqa: BLE001 - the store went away after orbax finished:
            if not storage.orbax_error_pending():   # then orbax's word is all there is
                self.known_step = max(pending, self.known_step or pending)
            raise self._fault(e) from None
        if pending in self.manager.all_steps():
            storage.take_orbax_error()
            self.known_step = max(pending, self.known_step or pending)
            return
        cause = storage.take_orbax_error() or RuntimeError("orbax did not commit it")
        error = self._fault(cause)
        if isinstance(error, KjaxError):
            raise error from None
        last = self.last_complete_step()
        raise KjaxError(f"checkpoint {self.step_path(pending)} was not completed "
                        f"({_first_line(cause)}); {storage.last_step_text(last)}. Run the "
                        f"same command to resume from it") from None

    def wait(self) -> None:
        self.settle()

    def close(self) -> None:
        self.settle()
        self._pool.shutdown(wait=False)
        try:
            self.manager.close()
        except Exception as e:  # noqa: BLE001
            raise self._fault(e) from None

    def abandon(self) -> None:
        """Closes after an error, raising nothing (the first error is the one to report)."""
        self._pool.shutdown(wait=False)
        try:
            self.manager.close()
        except Exception:  # noqa: BLE001
            pass

    # --- restoring --------------------------------------------------------
    def saved_shapes(self, step: int) -> dict[str, tuple]:
        path = self.step_path(step)
        missing = [i for i in ITEMS if not (epath.Path(path) / i).exists()]
        if missing:
            raise DamagedCheckpoint(path, f"{' and '.join(missing)} missing")
        try:  # orbax's step record: restores would work without it, but it was written
            json.loads((epath.Path(path) / STEP_METADATA).read_text())
        except Exception as e:  # noqa: BLE001
            raise self._read_error(step, e, f"{STEP_METADATA} is missing or unreadable") \
                from None
        try:
            with quiet_restore():
                tree = self.manager.item_metadata(step)["state"]
            saved = _shapes(tree)
        except Exception as e:  # noqa: BLE001
            raise self._read_error(step, e, "its array metadata cannot be read") from None
        if not saved:
            raise DamagedCheckpoint(path, "its array metadata (state/_METADATA) lists no arrays")
        return saved

    def _check_config(self, step: int, abstract_state) -> None:
        differences = config_differences(self.saved_shapes(step), _shapes(abstract_state))
        if differences:
            more = f" (and {len(differences) - 2} more)" if len(differences) > 2 else ""
            raise ConfigMismatch(f"checkpoint {self.step_path(step)} is complete but was "
                                 f"written with another config: {'; '.join(differences[:2])}"
                                 f"{more}")

    def _read(self, step: int, abstract_state):
        """(state, iterator state, every process's fingerprints) as read by this process."""
        try:
            with quiet_restore():
                state = self.manager.restore(step, args=ocp.args.Composite(
                    state=StateRestore(abstract_state)))["state"]
            if isinstance(state, Exception):   # StateReader's
                raise state
        except Exception as e:  # noqa: BLE001
            raise self._read_error(step, e, "an array cannot be read") from None
        try:
            iterator, parts = read_records(epath.Path(self.step_path(step)) / "data")
        except Exception as e:  # noqa: BLE001
            raise self._read_error(step, e, "the data item is unreadable") from None
        return state, iterator, parts

    def _read_error(self, step: int, e: BaseException, what: str) -> KjaxError:
        path, detail = self.step_path(step), _first_line(e)
        unreachable = storage.unreachable_error(e, path, None)
        if unreachable is not None:
            return unreachable.saving(f"checkpoint {path} was not read and is left as it is")
        if storage.fault_kind(e) == storage.DENIED or any(t in str(e) for t in TRANSIENT):
            return UnreadableCheckpoint(f"cannot read checkpoint {path} ({detail}); the files "
                                        f"were left as they are: check access to the storage "
                                        f"and run the same command again")
        return DamagedCheckpoint(path, f"{what} ({detail})")

    def restore(self, step: int, abstract_state):
        """(state, iterator state) of `step`, verified; see the exceptions above.
        Every process takes the same path, whatever it read (`agree`)."""
        path = self.step_path(step)
        agree(path, _attempt(lambda: self._check_config(step, abstract_state))[1])
        read, error = _attempt(lambda: self._read(step, abstract_state))
        agree(path, error)
        state, iterator, parts = read
        if parts is not None:
            bad = fingerprint.mismatches(fingerprint.total(parts),
                                         fingerprint.restored_sums(state))
            if bad:
                raise DamagedCheckpoint(path, f"{len(bad)} array(s) differ from what was "
                                        f"saved ({', '.join(bad[:3])}"
                                        f"{', ...' if len(bad) > 3 else ''})")
        self.verified = parts is not None
        self.known_step = max(step, self.known_step or step)
        return state, iterator
