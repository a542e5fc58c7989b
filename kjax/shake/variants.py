"""SHAKE's other pretraining variant that needs arrays from the pipeline
(METHODS §1.5, variant 5): a postposition takes its substantive's position id.

The substantive's *last* token is the one the postposition is attached to,
so its position id is the one the postposition's tokens take; every other
token keeps its own position (so later positions do not shift).
"""
from __future__ import annotations

import numpy as np

from kjax.shake.matrix import GROUP3, pos_pairs, tag_weights


def shared_position_ids(encoded: dict, seq_len: int, shake_cfg) -> np.ndarray:
    n = len(encoded["input_ids"])
    position_ids = np.arange(seq_len, dtype=np.int32)
    weights = {t: 1.0 for t in tag_weights(shake_cfg) if t not in GROUP3}
    for queries, keys, _ in pos_pairs(encoded["morph_ids"][:n], encoded["word_ids"][:n],
                                      encoded["tags"][:n], weights):
        position_ids[queries] = keys.max()
    return position_ids
