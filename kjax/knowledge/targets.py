"""Per-sequence targets of the knowledge objectives (METHODS §2.5), as
fixed-shape numpy arrays for one example; the loader stacks them.

Input: the morphemes of one sequence, one per model position (`forms`,
`tags`; special tokens and padding have tag ""), a KnowledgeBase, and
`token_to_id(text) -> int | None` (None, a negative id or `unk_id` = "not a
single vocabulary token"; for the multi-hot vocabulary a noun's token is its
form, METHODS §2.1).

Arrays and padding (`H` = max_hypernym, `K` = max_hypernyms_per_noun,
`M` = max_sense, `d` = kb.sense_dim, `S` = seq_len):

    hyp_positions   [H]     int32  position of a sampled noun; 0 = padding
    hyp_targets     [H, K]  int32  hypernym token ids; 0 = padding
    hyp_target_mask [H, K]  bool   valid hypernym ids (→ multihot_softmax_ce)
    hyp_mask        [H]     bool   slot used (→ the loss weights)
    sense_positions [M]     int32  0 = padding
    sense_vectors   [M, d]  float32 zeros = padding
    sense_mask      [M]     bool
    verb_targets    [S]     int32  related-noun position per predicate; -1 elsewhere

Decisions: nouns are NNG NNP NNB NP NR; a noun qualifies for the hypernym
head if at least one of its hypernyms is a single vocabulary token, for the
sense head if it has a vector. Up to H (M) qualifying positions are drawn
uniformly without replacement and stored in position order. A noun keeps its
first K token hypernyms (file order, homographs in number order).
`exclude` [S] bool removes positions from the hypernym and sense draws: both
heads read the input vector (Eq. 10–11), which holds no information about a
[MASK]ed morpheme, so the pipeline passes its MLM mask there.
"""
from __future__ import annotations

import collections
from typing import Callable, Sequence

import numpy as np

from kjax.knowledge.resources import KnowledgeBase
from kjax.knowledge.verb_relation import (find_verb_relations, predicates,
                                          verb_relation_targets)
from kjax.morph.tags import SUBSTANTIVE_TAGS, base_tag

TokenToId = Callable[[str], "int | None"]


def _token_ids(hypernyms: Sequence[str], token_to_id: TokenToId, unk_id: int | None) -> list[int]:
    ids = []
    for form in hypernyms:
        i = token_to_id(form)
        if i is not None and i >= 0 and i != unk_id and i not in ids:
            ids.append(int(i))
    return ids


def _noun_positions(tags: Sequence[str], seq_len: int, exclude) -> list[int]:
    return [i for i, tag in enumerate(tags[:seq_len]) if base_tag(tag) in SUBSTANTIVE_TAGS
            and not (exclude is not None and exclude[i])]


def _draw(candidates: list[int], limit: int, rng: np.random.Generator) -> list[int]:
    if len(candidates) <= limit:
        return candidates
    return sorted(int(c) for c in rng.choice(candidates, size=limit, replace=False))


def hypernym_targets(forms, tags, kb: KnowledgeBase, token_to_id: TokenToId,
                     rng: np.random.Generator, max_hypernym: int = 20,
                     max_hypernyms_per_noun: int = 8, seq_len: int | None = None,
                     exclude=None, unk_id: int | None = None) -> dict[str, np.ndarray]:
    """Hypernym-prediction slots (§2.5 item 1, Eq. 10)."""
    seq_len = len(forms) if seq_len is None else seq_len
    qualifying = {}
    for i in _noun_positions(tags, seq_len, exclude):
        ids = _token_ids(kb.hypernyms_of(forms[i], tags[i]), token_to_id, unk_id)
        if ids:
            qualifying[i] = ids[:max_hypernyms_per_noun]
    out = {"hyp_positions": np.zeros(max_hypernym, np.int32),
           "hyp_targets": np.zeros((max_hypernym, max_hypernyms_per_noun), np.int32),
           "hyp_target_mask": np.zeros((max_hypernym, max_hypernyms_per_noun), bool),
           "hyp_mask": np.zeros(max_hypernym, bool)}
    for slot, position in enumerate(_draw(list(qualifying), max_hypernym, rng)):
        ids = qualifying[position]
        out["hyp_positions"][slot] = position
        out["hyp_targets"][slot, :len(ids)] = ids
        out["hyp_target_mask"][slot, :len(ids)] = True
        out["hyp_mask"][slot] = True
    return out


def sense_targets(forms, tags, kb: KnowledgeBase, rng: np.random.Generator,
                  max_sense: int = 20, seq_len: int | None = None,
                  exclude=None) -> dict[str, np.ndarray]:
    """Sense-vector regression slots (§2.5 item 2, Eq. 11)."""
    seq_len = len(forms) if seq_len is None else seq_len
    vectors = {}
    for i in _noun_positions(tags, seq_len, exclude):
        vector = kb.sense_vector_of(forms[i], tags[i])
        if vector is not None:
            vectors[i] = vector
    out = {"sense_positions": np.zeros(max_sense, np.int32),
           "sense_vectors": np.zeros((max_sense, kb.sense_dim), np.float32),
           "sense_mask": np.zeros(max_sense, bool)}
    for slot, position in enumerate(_draw(list(vectors), max_sense, rng)):
        out["sense_positions"][slot] = position
        out["sense_vectors"][slot] = vectors[position]
        out["sense_mask"][slot] = True
    return out


