"""Token stream → morpheme positions for the multi-hot input (METHODS §2.3).

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

from kjax.tokens.sentencepiece import MASK, PAD


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
