"""Batch-size ramps (`train.batch_ramp`, docs/PRETRAINING.md "Batch-size
ramps"): the global batch grows over the first tokens or steps of a run in
stages, as ModernBERT's (to 4,608 × 1,024 over 50B tokens) and mmBERT's (48
→ 4,608 over 60B) do.

    train.batch_ramp = ((until, batch), ...)   batch rows a step until `until`
    train.batch_ramp_unit = "tokens" | "steps" what `until` counts
    train.batch_size                           the batch after the last stage

A stage in tokens (examples × data.max_seq_len: the rows' slots, a function
of the stream's position alone, not of padding) ends at the first step whose
tokens reach its `until`; one in steps at that step. So every stage is whole
steps of one batch, and the tokens a run has seen are exactly the sum over
its stages of steps × batch × max_seq_len.

Each stage is one compiled program: its batch in microbatches of at most
m = train.batch_size / train.microbatches rows (one pass when the stage's
batch is at most m, else batch / m microbatches of m: one microbatch shape,
so the largest stage's memory is the final batch's). The learning-rate
schedule stays a function of the step (a ramp changes how many examples a
step holds, not when the rate moves).

`Ramp` is the map between a run's steps and its stream positions (example k
of the run, kjax/batches/stream.py) that the loader, the mask-rate schedule
and the trainer share: step s (0-based) reads positions
[position_of_step(s), position_of_step(s + 1)). Without a ramp it is
position = step × batch_size, as it always was.
"""
from __future__ import annotations

import bisect
import dataclasses

from ml_collections import FrozenConfigDict

from kjax.errors import KjaxError

UNITS = ("tokens", "steps")


@dataclasses.dataclass(frozen=True)
class Stage:
    """Steps [first_step, end_step) of a run (0-based; None: to the end) at one batch."""
    index: int
    first_step: int
    end_step: int | None
    batch_size: int
    microbatches: int
    first_position: int       # the stream position of the stage's first example

    def steps_in(self, num_steps: int) -> int:
        """The stage's steps among a run's first `num_steps`."""
        end = num_steps if self.end_step is None else min(self.end_step, num_steps)
        return max(0, end - self.first_step)


def _pairs(train_cfg) -> list[tuple[int, int]]:
    """train.batch_ramp as (until, batch) pairs of ints, or one line."""
    ramp = train_cfg.get("batch_ramp", ()) if hasattr(train_cfg, "get") else ()
    out = []
    for i, entry in enumerate(ramp):
        ok = isinstance(entry, (tuple, list)) and len(entry) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in entry)
        if not ok:
            raise KjaxError(f"train.batch_ramp[{i}]={entry!r}: give each stage as (until, "
                            f"batch), two positive ints, e.g. train.batch_ramp="
                            f"'((2000000, 32), (6000000, 64))'")
        out.append((int(entry[0]), int(entry[1])))
    return out


