"""The masking rate of a training step (`data.mask_schedule`, docs/PRETRAINING.md
"Mask-rate schedules"): constant, or linear or cosine from data.masked_lm_prob
to data.final_masked_lm_prob over data.mask_schedule_steps (0: train.num_steps),
then kept at the final rate. A linear 30 → 15 % schedule is arXiv 2305.15096's;
Chinese ModernBERT pairs it with whole-word masking.

The loader asks it for the step a record lands in (kjax/batches/stream.py
`step_of_position`), so each record's rate, like its masks, is a function of
where it sits in the stream: a resumed, resharded or re-split run draws the
masks of the uninterrupted one.
"""
from __future__ import annotations

import math

SCHEDULES = ("constant", "linear", "cosine")


def scheduled(data_config) -> bool:
    """Whether the rate changes within the run."""
    return data_config.get("mask_schedule", "constant") != "constant"


def schedule_steps(data_config, num_steps: int) -> int:
    return data_config.get("mask_schedule_steps", 0) or num_steps


def mask_rate(data_config, step: int, num_steps: int) -> float:
    """The rate at 0-based `step` (the step whose update the record feeds)."""
    d = data_config
    kind = d.get("mask_schedule", "constant")
    if kind == "constant":
        return float(d.masked_lm_prob)
    start, end = float(d.masked_lm_prob), float(d.final_masked_lm_prob)
    progress = min(max(step, 0) / max(schedule_steps(d, num_steps), 1), 1.0)
    if kind == "linear":
        return start + (end - start) * progress
    if kind == "cosine":
        return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"data.mask_schedule={kind!r}; choose one of {', '.join(SCHEDULES)}")


def highest_rate(data_config) -> float:
    """The highest rate a run draws at (training or held out): what the
    prediction slots must hold."""
    d = data_config
    rates = [d.masked_lm_prob, d.get("eval_masked_lm_prob", 0.0)]
    if scheduled(d):
        rates.append(d.final_masked_lm_prob)
    return float(max(rates))
