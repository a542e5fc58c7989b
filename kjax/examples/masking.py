"""Masked-LM target selection (METHODS §4; BERT's 15 %, 80/10/10).

Masking picks *units*, not tokens: a unit is a whole eojeol (whitespace
word), a whole morpheme, or a single token. All tokens of a chosen unit are
masked together and all become targets, so a unit is never split — the
property whole-word / whole-morpheme masking needs. Replacement is decided
per unit: 80 % [MASK], 10 % random tokens, 10 % unchanged.

When model positions are not tokens — multi-hot morphemes, or SHAKE's
variant 6, where a postposition shares its substantive's position (METHODS
§1.5, 6) — the input mode (kjax/inputs) passes each token's position, and
masking chooses units made of *whole positions*: the smallest runs that hold
whole masking units and whole positions (학교/에서 merged is one position, so
masking the morpheme 학교 masks 에서 with it; masking only 학교 would leave 에서
visible in the very position whose targets include it). The budget then
counts positions, the prediction slots.

The same functions serve static masking (at `prepare`, stored) and dynamic
masking (in the loader), both through the input mode's `mask`
(kjax.inputs.mask_example). Static masks draw from `static_mask_rng`: one
stream per (seed, split, chunk, example, copy), so no two examples of a
dataset share one; dynamic masks from grain's per-record generator.
"""
from __future__ import annotations

import numpy as np

from kjax.tokens.sentencepiece import MASK, NUM_SPECIAL

UNIT_KEYS = {"eojeol": "word_ids", "morpheme": "morph_ids", "token": None}


def unit_key(config) -> str | None:
    """Which per-token array defines the masking unit (None: single tokens)."""
    return UNIT_KEYS[config.data.mask_unit]


def mask_tokens(example: dict, config, rng: np.random.Generator,
                position_ids: np.ndarray | None = None) -> dict:
    """Adds masks to an example: input_ids masked, mlm_positions (token
    positions) and mlm_ids (their original ids). Specials are never masked.
    `position_ids`: per token, the model position it feeds (-1: special), when
    positions are not tokens (the input mode's `mask_positions`). The rate is
    the example's `mask_rate` where the loader set one (a mask-rate schedule,
    held-out masks at data.eval_masked_lm_prob), else data.masked_lm_prob."""
    d, key = config.data, unit_key(config)
    masked, positions, targets = choose_masks(
        example["input_ids"], example[key] if key else None, example["word_ids"] >= 0, rng,
        float(example.get("mask_rate", d.masked_lm_prob)), d.max_predictions_per_seq,
        config.model.vocab_size, position_ids=position_ids)
    return {**example, "input_ids": masked, "mlm_positions": positions, "mlm_ids": targets}


def whole_position_masks(example: dict, position_ids: np.ndarray, rng: np.random.Generator,
                         vocab_size: int) -> dict:
    """Masks that cover part of a model position extended to all of it (masks
    stored by `prepare` for another input mode, e.g. one data folder shared by
    the six SHAKE variants). A position takes the decision of its first
    masked token for all its tokens: [MASK], random tokens, or kept."""
    before = np.asarray(example["input_ids"])
    chosen = np.asarray(example["mlm_positions"], np.int64)
    original = before.copy()
    original[chosen] = example["mlm_ids"]
    masked = np.zeros(len(before), bool)
    masked[chosen] = True
    positions, ids = np.asarray(position_ids), before.copy()
    for p in np.unique(positions[masked]):
        if p < 0:
            continue
        members = np.flatnonzero(positions == p)
        first = members[masked[members]][0]
        if before[first] == MASK:
            ids[members] = MASK
        elif before[first] != original[first]:       # random: draw for the others
            fresh = members[(before[members] == original[members]) | (before[members] == MASK)]
            ids[fresh] = rng.integers(NUM_SPECIAL, vocab_size, size=len(fresh))
        else:
            ids[members] = original[members]
        masked[members] = True
    if masked.sum() == len(chosen) and (ids == before).all():
        return example                                   # whole positions already
    chosen = np.flatnonzero(masked)
    return {**example, "input_ids": ids, "mlm_positions": chosen.astype(np.int32),
            "mlm_ids": original[chosen].astype(np.int32)}