def microbatches_of(batch: int, train_cfg) -> int:
    """A stage's microbatches: batch / m for m = batch_size / microbatches
    rows, or one pass when the stage's batch is at most m."""
    return max(1, batch // _rows(train_cfg))


def _rows(train_cfg) -> int:
    """m: the rows of one microbatch of the final batch."""
    micro = train_cfg.get("microbatches", 1) if hasattr(train_cfg, "get") else 1
    return train_cfg.batch_size // micro


class Ramp:
    """The run's stages and the map steps ↔ stream positions (module doc)."""

    def __init__(self, train_cfg, seq_len: int):
        unit = train_cfg.get("batch_ramp_unit", "tokens") if hasattr(train_cfg, "get") \
            else "tokens"
        rows = _rows(train_cfg)
        stages, step, position = [], 0, 0
        for i, (until, batch) in enumerate(_pairs(train_cfg)):
            if batch > rows and batch % rows:
                raise KjaxError(
                    f"train.batch_ramp[{i}]: batch {batch} is more than one microbatch of "
                    f"{rows} (train.batch_size={train_cfg.batch_size} / train.microbatches="
                    f"{train_cfg.batch_size // rows}) and not a multiple of it; give a stage batch "
                    f"of at most {rows} (one pass) or a multiple of {rows}")
            if unit == "steps":
                steps = until - step
                reached = f"step {step}"
            else:   # the first step whose tokens reach `until`
                steps = -(-(until - position * seq_len) // (batch * seq_len))
                reached = f"{position * seq_len:,} tokens at step {step}"
            if steps < 1:
                raise KjaxError(f"train.batch_ramp[{i}]=({until}, {batch}): the stages before "
                                f"it already reach {reached}; give each stage a later until "
                                f"than the one before (train.batch_ramp_unit={unit!r})")
            stages.append(Stage(i, step, step + steps, batch,
                                microbatches_of(batch, train_cfg), position))
            step, position = step + steps, position + steps * batch
        stages.append(Stage(len(stages), step, None, train_cfg.batch_size,
                            train_cfg.batch_size // rows, position))
        self.stages, self.seq_len = tuple(stages), seq_len
        self._first_steps = [s.first_step for s in stages]
        self._first_positions = [s.first_position for s in stages]

    @property
    def ramped(self) -> bool:
        return len(self.stages) > 1

    @property
    def end_step(self) -> int:
        """The step the last ramp stage ends at (0 without a ramp)."""
        return self.stages[-1].first_step

    def stage_of_step(self, step: int) -> Stage:
        """The stage of 0-based `step`."""
        return self.stages[bisect.bisect_right(self._first_steps, max(int(step), 0)) - 1]

    def stage_of_position(self, position: int) -> Stage:
        return self.stages[bisect.bisect_right(self._first_positions, max(int(position), 0)) - 1]

    def position_of_step(self, step: int) -> int:
        """Examples the run has read before 0-based `step` (= after `step` steps)."""
        s = self.stage_of_step(step)
        return s.first_position + (int(step) - s.first_step) * s.batch_size

    def step_of_position(self, position: int) -> int:
        """The 0-based step whose global batch holds example `position`."""
        s = self.stage_of_position(position)
        return s.first_step + (int(position) - s.first_position) // s.batch_size

    def tokens_at(self, step: int) -> int:
        """Tokens (examples × max_seq_len) the run has read after `step` steps."""
        return self.position_of_step(step) * self.seq_len


def ramp_of(config) -> Ramp:
    """The run's ramp (one stage of train.batch_size without train.batch_ramp)."""
    return Ramp(config.train, config.data.max_seq_len)


def check_ramp(config) -> None:
    """The ramp's own checks (one line each): its stages as pairs, each
    stage's batch a microbatch multiple, stages that advance, a ramp that
    ends by train.num_steps, and no packing (a packed row holds a varying
    number of examples, so a stage's steps are not a span of positions)."""
    t = config.train
    if not t.get("batch_ramp", ()):
        return
    if t.packing:
        raise KjaxError("train.batch_ramp with train.packing=True: a packed row holds a varying "
                        "number of examples, so a stage change has no exact stream position; "
                        "set train.packing=False or train.batch_ramp=()")
    ramp = ramp_of(config)
    if ramp.end_step > t.num_steps:
        raise KjaxError(f"train.batch_ramp ends at step {ramp.end_step}, past train.num_steps="
                        f"{t.num_steps}; end the ramp sooner or train longer")


def describe(config) -> list[str]:
    """One line per stage: its steps, batch, microbatches and tokens (`kjax
    config show --schedule`, the docs)."""
    ramp, n = ramp_of(config), config.train.num_steps
    lines = []
    for s in ramp.stages:
        end = n if s.end_step is None else s.end_step
        lines.append(f"steps {s.first_step + 1:>7}–{end:<7} batch {s.batch_size:>6} in "
                     f"{s.microbatches} microbatch(es); tokens {ramp.tokens_at(s.first_step):,} "
                     f"→ {ramp.tokens_at(end):,}")
    return lines


def stage_config(config, stage: Stage):
    """The config a stage's train step is built from: `config` itself for the
    last stage (train.batch_size; so a run without a ramp builds the program
    it always did), else its batch and microbatches, frozen like `config`."""
    if stage.end_step is None:
        return config
    frozen = isinstance(config, FrozenConfigDict)   # (its as_configdict() is its own: copied)
    c = (config.as_configdict() if frozen else config).copy_and_resolve_references()
    c.train.batch_size, c.train.microbatches = stage.batch_size, stage.microbatches
    c.train.batch_ramp = ()
    return FrozenConfigDict(c) if frozen else c
