"""Token stream → positions made of several tokens (a segment sum per
position): the multi-hot input (METHODS §2.3, one position per morpheme) and
SHAKE's merged positions (§1.5, 6) share it (kjax/inputs/multihot.py, merged.py).

One model position per morpheme (and per [CLS]/[SEP]). The batch keeps the
flat token stream and, per token, the position it belongs to and its place
inside the morpheme — no fixed-width padding per morpheme; the model sums
the tokens of a position with a segment sum (Eq. 3).

Masking has already picked whole morphemes (or eojeol) at token level. A
position whose tokens all became [MASK] is fed as a single [MASK] token, so
the model cannot count a masked morpheme's tokens; its targets are all of
its original tokens (up to `max_targets`), for the Eq. 7–9 loss.

Sizes: a multi-hot example has at most `max_seq_len` tokens, hence at most
that many positions; both axes are padded to `max_seq_len`.
"""
from __future__ import annotations

import numpy as np

from kjax.examples.masking import mask_tokens, whole_position_masks
from kjax.inputs.base import TOKEN_INPUTS, InputMode
from kjax.shake.matrix import shake_from_batch
from kjax.tokens.sentencepiece import MASK, PAD

# The per-token arrays of a segment batch (the model's `multihot` argument).
SEGMENT_KEYS = ("token_ids", "token_position", "token_inpos", "position_tags")


def position_of_tokens(morph_ids: np.ndarray) -> np.ndarray:
    """A new position starts at every special token and every new morpheme."""
    starts = np.ones(len(morph_ids), bool)
    starts[1:] = (morph_ids[1:] < 0) | (morph_ids[1:] != morph_ids[:-1])
    return np.cumsum(starts) - 1


def to_multihot(example: dict, original_ids: np.ndarray, masked_tokens: np.ndarray,
                max_seq_len: int, max_predictions: int, max_targets: int) -> dict:
    """`example` holds the (masked) token stream; `original_ids` the ids before
    masking; `masked_tokens` the token positions chosen by masking."""
    ids = np.asarray(example["input_ids"])
    position = position_of_tokens(np.asarray(example["morph_ids"]))
    n_pos = int(position[-1]) + 1
    first = np.flatnonzero(np.r_[True, position[1:] != position[:-1]])  # first token of each
    is_masked_pos = np.zeros(n_pos, bool)
    is_masked_pos[position[masked_tokens]] = True
    all_mask = np.zeros(n_pos, bool)
    for p in np.flatnonzero(is_masked_pos):
        all_mask[p] = (ids[position == p] == MASK).all()
    keep = ~all_mask[position] | np.isin(np.arange(len(ids)), first)  # [MASK]ed: one token
    token_ids, token_position = ids[keep], position[keep]
    token_inpos = np.asarray(example["inpos"])[keep] * ~all_mask[token_position]

    def pad(x, size, value=0, dtype=np.int32):
        return np.pad(np.asarray(x, dtype), (0, size - len(x)), constant_values=value)

    masked_positions = np.flatnonzero(is_masked_pos)[:max_predictions]
    target_ids = np.zeros((max_predictions, max_targets), np.int32)
    target_mask = np.zeros((max_predictions, max_targets), bool)
    for row, p in enumerate(masked_positions):
        targets = original_ids[position == p][:max_targets]
        target_ids[row, :len(targets)] = targets
        target_mask[row, :len(targets)] = True
    return {
        "token_ids": pad(token_ids, max_seq_len, PAD),
        "token_position": pad(token_position, max_seq_len, -1),
        "token_inpos": pad(token_inpos, max_seq_len),
        "position_tags": pad(np.asarray(example["tags"])[first], max_seq_len),
        "token_type_ids": pad(np.asarray(example["token_type_ids"])[first], max_seq_len),
        "attention_mask": pad(np.ones(n_pos), max_seq_len),
        "mlm_positions": pad(masked_positions, max_predictions),
        "mlm_target_ids": target_ids,
        "mlm_target_mask": target_mask,
        "mlm_weights": pad(np.ones(len(masked_positions)), max_predictions, 0, np.float32),
        "nsp_labels": np.asarray(example["nsp_label"], np.int32),
        "nsp_weights": np.asarray(1.0, np.float32),
    }


def position_arrays(example: dict) -> dict:
    """Per-position view (first token's arrays, morpheme id = position) that the
    B builder and the knowledge targets work on when positions are morphemes."""
    morph = np.asarray(example["morph_ids"])
    position = position_of_tokens(morph)
    first = np.flatnonzero(np.r_[True, position[1:] != position[:-1]])
    special = morph[first] < 0
    return {"input_ids": np.asarray(example["input_ids"])[first],
            "morph_ids": np.where(special, -1, np.arange(len(first))).astype(np.int32),
            "word_ids": np.asarray(example["word_ids"])[first],
            "tags": np.asarray(example["tags"])[first]}