def mask_units(unit_ids: np.ndarray, maskable: np.ndarray,
               position_ids: np.ndarray | None = None) -> list[np.ndarray]:
    """Groups maskable tokens by unit id (consecutive runs of one id). With
    `position_ids` (the model position of each token), a unit grows until it
    holds whole positions too: a boundary needs both ids to change."""
    positions = np.flatnonzero(maskable)
    if len(positions) == 0:
        return []
    new_unit = np.diff(unit_ids[positions]) != 0
    if position_ids is not None:
        new_unit &= np.diff(np.asarray(position_ids)[positions]) != 0
    breaks = np.flatnonzero(new_unit | (np.diff(positions) != 1)) + 1
    return np.split(positions, breaks)


def choose_masks(input_ids: np.ndarray, unit_ids: np.ndarray | None, maskable: np.ndarray,
                 rng: np.random.Generator, masked_lm_prob: float, max_predictions: int,
                 vocab_size: int, position_ids: np.ndarray | None = None):
    """Returns (masked input_ids, token positions, original ids at them).

    An example never ends up without a prediction because every unit is
    larger than its budget (a short example of long eojeols): the smallest
    unit is taken then, if it fits max_predictions.

    unit_ids None means token-level masking. `position_ids` None: positions
    are tokens, and the budget (masked_lm_prob of the maskable tokens, at
    most max_predictions) counts tokens. Otherwise units hold whole
    positions and the budget counts positions (multi-hot: a masked morpheme
    is one prediction slot; variant 6: a merged position is one).
    """
    units_of = unit_ids if unit_ids is not None else np.arange(len(input_ids))
    units = mask_units(units_of, maskable, position_ids)
    sizes = np.fromiter((len(u) for u in units), np.int64, len(units))
    if position_ids is None or not len(units):
        costs = sizes.tolist()
    else:   # distinct positions per unit, for all units at once
        owner = np.repeat(np.arange(len(units)), sizes)
        pos = np.asarray(position_ids)[np.concatenate(units)]
        first = np.unique(owner * (int(pos.max()) + 2) + pos + 1, return_index=True)[1]
        costs = np.bincount(owner[first], minlength=len(units)).tolist()
    population = sum(costs)
    budget = min(max_predictions, max(1, int(round(population * masked_lm_prob))))
    chosen: list[np.ndarray] = []
    used = 0
    order = rng.permutation(len(units))
    for u in order:
        if used >= budget:
            break
        cost = costs[u]
        if used + cost > budget:
            continue  # a unit is masked whole or not at all
        chosen.append(units[u])
        used += cost
    if not chosen and units:   # every unit outgrows a short example's budget: take the
        u = min(order, key=lambda i: costs[i])   # smallest, as long as its slots exist
        if costs[u] <= max_predictions:
            chosen.append(units[u])
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


def unmasked(example: dict) -> dict:
    """A statically masked example as it was before masking (its original ids
    put back at its mlm_positions), with no masks: what dynamic masking draws
    from."""
    ids = np.array(example["input_ids"])
    ids[np.asarray(example["mlm_positions"], np.int64)] = example["mlm_ids"]
    return {k: v for k, v in example.items() if k not in ("mlm_positions", "mlm_ids")} | {
        "input_ids": ids}


def example_rng(seed: int, index: int, epoch: int = 0) -> np.random.Generator:
    """A generator that depends only on (seed, example index, epoch)."""
    return np.random.default_rng([seed, index, epoch])


STATIC_STREAM = 2   # keeps static masks apart from example_rng's (seed, index, epoch)
SPLIT_IDS = {"train": 0, "eval": 1}


def static_mask_rng(seed: int, split: str, chunk_index: int, example_index: int,
                    copy: int = 0) -> np.random.Generator:
    """The generator of one statically masked example (`prepare`): its own
    stream per (seed, split, chunk, example in the chunk, dupe copy), so
    examples of different chunks or splits never share masks' randomness."""
    return np.random.default_rng([seed, STATIC_STREAM, SPLIT_IDS[split], chunk_index,
                                  example_index, copy])
