"""Verb-relation pointer targets (METHODS §2.5 item 3, Eq. 12).

For each predicate, the position of its related noun, found by the thesis'
rules over one sequence of morphemes (one model position per morpheme):
search only leftwards, stop at another predicate; a noun followed by one of
the predicate's case-frame particles wins; else the nearest noun; a compound
noun stands for its last noun; no candidate → the predicate itself.

Decisions the spec leaves open:
- Predicates that get a target: VV and VA (`TARGET_TAGS`), and the derived
  predicates Kiwi splits into stem + XSV/XSA (인정/NNG 하/XSV, 투입/NNG
  되/XSV, 행복/NNG 하/XSA, 오염/NNG 시키/XSV; kjax/morph/predicates.py): one
  predicate, whose pointer sits on the suffix, whose stem is part of it (the
  search starts left of the stem), and whose case frame is looked up as
  stem+suffix with VV (XSV) or VA (XSA) — 인정하/VV. The multi-hot
  tokenizer joins X+하/되 into one VV/VA morpheme already; both forms give
  the same target. VX (auxiliary, 보조 용언) and VCP/VCN (이다/아니다) take
  no arguments of their own.
- The leftward search stops at any predicate morpheme — VV VA VX VCP VCN and
  the predicate-deriving suffixes XSV/XSA (발생/NNG 하/XSV is a predicate
  too) — and also at a sentence end (SF) or a special token (tag ""): a noun
  across a clause, sentence or segment boundary is not this predicate's.
- Nouns: NNG NNP NNB NP NR. A compound is a run of consecutive nouns; noun
  suffixes XSN (들, 적) inside or after it are part of it (국회 의원 들 이
  → 의원). Only its last noun is a candidate.
- "Followed by a particle": any postposition (J*) in the run right after the
  compound, so 차만을 (차 만/JX 을/JKO) matches 을.
- Among frame matches the nearest wins. Predicates without a known case
  frame use the nearest-noun rule.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import numpy as np

from kjax.morph.predicates import DERIVED_TAG, derived_stem
from kjax.morph.tags import PREDICATE_TAGS, SUBSTANTIVE_TAGS, base_tag

TARGET_TAGS = frozenset({"VV", "VA"})
STOP_TAGS = PREDICATE_TAGS | {"XSV", "XSA", "SF", ""}
NOUN_TAGS = SUBSTANTIVE_TAGS
COMPOUND_SUFFIX_TAGS = frozenset({"XSN"})

CaseFrameLookup = Callable[[str, str], "frozenset[str] | None"]


class VerbRelation(NamedTuple):
    predicate: int      # position of the predicate
    target: int         # position of its related noun (== predicate: none found)
    rule: str           # 'frame' | 'nearest' | 'self'


class Predicate(NamedTuple):
    position: int       # where the pointer is read (a derived predicate: its suffix)
    start: int          # its first morpheme (a derived predicate: its stem)
    lemma: str          # what the case frame is looked up by: 마시, 인정하
    tag: str            # VV or VA


def predicates(forms: Sequence[str], tags: Sequence[str]) -> list[Predicate]:
    """The predicates that get a target, in order (`tags`: base tags)."""
    out = []
    for p, tag in enumerate(tags):
        if tag in TARGET_TAGS:
            out.append(Predicate(p, p, forms[p], tag))
        elif tag in DERIVED_TAG and (stem := derived_stem(tags, p)) is not None:
            out.append(Predicate(p, stem, "".join(forms[stem:p + 1]), DERIVED_TAG[tag]))
    return out


def _particles_after(forms, tags, last_noun: int, limit: int) -> set[str]:
    """Forms of the postposition run after a compound ending at `last_noun`."""
    i = last_noun + 1
    while i < limit and tags[i] in COMPOUND_SUFFIX_TAGS:
        i += 1
    particles = set()
    while i < limit and tags[i].startswith("J"):
        particles.add(forms[i])
        i += 1
    return particles


def _is_last_noun_of_compound(tags, i: int, limit: int) -> bool:
    j = i + 1
    while j < limit and tags[j] in COMPOUND_SUFFIX_TAGS:
        j += 1
    return not (j < limit and tags[j] in NOUN_TAGS)


def _relation_for(forms, tags, predicate: Predicate,
                  frame: frozenset[str] | None) -> VerbRelation:
    nearest, start = None, predicate.start
    for i in range(start - 1, -1, -1):
        tag = tags[i]
        if tag in STOP_TAGS:
            break
        if tag not in NOUN_TAGS or not _is_last_noun_of_compound(tags, i, start):
            continue
        if frame and _particles_after(forms, tags, i, start) & frame:
            return VerbRelation(predicate.position, i, "frame")
        if nearest is None:
            nearest = i
    if nearest is not None:
        return VerbRelation(predicate.position, nearest, "nearest")
    return VerbRelation(predicate.position, predicate.position, "self")


def find_verb_relations(forms: Sequence[str], tags: Sequence[str],
                        case_frame: CaseFrameLookup) -> list[VerbRelation]:
    """One VerbRelation per predicate (VV/VA, or stem + XSV/XSA), in order.

    forms/tags: the morphemes of one sequence (Sejong/Kiwi tags; `-R`/`-I`
    suffixes allowed); case_frame(stem, tag) → particles or None, e.g.
    `KnowledgeBase.case_frame_of`.
    """
    if len(forms) != len(tags):
        raise ValueError(f"forms ({len(forms)}) and tags ({len(tags)}) differ in length")
    base = [base_tag(t) for t in tags]
    return [_relation_for(forms, base, p, case_frame(p.lemma, p.tag))
            for p in predicates(forms, base)]


def verb_relation_targets(forms: Sequence[str], tags: Sequence[str],
                          case_frame: CaseFrameLookup, seq_len: int | None = None) -> np.ndarray:
    """[seq_len] int32: the target position at each predicate, -1 elsewhere
    (non-predicates and padding). seq_len defaults to len(forms); morphemes
    past seq_len are ignored."""
    seq_len = len(forms) if seq_len is None else seq_len
    targets = np.full(seq_len, -1, np.int32)
    for relation in find_verb_relations(forms[:seq_len], tags[:seq_len], case_frame):
        targets[relation.predicate] = relation.target
    return targets