class SegmentMode(InputMode):
    """Positions made of several tokens, summed by the model (a segment sum
    over the flat token stream). `units(example)` rewrites `morph_ids` to one
    id per position; the loader finds the positions on the *unmasked* example
    first, then masks whole positions ("merge first, then mask"), so a masked
    substantive never shows its merged postposition."""
    embedding = "segment_sum"
    positions_are_tokens = False
    # A position has several target tokens: a multi-target MLM loss (METHODS §2.4).
    mlm_losses = ("eq9", "bce", "summed_ce")
    completes_stored_masks = False   # extend masks stored by `prepare` to whole positions
    token_ids_key = "token_ids"      # a special is a position of one token

    def units(self, example: dict) -> dict:
        return example

    def mask_positions(self, example: dict) -> np.ndarray:
        return np.asarray(self.units(example)["morph_ids"])

    def example_inputs(self, example, config, rng, dynamic, resources):
        units = self.units(example)
        positions = np.asarray(units["morph_ids"])
        if dynamic:
            example = mask_tokens(example, config, rng, positions)
        if self.completes_stored_masks:
            example = whole_position_masks(example, positions, rng, config.model.vocab_size)
        original = np.array(example["input_ids"])
        original[example["mlm_positions"]] = example["mlm_ids"]
        example = {**example, "morph_ids": units["morph_ids"], "inpos": units["inpos"]}
        d = config.data
        out = to_multihot(example, original, example["mlm_positions"], d.max_seq_len,
                          d.max_predictions_per_seq, d.max_targets_per_position)
        knowledge = resources.get("knowledge")
        if knowledge is not None:
            masked = out["mlm_positions"][out["mlm_weights"] > 0]
            out.update(knowledge(original, example, masked, rng))
        return out, position_arrays(example)   # B is over positions (METHODS §2.3)

    def model_inputs(self, batch: dict) -> dict:
        kwargs = {"input_ids": batch.get("input_ids"),   # unused: tokens come in `multihot`
                  **{k: batch[k] for k in TOKEN_INPUTS[1:]},
                  "multihot": {k: batch[k] for k in SEGMENT_KEYS}}
        kwargs.update({k: batch[k] for k in ("position_ids",) if k in batch})
        if (shake := shake_from_batch(batch)) is not None:   # dense B or its pairs layout
            kwargs["shake"] = shake
        return kwargs

    def dummy_inputs(self, config, batch_size: int) -> dict:
        kwargs = super().dummy_inputs(config, batch_size)
        kwargs["multihot"] = {k: kwargs["input_ids"] for k in SEGMENT_KEYS}
        return kwargs

    def finetune_inputs(self, rows: dict, lengths, seq_len: int, config) -> tuple[dict, np.ndarray]:
        """Each row's positions found on its tokens (no masking), then the
        segment arrays the model sums (to_multihot); padding feeds position -1."""
        n = len(lengths)
        out = {k: np.zeros((n, seq_len), np.int32)
               for k in (*SEGMENT_KEYS, "token_type_ids", "attention_mask")}
        owner = np.full((n, seq_len), -1, np.int32)
        for r, m in enumerate(np.asarray(lengths, int)):
            units = self.units(_row(rows, r, m))
            mh = to_multihot({**units, "nsp_label": 0}, units["input_ids"],
                             np.zeros(0, np.int64), seq_len, 1, 1)
            for k in out:
                out[k][r] = mh[k]
            owner[r, :m] = position_of_tokens(np.asarray(units["morph_ids"]))
        out["input_ids"] = np.zeros((n, seq_len), np.int32)   # unused: tokens come in `multihot`
        return out, owner

    def finetune_b_view(self, example: dict) -> dict:
        return position_arrays(self.units(example))

    def positions(self, example: dict) -> tuple[dict, list[np.ndarray]]:
        units = self.units(example)
        owner = position_of_tokens(np.asarray(units["morph_ids"]))
        first = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        view = position_arrays(units)
        view["token_type_ids"] = np.asarray(example["token_type_ids"])[first]
        return view, [np.flatnonzero(owner == p) for p in range(len(first))]

    def position_batch(self, example: dict, seq_len: int) -> dict:
        units = self.units(example)
        mh = to_multihot(units, np.asarray(units["input_ids"]), np.zeros(0, np.int64),
                         seq_len, 1, 1)
        return {"input_ids": np.zeros(seq_len, np.int32),   # unused: tokens come in `multihot`
                "token_type_ids": mh["token_type_ids"], "attention_mask": mh["attention_mask"],
                "multihot": {k: mh[k] for k in SEGMENT_KEYS}}


def _row(rows: dict, r: int, m: int) -> dict:
    """Row r of fine-tuning arrays, cut to its m real tokens."""
    keys = ("input_ids", "token_type_ids", "word_ids", "morph_ids", "tags", "inpos")
    return {k: np.asarray(rows[k][r, :m]) for k in keys}
