"""Verb-relation pointer targets (METHODS §2.5 item 3, Eq. 12).

For each predicate, the position of its related noun, found by the thesis'
rules over one sequence of morphemes (one model position per morpheme):
search only leftwards, stop at another predicate; a noun followed by one of
the predicate's case-frame particles wins; else the nearest noun; a compound
noun stands for its last noun; no candidate → the predicate itself.

Decisions the spec leaves open:
- Predicates that get a target: VV and VA (`TARGET_TAGS`). VX (auxiliary,
  보조 용언) and VCP/VCN (이다/아니다) take no arguments of their own.
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


def _relation_for(forms, tags, predicate: int, frame: frozenset[str] | None) -> VerbRelation:
    nearest = None
    for i in range(predicate - 1, -1, -1):
        tag = tags[i]
        if tag in STOP_TAGS:
            break
        if tag not in NOUN_TAGS or not _is_last_noun_of_compound(tags, i, predicate):
            continue
        if frame and _particles_after(forms, tags, i, predicate) & frame:
            return VerbRelation(predicate, i, "frame")
        if nearest is None:
            nearest = i
    if nearest is not None:
        return VerbRelation(predicate, nearest, "nearest")
    return VerbRelation(predicate, predicate, "self")


def find_verb_relations(forms: Sequence[str], tags: Sequence[str],
                        case_frame: CaseFrameLookup) -> list[VerbRelation]:
    """One VerbRelation per VV/VA morpheme, in sequence order.

    forms/tags: the morphemes of one sequence (Sejong/Kiwi tags; `-R`/`-I`
    suffixes allowed); case_frame(stem, tag) → particles or None, e.g.
    `KnowledgeBase.case_frame_of`.
    """
    if len(forms) != len(tags):
        raise ValueError(f"forms ({len(forms)}) and tags ({len(tags)}) differ in length")
    base = [base_tag(t) for t in tags]
    return [_relation_for(forms, base, p, case_frame(forms[p], tag))
            for p, tag in enumerate(base) if tag in TARGET_TAGS]


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
