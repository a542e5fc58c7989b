"""Which checkpoint step a command uses, and what happens to damaged ones.

- Without an explicit step, the newest step that restores *and verifies*
  (manager.py) is used. A damaged step is named in one warning line.
  `kjax train` (and fine-tuning runs resuming their own checkpoints) move it
  aside, to CHECKPOINTS/damaged/STEP-UTCTIME, outside orbax's step listing,
  so the run continues from the previous step and later saves cannot mix
  with it. Nothing is ever deleted: move it back to retry it.
- Read-only tools (eval, export, analyze, fine-tune --init) fall back the
  same way but move nothing: they may run beside a training job, or on a
  workdir they cannot write.
- With an explicit step, a damaged step is refused in one line and left as
  it is.
- A complete checkpoint written with another config (`ConfigMismatch`) and
  a storage that refuses or times out (`UnreadableCheckpoint`) are refused
  at once: falling back would not help, and moving would be wrong.
- If every step is damaged, the command stops; for train the steps have been
  moved aside, so running it again starts from step 0 (a deliberate rerun,
  never an automatic restart from scratch).

Multi-process: every process attempts the same step and the verdict is
agreed in the restore (manager.agree: any process failing fails the step
for all); process 0 moves the step while the others wait at a barrier.
Paths go through etils.epath (gs:// too).
"""
from __future__ import annotations

import sys
import time

import jax
from etils import epath

from kjax.checkpoint.manager import Checkpointer, DamagedCheckpoint
from kjax.errors import KjaxError
from kjax.parallel.mesh import processes_meet

DAMAGED_DIR = "damaged"


def warn(message: str) -> None:
    if jax.process_index() == 0:
        print(f"kjax: warning: {message}", file=sys.stderr, flush=True)


def _copy_tree(src: epath.Path, dst: epath.Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        if item.is_dir():
            _copy_tree(item, dst / item.name)
        else:
            item.copy(dst / item.name)


def move_aside(checkpoints: Checkpointer, step: int) -> str:
    """CHECKPOINTS/STEP → CHECKPOINTS/damaged/STEP-UTCTIME (a rename; on stores
    that cannot rename folders, a copy, then the original is removed)."""
    src = epath.Path(checkpoints.step_path(step))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dst = epath.Path(checkpoints.directory) / DAMAGED_DIR / f"{step}-{stamp}"
    if jax.process_index() == 0:
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            src.rename(dst)
        except OSError:
            if not src.is_dir():
                raise
            _copy_tree(src, dst)
            src.rmtree()
    processes_meet(f"move-aside-{step}")   # a barrier, no device collective
    checkpoints.reload()
    return str(dst)


def restore_step(checkpoints: Checkpointer, target, step: int, what: str = "--step"):
    """An explicitly chosen step: restored and verified, or refused in one line."""
    steps = checkpoints.all_steps()
    if step not in steps:
        raise KjaxError(f"no checkpoint for step {step} in {checkpoints.directory}; "
                        f"available: {steps}")
    try:
        restored = checkpoints.restore(step, target)
    except DamagedCheckpoint as e:
        others = [s for s in steps if s != step]
        raise KjaxError(f"{e}. It was left in place; pick another {what} (available: "
                        f"{others}) or leave {what} out to use the newest good step") from None
    _note_unverified(checkpoints, step)
    return restored


def _note_unverified(checkpoints: Checkpointer, step: int) -> None:
    if not checkpoints.verified:
        warn(f"checkpoint {checkpoints.step_path(step)} predates array fingerprints: "
             f"restored unverified")


def restore_newest(checkpoints: Checkpointer, target, move_damaged: bool):
    """(state, iterator state, step) of the newest good step, or None if there
    are no steps at all. Damaged steps are warned about (and moved aside if
    `move_damaged`); if none is good, a one-line KjaxError."""
    damaged: list[str] = []
    for step in reversed(checkpoints.all_steps()):
        try:
            state, iterator = checkpoints.restore(step, target)
        except DamagedCheckpoint as e:   # raised on every process alike (manager.agree)
            reason = e.reason
        else:
            _note_unverified(checkpoints, step)
            if damaged:
                warn(f"{'resuming from' if move_damaged else 'using'} step {step}, the "
                     f"newest checkpoint that verifies")
            return state, iterator, step
        if move_damaged:
            where = move_aside(checkpoints, step)
            warn(f"checkpoint {checkpoints.step_path(step)} is damaged ({reason}); moved it "
                 f"to {where} and trying the previous step")
        else:
            warn(f"checkpoint {checkpoints.step_path(step)} is damaged ({reason}); left it in "
                 f"place and trying the previous step")
        damaged.append(f"{step}: {reason}")
    if not damaged:
        return None
    if move_damaged:
        raise KjaxError(f"every checkpoint in {checkpoints.directory} is damaged "
                        f"({'; '.join(damaged)}); they were moved to "
                        f"{checkpoints.directory}/{DAMAGED_DIR}/. Run the same command again "
                        f"to start from step 0, or move a step back if the fault was elsewhere")
    raise KjaxError(f"every checkpoint in {checkpoints.directory} is damaged "
                    f"({'; '.join(damaged)}); `kjax train` on this workdir moves them aside")
