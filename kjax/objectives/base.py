"""What a pretraining objective is: one object that knows whether the config
turns it on, its weight, its one-line config checks, the model inputs and
batch keys it reads, and its loss and metrics from (outputs, batch). The
train and eval steps sum what the registry (kjax/objectives/__init__.py)
returns, in the registry's order; nothing else names an objective.
"""
from __future__ import annotations

import jax.numpy as jnp


class Objective:
    name = ""
    label = ""                          # how reports name it ("MLM"); default `name`
    metrics: tuple[str, ...] = ()       # besides f"{name}_loss"
    # {metric: (numerator, denominator)}: ratios of two of `metrics`, formed
    # after microbatches or eval batches are combined (kjax.objectives.with_ratios).
    ratios: dict[str, tuple[str, str]] = {}
    # The model's params outside the encoder that only this objective's loss
    # trains: an export writes a head only when its objective ran.
    head_params: tuple[str, ...] = ()

    def enabled(self, config) -> bool:
        return True

    def weight(self, config) -> float:
        return 1.0

    def check(self, config, mode) -> None:
        """One-line KjaxErrors; `mode` is the config's input mode (kjax/inputs)."""

    def inputs(self, batch: dict) -> dict:
        """Keyword arguments of the model this objective needs from a batch."""
        return {}

    def dummy_inputs(self, config, batch_size: int) -> dict:
        return {}

    def loss(self, outputs: dict, batch: dict, config) -> tuple[jnp.ndarray, dict]:
        """(loss, {f"{name}_loss": loss, metric: value, ...})."""
        raise NotImplementedError

    def slots(self, batch: dict):
        """How many slots of the batch count: the weight of its metrics when
        batches of any fill are combined."""
        raise NotImplementedError

    @property
    def title(self) -> str:
        return self.label or self.name

    @property
    def metric_names(self) -> tuple[str, ...]:
        return (f"{self.name}_loss", *self.metrics, *self.ratios)
