"""A checkpoint's state for the tools that only read one (`kjax eval`,
`export`, `analyze`, `fill-mask`, fine-tuning's `--init`, a phase's
`--init-from`, `kjax average`): the explicit step, verified or refused in one
line, or else the newest step that verifies; nothing is moved (recovery.py).
`restore_params` builds the abstract target from the config (kjax.train, one
layer down, knows the model).

Which weights a tool takes (`--weights`, `init.weights`,
`finetune.init_weights`) is decided here, once: `params` (the trained
parameters) or `ema` (their exponential moving average, kjax/train/ema.py),
the name of the state's subtree either way. A run without an EMA asked for
one is one line (`check_weights`) before any array is read."""
from __future__ import annotations

import os

import jax
import numpy as np

from kjax import paths
from kjax.checkpoint.manager import Checkpointer, ConfigMismatch
from kjax.checkpoint.recovery import restore_newest, restore_step
from kjax.errors import KjaxError
from kjax.config.recorded import flush_notes
from kjax.parallel.mesh import make_mesh
from kjax.train import ema
from kjax.train.state import abstract_state, make_model, make_optimizer

WEIGHTS = ("params", ema.KEY)   # --weights: the state's subtree a tool takes


def locate_checkpoint(path: str, flag: str, hint: str) -> tuple[str, int | None]:
    """(checkpoints directory, step or None for the newest that verifies) for a
    path naming another run: its workdir, its checkpoints/ or checkpoints/STEP."""
    if not paths.exists(path):
        raise KjaxError(f"{flag} {path}: no such file or directory; {hint}")
    path = path.rstrip("/") if paths.is_remote(path) else os.path.normpath(path)
    base = paths.name(path)
    if base.isdigit():
        directory, step = paths.parent(path), int(base)
    else:
        directory = paths.join(path, "checkpoints") if paths.isdir(
            paths.join(path, "checkpoints")) else path
        step = None
    steps = sorted(int(d) for d in paths.listdir(directory) if d.isdigit())
    if not steps:
        raise KjaxError(f"{flag} {path}: no checkpoint steps in {directory}; {hint}")
    if step is not None and step not in steps:
        raise KjaxError(f"{flag} {path}: no step {step} in {directory} (steps: {steps}); {hint}")
    return directory, step


def open_read_only(directory: str, hint: str) -> Checkpointer:
    if not paths.isdir(directory):   # local or gs:// (kjax/paths.py)
        raise KjaxError(f"no checkpoints in {directory}; {hint}")
    return Checkpointer(directory, 1, 1, read_only=True)


def restore_read_only(directory: str, target, step: int | None = None,
                      hint: str = "train first (`kjax train`)", what: str = "--step"):
    """(state, iterator state, step) from DIRECTORY (a run's checkpoints/)."""
    checkpoints = open_read_only(directory, hint)
    try:
        if step is not None:
            state, iterator = restore_step(checkpoints, target, step, what)
            found = state, iterator, step
        else:
            found = restore_newest(checkpoints, target, move_damaged=False)
        if found is None:
            raise KjaxError(f"no checkpoint steps in {directory}; {hint}")
        flush_notes()   # the config fits the checkpoint: its notes are news, not the cause
        return found
    finally:
        checkpoints.abandon()


def check_weights(config, weights: str, run: str, flag: str = "--weights") -> None:
    """One line unless the run of `config` holds the `weights` asked for."""
    if weights not in WEIGHTS:
        raise KjaxError(f"{flag} {weights}: choose {' or '.join(WEIGHTS)}")
    if weights == ema.KEY and not ema.enabled(config.train):
        raise KjaxError(f"{flag} ema: {run} was trained without an EMA of its parameters "
                        f"(train.ema_decay=0 in its config); take its params (--weights "
                        f"params), or train with --config.train.ema_decay=0.999 to keep one")


def chosen_weights(state: dict, weights: str) -> dict:
    """The parameter tree a tool uses: the state's params or its EMA (checked
    before restoring: `check_weights`)."""
    return state[weights]


def restore_params(config, workdir: str, step: int | None = None,
                   weights: str = "params") -> tuple[dict, int]:
    """(params as numpy arrays on the host, step) of WORKDIR/checkpoints for the
    tools that need only them (`kjax export`, `analyze`, `fill-mask`): the
    given step or the newest that verifies (kjax/checkpoint/recovery.py);
    `weights`: the params or their EMA."""
    check_weights(config, weights, workdir)
    directory = paths.join(workdir, "checkpoints")
    target, _ = abstract_state(config, make_mesh(config), make_model(config, True),
                               make_optimizer(config.train))
    try:
        state, _, step = restore_read_only(directory, target, step, hint=(
            f"train first (`kjax train --workdir {workdir}`) or pass the --workdir that "
            f"holds them"))
    except ConfigMismatch as e:
        saved = paths.join(workdir, "kjax_config.py")
        hint = f" (recorded in {saved}: leave --config out to use it)" if paths.isfile(saved) else ""
        raise ConfigMismatch(f"{e}; pass the --config and --config.* overrides the run was "
                             f"trained with{hint} (model sizes, model.input_mode, knowledge "
                             f"weights)") from None
    return jax.tree.map(np.asarray, jax.device_get(chosen_weights(state, weights))), step