def verb_targets(forms, tags, kb: KnowledgeBase, seq_len: int | None = None) -> np.ndarray:
    """[seq_len] int32 verb-relation pointer targets (§2.5 item 3, Eq. 12)."""
    return verb_relation_targets(forms, tags, kb.case_frame_of, seq_len)


def knowledge_targets(forms, tags, kb: KnowledgeBase, token_to_id: TokenToId,
                      rng: np.random.Generator, seq_len: int, max_hypernym: int = 20,
                      max_sense: int = 20, max_hypernyms_per_noun: int = 8,
                      exclude=None, unk_id: int | None = None) -> dict[str, np.ndarray]:
    """All knowledge targets of one sequence (the module docstring lists them)."""
    if len(forms) != len(tags):
        raise ValueError(f"forms ({len(forms)}) and tags ({len(tags)}) differ in length")
    out = hypernym_targets(forms, tags, kb, token_to_id, rng, max_hypernym,
                           max_hypernyms_per_noun, seq_len, exclude, unk_id)
    out.update(sense_targets(forms, tags, kb, rng, max_sense, seq_len, exclude))
    out["verb_targets"] = verb_targets(forms, tags, kb, seq_len)
    return out


class KnowledgeCoverage:
    """Accumulates how much of a corpus the knowledge base covers (for
    `kjax knowledge stats`): shares of nouns with hypernyms / token hypernyms
    / sense vectors, predicates with case frames, how verb targets were
    found, and mean targets per sequence."""

    def __init__(self, kb: KnowledgeBase, token_to_id: TokenToId, unk_id: int | None = None):
        self.kb, self.token_to_id, self.unk_id = kb, token_to_id, unk_id
        self.counts: collections.Counter = collections.Counter()

    def update(self, forms, tags, targets: dict[str, np.ndarray] | None = None) -> None:
        """Counts one sequence; `targets` (from knowledge_targets) adds the
        per-sequence numbers of slots actually filled."""
        c = self.counts
        c["sequences"] += 1
        base = [base_tag(t) for t in tags]
        for form, tag in zip(forms, base):
            if tag in SUBSTANTIVE_TAGS:
                hypernyms = self.kb.hypernyms_of(form, tag)
                c["nouns"] += 1
                c["nouns_with_hypernyms"] += bool(hypernyms)
                c["nouns_with_token_hypernyms"] += bool(
                    _token_ids(hypernyms, self.token_to_id, self.unk_id))
                c["nouns_with_sense"] += self.kb.sense_vector_of(form, tag) is not None
        for p in predicates(forms, base):    # VV/VA and stem + XSV/XSA
            c["predicates"] += 1
            c["predicates_with_frame"] += self.kb.case_frame_of(p.lemma, p.tag) is not None
        for relation in find_verb_relations(forms, tags, self.kb.case_frame_of):
            c[f"verb_rule_{relation.rule}"] += 1
        if targets is not None:
            c["hyp_slots"] += int(targets["hyp_mask"].sum())
            c["sense_slots"] += int(targets["sense_mask"].sum())
            c["verb_slots"] += int((targets["verb_targets"] >= 0).sum())

    def summary(self) -> dict[str, float]:
        c = self.counts

        def share(part: str, whole: str) -> float:
            return c[part] / c[whole] if c[whole] else 0.0
        verbs = sum(c[f"verb_rule_{r}"] for r in ("frame", "nearest", "self"))
        result = {key: int(c[key]) for key in ("sequences", "nouns", "predicates")}
        result.update({
            "noun_hypernym_share": share("nouns_with_hypernyms", "nouns"),
            "noun_token_hypernym_share": share("nouns_with_token_hypernyms", "nouns"),
            "noun_sense_share": share("nouns_with_sense", "nouns"),
            "predicate_frame_share": share("predicates_with_frame", "predicates"),
            **{f"verb_{r}_share": c[f"verb_rule_{r}"] / verbs if verbs else 0.0
               for r in ("frame", "nearest", "self")},
            **{f"mean_{k}_per_sequence": share(f"{k}_slots", "sequences")
               for k in ("hyp", "sense", "verb")},
        })
        return result


def coverage_stats(sequences, kb: KnowledgeBase, token_to_id: TokenToId,
                   rng: np.random.Generator | None = None, seq_len: int | None = None,
                   unk_id: int | None = None, **limits) -> dict[str, float]:
    """Coverage summary over an iterable of (forms, tags) sequences;
    `limits` go to knowledge_targets (max_hypernym, max_sense, ...)."""
    rng = np.random.default_rng(0) if rng is None else rng
    coverage = KnowledgeCoverage(kb, token_to_id, unk_id)
    for forms, tags in sequences:
        length = len(forms) if seq_len is None else seq_len
        targets = knowledge_targets(forms[:length], tags[:length], kb, token_to_id, rng,
                                    length, unk_id=unk_id, **limits)
        coverage.update(forms[:length], tags[:length], targets)
    return coverage.summary()
