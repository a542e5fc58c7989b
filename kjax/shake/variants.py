"""SHAKE's other pretraining variants that need arrays from the pipeline
(METHODS §1.5): (5) a postposition takes its substantive's position id;
(6) a substantive and its postposition merge into one position (merged_units).

The substantive's *last* token is the one the postposition is attached to,
so its position id is the one the postposition's tokens take; every other
token keeps its own position (so later positions do not shift).
"""
from __future__ import annotations

import numpy as np

from kjax.shake.matrix import GROUP1, GROUP2, GROUP3, pos_pairs, tag_weights


def shared_position_ids(encoded: dict, seq_len: int, shake_cfg) -> np.ndarray:
    n = len(encoded["input_ids"])
    position_ids = np.arange(seq_len, dtype=np.int32)
    weights = {t: 1.0 for t in tag_weights(shake_cfg) if t not in GROUP3}
    for queries, keys, _ in pos_pairs(encoded["morph_ids"][:n], encoded["word_ids"][:n],
                                      encoded["tags"][:n], weights):
        position_ids[queries] = keys.max()
    return position_ids


def merged_units(example: dict) -> dict:
    """SHAKE's variant 6 (METHODS §1.5): a postposition and its substantive
    become one model position whose input is the sum of their token
    embeddings. Returned is `example` with `morph_ids` rewritten to one unit
    per position (each token alone, except a group 1-2 postposition's tokens,
    which join the substantive's last token) and `inpos` zeroed, so the
    segment sum (kjax.inputs.segments) does the merging.

    A postposition merges only when it directly follows its substantive
    (학교/에서); with a suffix between them (학생/들/이) it stays apart, since
    a position must be a contiguous run of tokens.
    """
    n = len(example["input_ids"])
    morph_ids = np.asarray(example["morph_ids"])[:n]
    units = np.arange(n, dtype=np.int32)
    weights = {t: 1.0 for t in GROUP1 + GROUP2}
    for queries, keys, _ in pos_pairs(morph_ids, example["word_ids"][:n], example["tags"][:n],
                                      weights):
        last = int(keys.max())
        if int(queries.min()) == last + 1:
            units[queries] = units[last]
    return {**example, "morph_ids": np.where(morph_ids < 0, -1, units).astype(np.int32),
            "inpos": np.zeros(n, np.int32)}
