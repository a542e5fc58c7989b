"""A checkpoint's state for the tools that only read one (`kjax eval`,
`export`, `analyze`, fine-tuning's `--init`): the explicit step, verified or
refused in one line, or else the newest step that verifies; nothing is
moved (recovery.py). The caller builds the abstract target (kjax.train
knows the model; this package does not import it)."""
from __future__ import annotations

from kjax import paths

from kjax.checkpoint.manager import Checkpointer
from kjax.checkpoint.recovery import restore_newest, restore_step
from kjax.errors import KjaxError
from kjax.run_config import flush_notes


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
