"""Derived predicates: a stem plus a verb/adjective-deriving suffix.

Kiwi splits X+하/되 predicates into stem and suffix — 인정하다 → 인정/NNG
하/XSV, 투입되다 → 투입/NNG 되/XSV, 행복하다 → 행복/NNG 하/XSA, 깨끗하다 →
깨끗/XR 하/XSA — where the analyser of the UKnowBERT thesis gives one
predicate (동의하/VV, METHODS §2.2 rule 3). Both places that need the
predicate whole read it from here:

- `join_derived_predicates`: the multi-hot tokenizer's morphemes. A stem
  (noun or root, `STEM_TAGS`) directly followed, in the same eojeol, by 하
  or 되 tagged XSV/XSA becomes one morpheme `X하`/`X되` tagged VV (XSV) or
  VA (XSA), spanning both. Rule 3 then encodes it as `[X, 하##]`. Only 하/되
  are joined, as rule 3 names them: 오염/NNG 시키/XSV stays two morphemes,
  which encode better apart ([오염] [시키##]) than as syllables.
- `derived_stem`: the verb-relation targets (§2.5 item 3) on Kiwi's split
  morphemes. Every XSV/XSA after a stem — 하, 되, 시키, 스럽, … — is a
  predicate; its stem is part of it, not its argument.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from kjax.morph.tags import SUBSTANTIVE_TAGS, base_tag

DERIVED_TAG = {"XSV": "VV", "XSA": "VA"}     # the suffix's tag → the predicate's
JOINED_SUFFIXES = ("하", "되")                # METHODS §2.2 rule 3
STEM_TAGS = SUBSTANTIVE_TAGS | {"XR"}


def join_derived_predicates(morphemes: Sequence) -> list:
    """Kiwi's `Morpheme` list with every stem + 하/되 (XSV/XSA) joined into
    one VV/VA morpheme; everything else unchanged. Idempotent."""
    out: list = []
    for m in morphemes:
        prev = out[-1] if out else None
        tag = base_tag(m.tag)
        if (prev is not None and tag in DERIVED_TAG and m.form in JOINED_SUFFIXES
                and base_tag(prev.tag) in STEM_TAGS and prev.eojeol == m.eojeol
                and prev.end == m.start and prev.end > prev.start):
            out[-1] = dataclasses.replace(prev, form=prev.form + m.form, tag=DERIVED_TAG[tag],
                                          end=max(prev.end, m.end))
        else:
            out.append(m)
    return out


def derived_stem(tags: Sequence[str], p: int) -> int | None:
    """For a deriving suffix at position p (XSV/XSA), the position where its
    stem starts: the stem right before it, or a noun + noun-suffix (현대/NNG
    화/XSN 하/XSV → 현대). None when p is no suffix after a stem. `tags` are
    base tags."""
    if tags[p] not in DERIVED_TAG:
        return None
    i = p - 1
    while i >= 0 and tags[i] == "XSN":
        i -= 1
    return i if i >= 0 and tags[i] in STEM_TAGS else None
