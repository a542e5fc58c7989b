"""Pretraining objectives: one object each (kjax/objectives/base.py says what
it owns), listed once here. The train and eval steps ask the registry for
the model inputs, the loss and the metrics; adding an objective is one
module and one line below (docs/ARCHITECTURE.md).

    mlm        masked LM, one or several targets per position (METHODS §4, Eq. 7–9)
    nsp        next-sentence prediction (§4)
    hypernym   \
    sense       > UKnowBERT's knowledge heads (§2.5), on when their weight is > 0
    verb       /
    rtd        ELECTRA's replaced-token detection, with model.arch='electra' (§6)

`check_config` is the whole static check of a config: the config's own
(kjax.config.validate), then the architecture's (kjax/model/arch), every
objective's, the input mode's and shaking's float8 weights — all before
anything is compiled.
"""
from __future__ import annotations

import jax.numpy as jnp

from kjax.config import validate
from kjax.inputs import input_mode
from kjax.model.arch import architecture
from kjax.objectives import knowledge, mlm, nsp, rtd
from kjax.objectives.base import Objective
from kjax.shake.matrix import check_weights

OBJECTIVES: tuple[Objective, ...] = (
    mlm.OBJECTIVE,
    nsp.OBJECTIVE,
    rtd.OBJECTIVE,
    knowledge.HYPERNYM,
    knowledge.SENSE,
    knowledge.VERB,
)

# Every metric and the objective whose slots weigh it.
METRIC_OBJECTIVE = {m: o.name for o in OBJECTIVES for m in o.metric_names}


def check_config(config) -> None:
    """Every static check of `config`, each failure one line (KjaxError)."""
    validate(config)
    architecture(config).check(config)
    mode = input_mode(config)
    for objective in OBJECTIVES:   # (an unknown loss name before what the mode allows)
        objective.check(config, mode)
    mode.check(config)
    check_weights(config.shake)   # B is float8: a weight it would round is refused


def enabled(config) -> tuple[Objective, ...]:
    return tuple(o for o in OBJECTIVES if o.enabled(config))


def reported_metrics(config) -> tuple[str, ...]:
    """"loss" and the metrics of the objectives the config turns on: what a
    report of this run may show (a metric of an objective that was off is none)."""
    return ("loss", *(m for o in enabled(config) for m in o.metric_names))


def objectives_title(config) -> str:
    """The objectives that trained, as reports name them: "MLM + NSP"."""
    return " + ".join(o.title for o in enabled(config))


def trained_head_params(config) -> frozenset[str]:
    """The model's params outside the encoder that the run's objectives
    trained ("mlm_bias", "nsp", "pooler", ...): what an export may write."""
    return frozenset(p for o in enabled(config) for p in o.head_params)


def objective_weights(config) -> dict[str, float]:
    """Each objective's factor in the training loss: `kjax eval`'s "loss" sums
    the same way."""
    return {o.name: float(o.weight(config)) for o in OBJECTIVES}


def model_inputs(batch: dict) -> dict:
    """The model's keyword arguments the objectives need from a batch."""
    kwargs = {}
    for objective in OBJECTIVES:
        kwargs.update(objective.inputs(batch))
    return kwargs


def dummy_inputs(config, batch_size: int) -> dict:
    kwargs = {}
    for objective in OBJECTIVES:
        kwargs.update(objective.dummy_inputs(config, batch_size))
    return kwargs


def pretraining_loss(outputs: dict, batch: dict, config, shares: dict | None = None):
    """(Σ weight · loss, {"loss": ..., every metric}) over the enabled objectives.
    `shares` {objective: a microbatch's slots / its whole batch's}: each
    objective's loss and metrics scaled by it, so that their sums over the
    microbatches are the whole batch's (kjax/train/accumulation.py)."""
    total, metrics = 0.0, {}
    for objective in enabled(config):   # in the registry's order
        loss, m = objective.loss(outputs, batch, config)
        if shares is not None:
            loss, m = loss * shares[objective.name], {
                k: v * shares[objective.name] for k, v in m.items()}
        total = total + objective.weight(config) * loss
        metrics.update(m)
    return total, {"loss": total, **metrics}


def with_ratios(metrics: dict) -> dict:
    """`metrics` plus each objective's ratios whose two terms it holds: formed
    from combined means (a step's microbatches, an evaluation's batches), so
    they are the ratios of the whole batch's counts."""
    out = dict(metrics)
    for objective in OBJECTIVES:
        for name, (top, bottom) in objective.ratios.items():
            if top in out and bottom in out:   # host floats stay floats (eval's JSON)
                below = out[bottom]
                below = max(below, 1e-8) if isinstance(below, float) else jnp.maximum(below, 1e-8)
                out[name] = out[top] / below
    return out


def slots(batch: dict, config) -> dict:
    """Per enabled objective, how many slots of the batch count."""
    return {o.name: o.slots(batch) for o in enabled(config)}


__all__ = ["OBJECTIVES", "METRIC_OBJECTIVE", "Objective", "check_config", "dummy_inputs",
           "enabled", "model_inputs", "objective_weights", "objectives_title", "pretraining_loss",
           "reported_metrics", "slots", "trained_head_params", "with_ratios"]
