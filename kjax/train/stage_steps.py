"""The train step of each stage of a batch-size ramp (`train.batch_ramp`,
kjax/config/batch_ramp.py): one jitted program per stage, at the stage's
batch in its microbatches, built when the run reaches it, so each stage
compiles once (a resume mid-ramp compiles the stage it resumes in, and the
later ones). The trainer asks it for the step of every step number, for the
position a resumed step must start at, and for what a ramped run logs."""
from __future__ import annotations

from kjax.config.batch_ramp import ramp_of, stage_config
from kjax.errors import KjaxError
from kjax.train.step import make_train_step


class StageSteps:
    """The compiled train step of each train.batch_ramp stage
    (kjax/config/batch_ramp.py), built when the run reaches the stage: each
    stage is compiled once, and the stage before is let go (stages only
    advance). Without a ramp: the one step of train.batch_size."""

    def __init__(self, config, mesh, train_model, tx, shardings):
        self.config, self.mesh, self.model, self.tx = config, mesh, train_model, tx
        self.shardings, self.ramp, self.built = shardings, ramp_of(config), {}

    def __call__(self, step: int):
        """(stage, its train step) of 1-based `step`."""
        stage = self.ramp.stage_of_step(step - 1)
        if stage.index not in self.built:
            self.built = {stage.index: make_train_step(stage_config(self.config, stage),
                                                       self.mesh, self.model, self.tx,
                                                       self.shardings)}
        return stage, self.built[stage.index]

    def check_position(self, start: int, iterator) -> None:
        """The data state must be where the ramp puts step `start` (one line)."""
        position = iterator.get_state().get("position") if hasattr(iterator, "ramp") else None
        if position is not None and position != self.ramp.position_of_step(start):
            raise KjaxError(
                f"the data state of step {start} is at example {position}, but this config's "
                f"batches (train.batch_size, train.batch_ramp) put step {start} at example "
                f"{self.ramp.position_of_step(start)}; resume with the batches the run was "
                f"trained with")

    def logged(self, step: int) -> dict:
        """What a ramped run logs beside its metrics: the batch of `step` and
        the tokens (examples × max_seq_len) read by its end."""
        if not self.ramp.ramped:
            return {}
        return {"batch_size": self.ramp.stage_of_step(step - 1).batch_size,
                "tokens": self.ramp.tokens_at(step)}
