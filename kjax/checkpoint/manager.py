"""orbax checkpoints: the train state (params, optimizer state, step, RNG)
and the grain iterator position, saved together, asynchronously.

- Policies are the current orbax ones: save every `checkpoint_every` steps
  or on a preemption signal; keep the latest `keep_checkpoints`.
- orbax writes into a temporary directory and renames it when complete, so
  a checkpoint is never half-written; a step directory that lacks its items
  is reported before anything compiles.
- Params with NaN/Inf are never saved: the run stops with the last good step.
- Restore places every array straight onto the current mesh's shardings.
- Multi-process: every process calls save/restore (orbax coordinates them
  and writes each array shard once); the data item holds one JSON file per
  process (`process_I-of-N.json`), since each process has its own iterator.
"""
from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from kjax.errors import KjaxError

ITEMS = ("state", "data")
policies = ocp.checkpoint_managers


class ProcessJsonHandler(ocp.CheckpointHandler):
    """One JSON document per process, like grain's own orbax handler, but for a
    plain dict (the iterator state), so restore can hand it back before an
    iterator exists. A state saved by another process count is read from
    process 0's file: kjax's loader counts positions in global batches."""

    def save(self, directory, args=None):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / _process_file()).write_text(json.dumps(args.state))

    def restore(self, directory, args=None):
        path = directory / _process_file()
        if not path.exists():
            # Another process count's state, or one file from orbax's JsonSave
            # (checkpoints written before the per-process files).
            others = sorted(directory.glob("process_0-of-*.json")) + [directory / "metadata"]
            path = next((o for o in others if o.exists()), None)
            if path is None:
                raise FileNotFoundError(f"{directory / _process_file()} (and no "
                                        f"process_0-of-*.json)")
        return json.loads(path.read_text())


def _process_file() -> str:
    return f"process_{jax.process_index()}-of-{jax.process_count()}.json"


@ocp.args.register_with_handler(ProcessJsonHandler, for_save=True)
@dataclasses.dataclass
class DataSave(ocp.args.CheckpointArgs):
    state: dict


@ocp.args.register_with_handler(ProcessJsonHandler, for_restore=True)
@dataclasses.dataclass
class DataRestore(ocp.args.CheckpointArgs):
    pass


def all_finite(tree) -> bool:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
              if jnp.issubdtype(x.dtype, jnp.floating)]
    return bool(jnp.all(jnp.stack(leaves))) if leaves else True


class Checkpointer:
    def __init__(self, directory: str, every: int, keep: int, read_only: bool = False):
        self.directory = directory if "://" in directory else os.path.abspath(directory)
        options = ocp.CheckpointManagerOptions(
            save_decision_policy=policies.AnySavePolicy([
                policies.FixedIntervalPolicy(every), policies.PreemptionCheckpointingPolicy()]),
            preservation_policy=policies.LatestN(keep),
            enable_async_checkpointing=True, read_only=read_only,
            create=not read_only)
        self.manager = ocp.CheckpointManager(self.directory, item_names=ITEMS, options=options)

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self.manager.all_steps())

    def check_complete(self, step: int) -> None:
        """A step directory missing an item (copied by hand, truncated) is an error."""
        if "://" in self.directory:
            return  # remote stores: trust orbax's atomic commit
        step_dir = os.path.join(self.directory, str(step))
        missing = [i for i in ITEMS if not os.path.isdir(os.path.join(step_dir, i))]
        if missing:
            raise KjaxError(f"checkpoint {step_dir} is incomplete (missing {', '.join(missing)}); "
                            f"delete that directory to resume from the previous step, or pass "
                            f"another --workdir")

    def should_save(self, step: int) -> bool:
        return self.manager.should_save(step)

    def reached_preemption(self, step: int) -> bool:
        return self.manager.reached_preemption(step)

    def save(self, step: int, state, data_state: dict, force: bool = False) -> bool:
        if not all_finite(state["params"]):
            last = self.latest_step()
            raise KjaxError(f"params contain NaN/Inf at step {step}: not saving. The last good "
                            f"checkpoint is step {last}; lower train.learning_rate or raise "
                            f"train.warmup_steps and resume")
        return self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), data=DataSave(data_state)), force=force)

    def restore(self, step: int, abstract_state):
        self.check_complete(step)
        try:
            restored = self.manager.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_state), data=DataRestore()))
        except (ValueError, KeyError, FileNotFoundError, json.JSONDecodeError) as e:
            raise KjaxError(f"checkpoint {self.directory}/{step} could not be restored "
                            f"({type(e).__name__}: {str(e).splitlines()[0][:200]}); it may be "
                            f"corrupt or from another config: delete it or use another "
                            f"--workdir") from None
        return restored["state"], restored["data"]

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()
