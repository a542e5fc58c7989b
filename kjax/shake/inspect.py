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


def model_positions(config, encoded) -> tuple[dict, list[str]]:
    """Per-position arrays and a label per position, as the input mode
    (kjax/inputs) makes positions: tokens, morphemes, merged units."""
    from kjax.inputs import input_mode
    example = encoded["example"]
    positions, groups = input_mode(config).positions(example)
    tokens = ["[CLS]", *encoded["tokens"], "[SEP]"]
    if all(len(group) == 1 for group in groups):
        return positions, [tokens[group[0]] for group in groups]
    # Positions of several tokens: the forms of the morphemes they hold.
    morph = np.concatenate([[-1], encoded["morph"], [-1]])
    labels = []
    for group in groups:
        ks = list(dict.fromkeys(int(k) for k in morph[group]))
        labels.append(tokens[group[0]] if ks == [-1] else
                      "".join(encoded["morphemes"][k].form for k in ks if k >= 0))
    return positions, labels


def _describe(indices, labels) -> str:
    return " ".join(f"{labels[i]}@{i}" for i in indices)


def shaking_section(text, config, tokenizer, encoded) -> dict:
    positions, labels = model_positions(config, encoded)
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
    return {"name": "shaking", "rows": rows,
            "note": f"{note}; B[query, key] = weight, positions are model.input_mode="
                    f"{config.model.input_mode!r}'s (label@position)"}
