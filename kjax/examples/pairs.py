"""Sentence-pair examples for MLM + NSP, as BERT's create_pretraining_data
(METHODS §4): `[CLS] A [SEP] B [SEP]`, target lengths sampled with
`short_seq_prob`, NSP negatives (label 1) whose B comes from *another*
document, and random front/back truncation.

Documents arrive as lists of tokenized sentences (the per-token arrays of
`kjax.tokens`). Morpheme and eojeol indices are renumbered to be unique
within an example, so masking units never merge across sentences; the
eojeol ids of consecutive sentences leave a gap of one, so later stages see
where a sentence ends (SHAKE's pairs never cross one, kjax/shake/matrix.py).
"""
from __future__ import annotations

import numpy as np

from kjax.tokens.sentencepiece import CLS, SEP

IS_NEXT, IS_RANDOM = 0, 1
EXAMPLE_ARRAYS = ("input_ids", "token_type_ids", "word_ids", "morph_ids", "inpos", "tags")


def _concat(segments: list[dict]) -> dict[str, np.ndarray]:
    """Joins sentences, offsetting morpheme/eojeol ids so they stay unique."""
    parts = {k: [] for k in ("ids", "morph", "inpos", "tag", "eojeol")}
    morph_base = word_base = 0
    for seg in segments:
        parts["ids"].append(seg["ids"])
        parts["inpos"].append(seg["inpos"])
        parts["tag"].append(seg["tag"])
        parts["morph"].append(seg["morph"] + morph_base)
        parts["eojeol"].append(seg["eojeol"] + word_base)
        morph_base += int(seg["morph"].max()) + 1
        word_base += int(seg["eojeol"].max()) + 2    # the gap marks a new sentence
    return {k: np.concatenate(v) if v else np.zeros(0, np.int32) for k, v in parts.items()}


def _truncate_pair(a: dict, b: dict, max_tokens: int, rng: np.random.Generator):
    """Drops tokens from the front or back of the longer side, as BERT does."""
    a_lo, a_hi, b_lo, b_hi = 0, len(a["ids"]), 0, len(b["ids"])
    while (a_hi - a_lo) + (b_hi - b_lo) > max_tokens:
        if a_hi - a_lo > b_hi - b_lo:
            if rng.random() < 0.5:
                a_lo += 1
            else:
                a_hi -= 1
        else:
            if rng.random() < 0.5:
                b_lo += 1
            else:
                b_hi -= 1
    cut = lambda seq, lo, hi: {k: v[lo:hi] for k, v in seq.items()}  # noqa: E731
    return cut(a, a_lo, a_hi), cut(b, b_lo, b_hi)


def assemble(a: dict, b: dict, nsp_label: int, source_docs: tuple[int, int]) -> dict:
    """`[CLS] A [SEP] B [SEP]` with per-token arrays; specials get unit id -1."""
    special = lambda v: np.asarray([v], np.int32)  # noqa: E731
    b_words = b["eojeol"] + (int(a["eojeol"].max()) + 1 if len(a["ids"]) else 0)
    b_morphs = b["morph"] + (int(a["morph"].max()) + 1 if len(a["ids"]) else 0)
    cat = lambda *xs: np.concatenate(xs).astype(np.int32)  # noqa: E731
    minus1, zero = special(-1), special(0)
    return {
        "input_ids": cat(special(CLS), a["ids"], special(SEP), b["ids"], special(SEP)),
        "token_type_ids": cat(zero, np.zeros(len(a["ids"]) + 1), np.ones(len(b["ids"]) + 1)),
        "word_ids": cat(minus1, a["eojeol"], minus1, b_words, minus1),
        "morph_ids": cat(minus1, a["morph"], minus1, b_morphs, minus1),
        "inpos": cat(zero, a["inpos"], zero, b["inpos"], zero),
        "tags": cat(zero, a["tag"], zero, b["tag"], zero),
        "nsp_label": np.asarray(nsp_label, np.int32),
        "source_docs": np.asarray(source_docs, np.int32),
    }


def _random_other_document(pool: list, doc_id: int, rng: np.random.Generator):
    others = [i for i in range(len(pool)) if pool[i][0] != doc_id]
    return pool[others[rng.integers(len(others))]] if others else None


def pairs_from_document(doc_id: int, doc: list[dict], pool: list[tuple[int, list[dict]]],
                        rng: np.random.Generator, max_seq_len: int, short_seq_prob: float,
                        nsp_prob: float) -> list[dict]:
    """All examples of one document. `pool` holds (doc_id, doc) candidates for
    NSP negatives; entries with this doc_id are never used."""
    doc = [s for s in doc if len(s["ids"])]
    max_tokens = max_seq_len - 3
    target = max_tokens
    if rng.random() < short_seq_prob:
        target = int(rng.integers(2, max_tokens + 1))
    examples, chunk, length, i = [], [], 0, 0
    while i < len(doc):
        chunk.append(doc[i])
        length += len(doc[i]["ids"])
        if i == len(doc) - 1 or length >= target:
            a_end = 1 if len(chunk) == 1 else int(rng.integers(1, len(chunk)))
            other = None
            if len(chunk) == 1 or rng.random() < nsp_prob:
                other = _random_other_document(pool, doc_id, rng)
            if other is not None:
                other_id, other_doc = other
                want = max(1, target - sum(len(s["ids"]) for s in chunk[:a_end]))
                start, b_segs = int(rng.integers(len(other_doc))), []
                for seg in other_doc[start:]:
                    if len(seg["ids"]):
                        b_segs.append(seg)
                    if sum(len(s["ids"]) for s in b_segs) >= want:
                        break
                i -= len(chunk) - a_end  # unused sentences start the next example
                label, source = IS_RANDOM, (doc_id, other_id)
            else:
                b_segs, label, source = chunk[a_end:], IS_NEXT, (doc_id, doc_id)
            if b_segs:
                a, b = _truncate_pair(_concat(chunk[:a_end]), _concat(b_segs), max_tokens, rng)
                if len(a["ids"]) and len(b["ids"]):
                    examples.append(assemble(a, b, label, source))
            chunk, length = [], 0
        i += 1
    return examples
