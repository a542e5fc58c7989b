"""The one text normalisation of kjax: every text a model reads goes through
`normalize_text` first — the corpus reader (tokenizer training, prepare),
every tokenizer's encode (inspect, fine-tuning), Kiwi's analysis, and the
exported `tokenizer.json` (`odd_whitespace()`, as a tokenizers Replace).

    NFC; every whitespace or control character other than " " (tab, CR, LF,
    U+3000 ideographic space, U+00A0, U+2028, ...) → " "; lone surrogates →
    U+FFFD.

Both replacements are one for one, so offsets into the NFC text hold (NER
spans, Kiwi's morpheme spans). Full-width letters (ＡＢＣ) are kept: NFKC would
change the characters a user wrote, and the vocabulary learns them.
"""
from __future__ import annotations

import functools
import sys
import unicodedata


def _odd(c: str) -> bool:
    return c != " " and (c.isspace() or unicodedata.category(c) == "Cc")


@functools.cache
def odd_whitespace() -> str:
    """Every character that becomes " " (fixed by Unicode; a regex class for
    exporters). Built on first use: the scan of every code point takes a
    third of a second, which every `kjax` process would otherwise pay at import."""
    return "".join(chr(i) for i in range(sys.maxunicode + 1)
                   if not 0xD800 <= i <= 0xDFFF and _odd(chr(i)))


def normalize_text(text: str) -> tuple[str, int]:
    """The normalised text and how many characters were replaced (ordinary
    tab/CR/LF are not counted: they are not news)."""
    text = unicodedata.normalize("NFC", text)
    if text.isprintable():  # fast path: no control, surrogate or odd space
        return text, 0
    out, replaced = [], 0
    for c in text:
        if c == " ":
            out.append(c)
        elif c.isspace() or unicodedata.category(c) == "Cc":
            out.append(" ")
            replaced += c not in "\t\n\r"
        elif unicodedata.category(c) == "Cs":
            out.append("\ufffd")
            replaced += 1
        else:
            out.append(c)
    return "".join(out), replaced


def normalize(text: str) -> str:
    """`normalize_text` without the count."""
    return normalize_text(text)[0]
