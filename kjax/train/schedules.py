"""Learning-rate schedules by name (`train.schedule`), each built from optax
schedules. Every one warms up linearly from 0 to `train.learning_rate` over
`train.warmup_steps`; they differ in what follows:

    linear    linear decay to final_lr_fraction·peak at num_steps (BERT)
    cosine    cosine decay to final_lr_fraction·peak at num_steps
    wsd       warmup-stable-decay (ModernBERT): the peak until the last
              decay_fraction·num_steps steps, then decay_shape (linear, or
              sqrt: the factor 1 − √progress) down to final_lr_fraction·peak
    constant  the peak to the end

`schedule_points` lists the values at a handful of steps for
`kjax config show --schedule`.
"""
from __future__ import annotations

import jax.numpy as jnp
import optax

from kjax.config.validate import wsd_decay_steps
from kjax.errors import KjaxError


def setting(train_cfg, key: str, default):
    """A key a fine-tuning optimizer dict may lack (kjax/finetune/trainer.py
    builds one with the Adam keys only): those run the defaults."""
    return train_cfg.get(key, default) if hasattr(train_cfg, "get") else default


def _warmup(train_cfg):
    return optax.linear_schedule(0.0, train_cfg.learning_rate, max(1, train_cfg.warmup_steps))


def _final(train_cfg) -> float:
    return train_cfg.learning_rate * setting(train_cfg, "final_lr_fraction", 0.0)


def linear(train_cfg) -> optax.Schedule:
    """BERT: linear warmup to the peak, then linear decay to the final value
    (0 by default) at num_steps."""
    peak, warmup = train_cfg.learning_rate, train_cfg.warmup_steps
    return optax.join_schedules(
        [optax.linear_schedule(0.0, peak, max(1, warmup)),
         optax.linear_schedule(peak, _final(train_cfg), max(1, train_cfg.num_steps - warmup))],
        [warmup])


def cosine(train_cfg) -> optax.Schedule:
    """Half a cosine from the peak down to the final value at num_steps."""
    warmup = train_cfg.warmup_steps
    decay = optax.cosine_decay_schedule(train_cfg.learning_rate,
                                        max(1, train_cfg.num_steps - warmup),
                                        alpha=setting(train_cfg, "final_lr_fraction", 0.0))
    return optax.join_schedules([_warmup(train_cfg), decay], [warmup])


def _sqrt_decay(peak: float, final: float, steps: int) -> optax.Schedule:
    """peak → final with the factor 1 − √(t / steps) (Hägele et al. 2024, the
    shape ModernBERT decays with)."""
    def schedule(count):
        progress = jnp.clip(count / max(1, steps), 0.0, 1.0)
        return final + (peak - final) * (1.0 - jnp.sqrt(progress))
    return schedule


def wsd(train_cfg) -> optax.Schedule:
    """Warmup, the peak held constant, then the last decay_fraction of the run
    decays to the final value (validate.py refuses a decay that would start
    inside the warmup)."""
    peak, final = train_cfg.learning_rate, _final(train_cfg)
    steps = wsd_decay_steps(train_cfg)
    shape = setting(train_cfg, "decay_shape", "sqrt")
    decay = (_sqrt_decay(peak, final, steps) if shape == "sqrt"
             else optax.linear_schedule(peak, final, max(1, steps)))
    warmup = train_cfg.warmup_steps
    return optax.join_schedules([_warmup(train_cfg), optax.constant_schedule(peak), decay],
                                [warmup, train_cfg.num_steps - steps])


def constant(train_cfg) -> optax.Schedule:
    """Warmup, then the peak to the end (final_lr_fraction is unused)."""
    return optax.join_schedules([_warmup(train_cfg),
                                 optax.constant_schedule(train_cfg.learning_rate)],
                                [train_cfg.warmup_steps])


SCHEDULES = {"linear": linear, "cosine": cosine, "wsd": wsd, "constant": constant}


def learning_rate_schedule(train_cfg) -> optax.Schedule:
    """The schedule `train.schedule` names (linear when the key is absent)."""
    name = setting(train_cfg, "schedule", "linear")
    if name not in SCHEDULES:
        raise KjaxError(f"train.schedule={name!r}; choose {', '.join(SCHEDULES)}")
    return SCHEDULES[name](train_cfg)


def rate_jump(before, after, step: int) -> tuple[float, float] | None:
    """(before's rate, after's rate) at 0-based `step` where two train
    sections' schedules differ there (beyond float rounding), else None: a
    run continued with another schedule (a longer resume, a decay branch)
    may change it only where the curve has no jump."""
    old = float(learning_rate_schedule(before)(step))
    new = float(learning_rate_schedule(after)(step))
    return (old, new) if abs(new - old) > 1e-6 * max(abs(old), 1e-12) else None


def schedule_points(train_cfg) -> list[tuple[int, float, str]]:
    """(step, learning rate, what happens there) at the steps that show the
    curve: 0, the end of warmup, wsd's decay start, quarters of the run and
    num_steps."""
    n, warmup = train_cfg.num_steps, train_cfg.warmup_steps
    marks = {0: "start", n // 4: "", n // 2: "", 3 * n // 4: ""}
    if setting(train_cfg, "schedule", "linear") == "wsd":
        marks[n - wsd_decay_steps(train_cfg)] = "decay starts"
    marks[warmup] = "warmup ends" if warmup else "start (no warmup)"
    marks[n] = "last step"
    schedule = learning_rate_schedule(train_cfg)
    return [(step, float(schedule(step)), marks[step]) for step in sorted(marks)]
