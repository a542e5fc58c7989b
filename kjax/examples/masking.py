"""Masked-LM target selection (METHODS §4; BERT's 15 %, 80/10/10).

Masking picks *units*, not tokens: a unit is a whole eojeol (whitespace
word), a whole morpheme, or a single token. All tokens of a chosen unit are
masked together and all become targets, so a unit is never split — the
property whole-word / whole-morpheme masking needs. Replacement is decided
per unit: 80 % [MASK], 10 % random tokens, 10 % unchanged.

The same function serves static masking (at `prepare`, stored) and dynamic
masking (in the loader), with a numpy Generator seeded from (seed, example
index) so a resumed run draws exactly the same masks.
"""
from __future__ import annotations

import numpy as np

from kjax.tokens.sentencepiece import MASK, NUM_SPECIAL

UNIT_KEYS = {"eojeol": "word_ids", "morpheme": "morph_ids", "token": None}


def unit_key(config) -> str | None:
    """Which per-token array defines the masking unit (None: single tokens)."""
    return UNIT_KEYS[config.data.mask_unit]


def mask_example(example: dict, config, rng: np.random.Generator) -> dict:
    """Adds masks to an example: input_ids masked, mlm_positions (token
    positions) and mlm_ids (their original ids). Specials are never masked."""
    d, key = config.data, unit_key(config)
    multihot = config.model.input_mode in ("multihot", "merged")  # predictions = positions
    masked, positions, targets = choose_masks(
        example["input_ids"], example[key] if key else None, example["word_ids"] >= 0, rng,
        d.masked_lm_prob, d.max_predictions_per_seq, config.model.vocab_size,
        count_units=multihot)
    return {**example, "input_ids": masked, "mlm_positions": positions, "mlm_ids": targets}


def mask_units(unit_ids: np.ndarray, maskable: np.ndarray) -> list[np.ndarray]:
    """Groups maskable positions by unit id (consecutive runs of one id)."""
    positions = np.flatnonzero(maskable)
    if len(positions) == 0:
        return []
    ids = unit_ids[positions]
    breaks = np.flatnonzero((np.diff(ids) != 0) | (np.diff(positions) != 1)) + 1
    return np.split(positions, breaks)


def choose_masks(input_ids: np.ndarray, unit_ids: np.ndarray | None, maskable: np.ndarray,
                 rng: np.random.Generator, masked_lm_prob: float, max_predictions: int,
                 vocab_size: int, count_units: bool = False):
    """Returns (masked input_ids, token positions, original ids at them).

    unit_ids None means token-level masking. The budget (masked_lm_prob of the
    maskable tokens, at most max_predictions) counts tokens, or units when
    `count_units` (multi-hot: a masked morpheme is one prediction position).
    """
    units_of = unit_ids if unit_ids is not None else np.arange(len(input_ids))
    units = mask_units(units_of, maskable)
    population = len(units) if count_units else int(maskable.sum())
    budget = min(max_predictions, max(1, int(round(population * masked_lm_prob))))
    chosen: list[np.ndarray] = []
    used = 0
    for u in rng.permutation(len(units)):
        if used >= budget:
            break
        cost = 1 if count_units else len(units[u])
        if used + cost > budget:
            continue  # a unit is masked whole or not at all
        chosen.append(units[u])
        used += cost
    out = input_ids.copy()
    for unit in chosen:
        r = rng.random()
        if r < 0.8:
            out[unit] = MASK
        elif r < 0.9:
            out[unit] = rng.integers(NUM_SPECIAL, vocab_size, size=len(unit))
        # else: keep the original tokens (still predicted)
    positions = np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, np.int64)
    return out, positions.astype(np.int32), input_ids[positions].astype(np.int32)


def example_rng(seed: int, index: int, epoch: int = 0) -> np.random.Generator:
    """A generator that depends only on (seed, example index, epoch)."""
    return np.random.default_rng([seed, index, epoch])
