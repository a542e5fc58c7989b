"""The `shaking` section of `kjax inspect`: the query → key pairs of B
(METHODS §1.3) for one text, under the configured variant.

With shake.variant "none" the POS pairs are shown all the same (marked as
what variant "pos" would use), so a user can check them before turning
shaking on. The random variant draws with data.seed.
"""
from __future__ import annotations

import numpy as np

from kjax.morph.tags import TAGS
from kjax.shake.matrix import pos_pairs, random_pairs, tag_weights


def model_positions(tokenizer, encoded) -> tuple[dict, list[str]]:
    """Per-position arrays and a label per position: tokens for the token
    schemes, morphemes (the multi-hot positions) for `multihot`."""
    example = encoded["example"]
    if tokenizer.scheme != "multihot":
        labels = ["[CLS]", *encoded["tokens"], "[SEP]"]
        return example, labels
    from kjax.batches.multihot import position_arrays
    positions = position_arrays(example)
    labels = ["[CLS]", *(m.form for m in encoded["morphemes"]), "[SEP]"]
    return positions, labels


def _describe(indices, labels) -> str:
    return " ".join(f"{labels[i]}@{i}" for i in indices)


def shaking_section(text, config, tokenizer, encoded) -> dict:
    positions, labels = model_positions(tokenizer, encoded)
    k = config.shake
    if k.variant == "random":
        maskable = np.asarray(positions["word_ids"]) >= 0
        pairs = random_pairs(maskable, k.p, np.random.default_rng(config.data.seed))
        note = f"variant random, p={k.p}: one draw (seed data.seed)"
    else:
        pairs = pos_pairs(positions["morph_ids"], positions["word_ids"], positions["tags"],
                          tag_weights(k))
        note = "variant pos" if k.variant == "pos" else \
            "shake.variant is 'none': the pairs variant 'pos' would use"
    tags = np.asarray(positions["tags"])
    rows = [{"query": _describe(q, labels), "query tag": TAGS[int(tags[q[0]])] or "-",
             "key": _describe(keys, labels), "weight": float(w)}
            for q, keys, w in pairs]
    unit = "morpheme" if tokenizer.scheme == "multihot" else "token"
    return {"name": "shaking", "rows": rows,
            "note": f"{note}; B[query, key] = weight, positions are {unit}s (label@position)"}
