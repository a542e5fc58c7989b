"""What a resume may change: a run continued in its own workdir takes the
config it recorded (WORKDIR/kjax_config.py). A change that alters what the
run computes — shapes, data, model, objectives, optimizer, schedule — is
refused in one line that names the keys and says how to start a new phase
instead (`kjax train --workdir NEW --init-from WORKDIR`, docs/PRETRAINING.md,
"Runs in phases"); a change that leaves the run's numbers as they are passes
with a note. `train.num_steps` may change only where the learning rate of the
step the run has reached stays what it was (a constant schedule, wsd while
stable, any schedule during its warmup): the curve goes on without a jump.
"""
from __future__ import annotations

from kjax import paths
from kjax.config.mask_schedule import schedule_steps, scheduled
from kjax.config.recorded import config_differences
from kjax.errors import KjaxError

# Sections of the tree that decide what a pretraining run computes.
COMPUTING = ("model.", "data.", "train.", "knowledge.", "shake.", "init.", "phases")

# Keys of those sections that change no number of the run: cadence, logging,
# host-side loading, the layout over devices (a resume onto another device
# count or microbatch split logs the same losses), the attention path (the
# same bits and maths on every path) and recomputation.
SAME_NUMBERS = (
    "train.log_every", "train.eval_every", "train.eval_batches", "train.checkpoint_every",
    "train.keep_checkpoints", "train.peak_flops", "train.prefetch", "train.loader_workers",
    "train.profile_steps", "train.microbatches", "model.attention_impl",
    "model.attention_tiles", "model.remat_policy", "model.scan_unroll", "init.from_run",
    "init.optimizer", "init.new_positions", "init.weights", "init.mode",
)


def _key(diff: str) -> str:
    return diff.split(":", 1)[0]


def _computes(key: str) -> bool:
    return key.startswith(COMPUTING) and key not in SAME_NUMBERS and key != "train.num_steps"


def check_resume(config, recorded, workdir: str, step: int | None) -> list[str]:
    """Refuses (KjaxError) a resume of `workdir` at `step` whose config alters
    what the recorded run computes; returns the differences that pass."""
    if recorded is None or step is None:
        return []
    diffs = config_differences(recorded, config)
    # a mask schedule's length written out as the num_steps it ran over computes the same
    same_length = schedule_steps(recorded.data, recorded.train.num_steps) == schedule_steps(
        config.data, config.train.num_steps)
    diffs = [d for d in diffs if not (_key(d) == "data.mask_schedule_steps" and same_length)]
    refused = [d for d in diffs if _computes(_key(d))]
    if refused:
        shown = "; ".join(refused[:4]) + (f"; and {len(refused) - 4} more"
                                            if len(refused) > 4 else "")
        raise KjaxError(
            f"{workdir} was trained to step {step} with another config ({shown}): resuming it "
            f"would continue that run with other data, shapes or recipe; run `kjax train "
            f"--workdir {workdir}` with its recorded config ({paths.join(workdir, 'kjax_config.py')}), "
            f"or start a new phase from it: `kjax train --config ... --workdir NEW_WORKDIR "
            f"--init-from {workdir}`")
    if recorded.train.num_steps != config.train.num_steps:
        _check_new_length(config, recorded, workdir, step)
    return [d for d in diffs if not _computes(_key(d))]


def _check_new_length(config, recorded, workdir: str, step: int) -> None:
    from kjax.train.schedules import rate_jump
    jump = rate_jump(recorded.train, config.train, step)
    if step > config.train.num_steps:
        raise KjaxError(f"train.num_steps={config.train.num_steps}, but {workdir} has trained "
                        f"to step {step} already; give a num_steps of at least {step}")
    if scheduled(config.data) and schedule_steps(config.data, config.train.num_steps) != \
            schedule_steps(recorded.data, recorded.train.num_steps):
        raise KjaxError(f"train.num_steps {recorded.train.num_steps} → {config.train.num_steps} "
                        f"would stretch the mask-rate schedule of {workdir} (data.mask_schedule="
                        f"{config.data.mask_schedule!r} runs over num_steps); set "
                        f"--config.data.mask_schedule_steps={recorded.train.num_steps} to keep it")
    if jump:
        raise KjaxError(
            f"train.num_steps {recorded.train.num_steps} → {config.train.num_steps} would move "
            f"the learning rate of {workdir} at step {step} from {jump[0]:.3g} to "
            f"{jump[1]:.3g} (its {config.train.schedule} schedule is laid over num_steps); to train longer, start "
            f"a new phase from it (`kjax train --config ... --workdir NEW_WORKDIR --init-from "
            f"{workdir}`, its own warmup), or plan the run with train.schedule=constant or wsd, "
            f"whose length may change while the learning rate is stable")
