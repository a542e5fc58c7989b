"""Building B, the Eq. 1 matrix (METHODS §1.3), from per-position arrays.

Positions are model positions: tokens for `sentencepiece`/`morph-sp`, and
morphemes for `multihot`. Each position carries its morpheme id, eojeol id
and POS tag id (-1 unit ids for [CLS]/[SEP]/[PAD]).

POS pairs (query → key, weight):
  group 1  JKS, JKO, JX             → the substantive they attach to, `boost_prem`
  group 2  JKC, JKG, JKB, JKV, JKQ, JC → the substantive they attach to, 1
  group 3  XPN, MM*                 → the substantive they modify (the next one), 1
The substantive a postposition attaches to is the run of substantive
morphemes (a compound noun is one run) nearest before it *in the same
eojeol*; noun-deriving suffixes (XSN, as in 학생/들/이) and other
postpositions (학교/에서/는) between them are skipped. A prefix (XPN)
modifies the next substantive run in its eojeol, an adnominal (MM*) the
first one in the following eojeol. Every query token × every key token of a
pair gets the weight; `shake.tag_weights` overrides any tag's weight.

No pair crosses a segment or a sentence: a special token ([CLS], [SEP])
ends a segment, and a jump of more than one in the eojeol ids ends a
sentence (kjax/examples/pairs.py leaves that gap between the sentences it
joins). An adnominal that ends segment A never modifies segment B's first
noun; a postposition already needs its substantive in its own eojeol.

Random variant: each non-special position is a query with probability p and
boosts its score to one other non-special position chosen uniformly.

B is stored as float8 e4m3 ([seq, seq], one byte per query-key pair: a
quarter of float32, METHODS' weights 1 and boost_prem values such as 1.5 or
2 exactly); the model casts it to the logits' dtype. A weight float8 cannot
hold exactly (0.3 would become 0.3125) is refused by `check_weights` when the
config is validated, with the nearest values that work.

Layouts (`shake.layout`): "dense" is that [seq, seq] matrix, seq² bytes per
example (64 MiB at seq 8192). "pairs" uses what every variant above
guarantees: a query position is in at most one pair, and its keys are one
contiguous run (a substantive run, or one random key). So B is three arrays
over the queries, key run [start, end) and weight, 9 bytes per position;
the model (and the flash kernel, tile by tile) rebuilds B[q, k] =
weight[q] if start[q] ≤ k < end[q] else 0. A query with no pair has
weight 0. Both layouts come from the same pairs (and the same random draws),
so the model computes the same numbers from either.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from kjax.morph.tags import TAGS, base_tag, is_substantive

GROUP1 = ("JKS", "JKO", "JX")
GROUP2 = ("JKC", "JKG", "JKB", "JKV", "JKQ", "JC")
GROUP3 = ("XPN", "MM", "MMA", "MMD", "MMN")
SKIPPABLE = ("XSN",) + GROUP1 + GROUP2   # between a postposition and its substantive
B_DTYPE = ml_dtypes.float8_e4m3fn


def tag_weights(shake_cfg) -> dict[str, float]:
    weights = {t: float(shake_cfg.boost_prem) for t in GROUP1}
    weights.update({t: 1.0 for t in GROUP2})
    if shake_cfg.group3:
        weights.update({t: 1.0 for t in GROUP3})
    weights.update({t: float(w) for t, w in dict(shake_cfg.tag_weights).items()})
    return weights


def check_weights(shake_cfg) -> None:
    """Every configured weight must survive B's float8 storage exactly."""
    from kjax.errors import KjaxError
    for tag, weight in sorted(tag_weights(shake_cfg).items()):
        stored = float(np.asarray(weight, np.float32).astype(B_DTYPE))
        if stored != weight or weight < 0:
            below = float(np.nextafter(np.asarray(stored, B_DTYPE), np.asarray(0, B_DTYPE)))
            raise KjaxError(
                f"shake weight {weight} (tag {tag}: shake.boost_prem / shake.tag_weights) is "
                f"not a non-negative value B's float8 storage holds exactly; use e.g. "
                f"{min(stored, below)} or {max(stored, below)} (3 mantissa bits: 0.25, 0.375, "
                f"0.5, ..., 1, 1.125, 1.25, ..., 2, 2.25, 2.5, ...); the sign and size of the "
                f"effect belong in model.shake_factor")


def _morphemes(morph_ids, word_ids, tags):
    """Morpheme runs in order: (positions, eojeol, tag name, span), where
    span numbers the stretches no pair may leave (segments, sentences)."""
    out, start, span, special = [], None, 0, False
    for i in range(len(morph_ids) + 1):
        boundary = (i == len(morph_ids) or morph_ids[i] < 0
                    or (i > 0 and morph_ids[i] != morph_ids[i - 1]))
        if boundary and start is not None:
            word = int(word_ids[start])
            if special or (out and word > out[-1][1] + 1):   # after [SEP], or a new sentence
                span += 1
            out.append((np.arange(start, i), word, base_tag(TAGS[tags[start]]), span))
            start, special = None, False
        if i < len(morph_ids) and morph_ids[i] < 0:
            special = bool(out)
        if i < len(morph_ids) and morph_ids[i] >= 0 and start is None:
            start = i
    return out


