"""Character classes of the multi-hot vocabulary (METHODS §2.1) and the
fallbacks that keep a morpheme out of [UNK] when a character is not a
vocabulary token.

    class       characters                               token(s)
    digit       0-9, other decimal digits (folded)       `7`, or `7##` inside a number
    latin       a-z A-Z, accented / full-width (folded)  `a`
    hanja       CJK ideographs                           `[CHC]` (one per run)
    other       letters of other scripts (Cyrillic, kana) `[OTL]` (one per run)
    hangul      syllables, conjoining / compatibility jamo `@가`; unseen → its jamo `@ᄀ @ᅡ`
    symbol      punctuation, symbols, emoji, other numbers `@★`; unseen → `[SYM:So]` (one per run)
    ignorable   zero-width joiners, variation selectors,  nothing (they only shape the
                other format characters (Cf)              glyph of their neighbour)
    space       whitespace                               nothing

Decisions (the thesis's rule is "a morpheme with an unknown syllable →
[UNK]", which on a corpus smaller than its 16 GB leaves unseen text full of
[UNK]; docs/EXPERIMENTS.md, "Method fidelity on held-out text"):
- Jamo fallback. The 67 conjoining jamo (19 initial, 21 medial, 27 final)
  are always in the vocabulary, so any modern Hangul syllable or jamo the
  `@` inventory lacks is spelled by its jamo (Unicode NFKD), e.g. 뷁 →
  `@ᄇ @ᅰ @ᆰ`. Archaic jamo outside those 67 stay [UNK].
- Symbol fallback. A symbol outside the inventory becomes the token of its
  Unicode general category: `[SYM:Sm]` math, `[SYM:Sc]` currency, `[SYM:Sk]`
  modifier (skin tones), `[SYM:So]` other symbols (most emoji), `[SYM:Pc]`
  … `[SYM:Po]` the seven punctuation classes (brackets open/close keep their
  side), `[SYM:No]`/`[SYM:Nl]` other numbers (½, Ⅻ), `[SYM:M]` marks,
  `[SYM:C]` private-use/unassigned. Frequent symbols and emoji still get
  their own `@c` token from the training text; the class token says what
  kind of sign an unseen one is. A run of one class is one token, like
  [CHC]/[OTL].
"""
from __future__ import annotations

import functools
import unicodedata

CHC, OTL = "[CHC]", "[OTL]"
SYLLABLE = "@"       # syllable-token prefix (§2.1)
JAMO = "".join(map(chr, [*range(0x1100, 0x1113), *range(0x1161, 0x1176),
                         *range(0x11A8, 0x11C3)]))
JAMO_TOKENS = tuple(SYLLABLE + j for j in JAMO)
SYMBOL_CLASSES = ("Sm", "Sc", "Sk", "So", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po",
                  "No", "Nl", "M", "C")
SYMBOL_TOKENS = tuple(f"[SYM:{c}]" for c in SYMBOL_CLASSES)
_VARIATION_SELECTORS = ((0xFE00, 0xFE0F), (0xE0100, 0xE01EF))


def is_hangul(c: str) -> bool:
    o = ord(c)
    return (0xAC00 <= o <= 0xD7A3 or 0x1100 <= o <= 0x11FF or 0x3130 <= o <= 0x318F
            or 0xA960 <= o <= 0xA97F or 0xD7B0 <= o <= 0xD7FF)


def is_hanja(c: str) -> bool:
    o = ord(c)
    return (0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF
            or 0x20000 <= o <= 0x3134F)


@functools.lru_cache(maxsize=1 << 16)
def fold(c: str) -> str:
    """Other decimal digits → ASCII digit; full-width/accented Latin → ASCII."""
    if c.isascii():
        return c
    cat = unicodedata.category(c)
    if cat == "Nd":
        return str(unicodedata.decimal(c))
    if cat[0] == "L":
        base = unicodedata.normalize("NFKD", c)[:1]
        if base.isascii() and base.isalpha():
            return base
    return c


@functools.lru_cache(maxsize=1 << 16)
def char_class(c: str) -> str:
    """One of: digit latin hanja other hangul symbol ignorable space (module doc)."""
    f = fold(c)
    if f.isascii() and f.isdigit():
        return "digit"
    if f.isascii() and f.isalpha():
        return "latin"
    if is_hanja(c):
        return "hanja"
    if c.isspace():
        return "space"
    if is_hangul(c):
        return "hangul"
    cat = unicodedata.category(c)
    if cat == "Cf" or any(lo <= ord(c) <= hi for lo, hi in _VARIATION_SELECTORS):
        return "ignorable"
    if cat[0] == "L":
        return "other"
    return "symbol"


def is_syllable_char(c: str) -> bool:
    """Characters that get `@c` tokens: Hangul and symbols (§2.1 "syllables")."""
    return char_class(c) in ("hangul", "symbol")


@functools.lru_cache(maxsize=1 << 16)
def jamo_of(c: str) -> str | None:
    """A Hangul syllable or jamo as conjoining jamo (NFKD), None if any of
    them is not one of the 67 modern jamo."""
    jamo = unicodedata.normalize("NFKD", c)
    return jamo if all(j in JAMO for j in jamo) else None


def symbol_token(c: str) -> str:
    """The `[SYM:…]` fallback token of a symbol character."""
    cat = unicodedata.category(c)
    if cat[0] in "SPN":
        return f"[SYM:{cat}]" if cat in SYMBOL_CLASSES else "[SYM:So]"
    return "[SYM:M]" if cat[0] == "M" else "[SYM:C]"