def _substantive_run(morphemes, k, step):
    """Positions of the substantive run (a compound is one run) nearest to
    morpheme k. Backwards (a postposition) it must be in k's eojeol, past
    skippable tags only; forwards (a prefix/adnominal) past other prefixes
    and adnominals only."""
    eojeol, span = morphemes[k][1], morphemes[k][3]
    skippable = SKIPPABLE if step < 0 else GROUP3
    j = k + step
    while 0 <= j < len(morphemes):
        positions, word, tag, other_span = morphemes[j]
        if step < 0 and word != eojeol or other_span != span:
            return None
        if is_substantive(tag):
            run = [positions]
            while 0 <= j + step < len(morphemes) and morphemes[j + step][1] == word \
                    and is_substantive(morphemes[j + step][2]):
                j += step
                run.append(morphemes[j][0])
            return np.sort(np.concatenate(run)), word
        if tag not in skippable:
            return None
        j += step
    return None


def pos_pairs(morph_ids, word_ids, tags, weights) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """(query positions, key positions, weight) for every POS pair of a sequence."""
    morphemes = _morphemes(np.asarray(morph_ids), np.asarray(word_ids), np.asarray(tags))
    pairs = []
    for k, (positions, eojeol, tag, _) in enumerate(morphemes):
        if weights.get(tag, 0.0) == 0.0:
            continue
        found = _substantive_run(morphemes, k, +1 if tag in GROUP3 else -1)
        if found is None:
            continue
        keys, key_eojeol = found
        # A prefix modifies a noun of its own eojeol; an adnominal one of a later eojeol.
        if tag == "XPN" and key_eojeol != eojeol or tag in GROUP3[1:] and key_eojeol == eojeol:
            continue
        pairs.append((positions, keys, weights[tag]))
    return pairs


def random_pairs(maskable: np.ndarray, p: float, rng: np.random.Generator):
    """Each selected position boosts its score to one random other position."""
    candidates = np.flatnonzero(maskable)
    pairs = []
    if len(candidates) < 2:
        return pairs
    for q in candidates[rng.random(len(candidates)) < p]:
        k = candidates[rng.integers(len(candidates) - 1)]
        k = k if k < q else candidates[np.searchsorted(candidates, k) + 1]  # skip q itself
        pairs.append((np.asarray([q]), np.asarray([k]), 1.0))
    return pairs


def _pairs(encoded: dict, shake_cfg, rng):
    n = len(encoded["input_ids"])
    if shake_cfg.variant == "pos":
        return pos_pairs(encoded["morph_ids"][:n], encoded["word_ids"][:n],
                         encoded["tags"][:n], tag_weights(shake_cfg))
    if shake_cfg.variant == "random":
        rng = rng if rng is not None else np.random.default_rng()
        return random_pairs(np.asarray(encoded["word_ids"][:n]) >= 0, shake_cfg.p, rng)
    return []


def build_shake_matrix(encoded: dict, seq_len: int, shake_cfg, rng=None) -> np.ndarray:
    """B [seq_len, seq_len] (float8 e4m3) for one example; see the module doc."""
    b = np.zeros((seq_len, seq_len), np.float32)
    for queries, keys, weight in _pairs(encoded, shake_cfg, rng):
        b[np.ix_(queries, keys)] = weight
    return b.astype(B_DTYPE)


def build_shake_pairs(encoded: dict, seq_len: int, shake_cfg, rng=None) -> dict:
    """B in the pairs layout for one example: {shake_key_start, shake_key_end}
    int32 [seq_len] and shake_weight float8 [seq_len] (module doc)."""
    start = np.zeros(seq_len, np.int32)
    end = np.zeros(seq_len, np.int32)
    weight = np.zeros(seq_len, np.float32)
    for queries, keys, w in _pairs(encoded, shake_cfg, rng):
        lo, hi = int(np.min(keys)), int(np.max(keys)) + 1
        if len(np.unique(keys)) != hi - lo or (weight[queries] != 0).any():
            raise ValueError(f"shake.layout='pairs' needs one contiguous key run per query; "
                             f"queries {list(queries)} → keys {list(keys)} are not one (use "
                             f"shake.layout='dense')")
        start[queries], end[queries], weight[queries] = lo, hi, w
    return {"shake_key_start": start, "shake_key_end": end, "shake_weight": weight.astype(B_DTYPE)}


def build_b(encoded: dict, seq_len: int, shake_cfg, rng=None) -> dict:
    """B for one example as the batch carries it, in the config's layout
    (`shake.layout`): {"shake": dense} or the three pairs arrays."""
    if shake_cfg.get("layout", "dense") == "pairs":   # O(seq): see the module doc
        return build_shake_pairs(encoded, seq_len, shake_cfg, rng)
    return {"shake": build_shake_matrix(encoded, seq_len, shake_cfg, rng)}


# The batch keys of B's pairs layout → the model's names (kjax/model/attention_core.py).
SHAKE_PAIR_KEYS = {"shake_key_start": "key_start", "shake_key_end": "key_end",
                   "shake_weight": "weight"}


def shake_from_batch(batch: dict):
    """B as the model takes it from a batch: the dense array, the pairs dict, or None."""
    if "shake" in batch:
        return batch["shake"]
    if "shake_weight" in batch:
        return {name: batch[key] for key, name in SHAKE_PAIR_KEYS.items()}
    return None


def pairs_to_dense(pairs: dict) -> np.ndarray:
    """The dense B [..., seq, seq] (float32) a pairs-layout example (or batch) stands for."""
    start, end = pairs["shake_key_start"], pairs["shake_key_end"]
    keys = np.arange(start.shape[-1])
    inside = (keys >= start[..., None]) & (keys < end[..., None])
    return np.where(inside, pairs["shake_weight"].astype(np.float32)[..., None], 0.0)
