"""Which characters of the input each model token covers.

NER needs it to move character tags onto tokens and back; POS shaking with a
tokenizer that knows no POS (plain sentencepiece) needs it to line tokens up
with Kiwi's morphemes (METHODS §1.3: "positions are written only where a
model token lines up with an analysed morpheme").

    sentencepiece        sentencepiece's own byte offsets (exact, whatever the
                         whitespace, unknown characters or emoji)
    morph-sp, multihot   Kiwi's morpheme spans; a morpheme's tokens split its
                         span when their surfaces spell it, else the first
                         token takes the span and the rest get an empty one
                         (lemmas: 했 → 하 + 었 share one character)
    anything else        greedy search of each token's surface from a cursor

Spans are [start, end) offsets in the text as given; an empty span
(start == end) covers nothing.
"""
from __future__ import annotations

import bisect
import unicodedata

import numpy as np

from kjax.tokens.sentencepiece import WORD_START

def nfc_with_offsets(text: str) -> tuple[str, list[int], list[int]]:
    """(NFC of `text`, start and end in `text` of each NFC character).

    KLUE tags the characters as given, but the vocabulary knows composed
    syllables: NFD jamo (ᄒ ᅡ ᆫ) must reach the tokenizer as 한, and its spans
    must come back to the three source characters. A span [s, e) of the NFC
    text covers [starts[s], ends[e - 1]) of `text`; starts has one extra entry
    (len(text)) for empty spans at the end."""
    if unicodedata.is_normalized("NFC", text):
        return text, list(range(len(text) + 1)), list(range(1, len(text) + 1))
    out, starts, ends, i = [], [], [], 0
    while i < len(text):
        j = i + 1   # grow the cluster while it composes into one character
        while j < len(text) and len(unicodedata.normalize("NFC", text[i:j + 1])) == 1:
            j += 1
        piece = unicodedata.normalize("NFC", text[i:j])
        out.append(piece)
        starts += [i] * len(piece)
        ends += [j] * len(piece)
        i = j
    return "".join(out), starts + [len(text)], ends


def map_spans(spans, starts: list[int], ends: list[int]) -> list[tuple[int, int]]:
    """Spans of nfc_with_offsets' NFC text → spans of the source text."""
    return [(starts[s], ends[e - 1]) if e > s else (starts[s], starts[s]) for s, e in spans]


def token_char_spans(tokenizer, text: str) -> tuple[dict[str, np.ndarray], list[tuple[int, int]]]:
    """(the tokenizer's per-token arrays for `text`, one char span per token)."""
    scheme = getattr(tokenizer, "scheme", "")
    if hasattr(tokenizer, "encode_with_spans"):   # offsets from the tokenizer (imported)
        return tokenizer.encode_with_spans(text)
    if scheme == "sentencepiece" and hasattr(tokenizer, "sp"):
        return _sentencepiece_spans(tokenizer, text)
    if hasattr(tokenizer, "analyzer") and hasattr(tokenizer, "encode_morphemes"):
        return _morpheme_spans(tokenizer, text)
    encoded = tokenizer.encode(text)
    return encoded, greedy_spans(text, [surface(tokenizer.id_to_token(i))
                                        for i in encoded["ids"]])


def surface(token: str) -> str:
    """The text a vocabulary token spells: ▁, ## and @ marks removed."""
    token = token.replace(WORD_START, "")
    if len(token) > 2 and token.startswith("##"):
        return token[2:]
    if len(token) > 2 and token.endswith("##"):
        return token[:-2]
    if len(token) == 2 and token[0] == "@":
        return token[1]
    return token


def trim(text: str, span: tuple[int, int]) -> tuple[int, int]:
    """The span without leading/trailing whitespace (▁ pieces cover a space)."""
    start, end = span
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _sentencepiece_spans(tokenizer, text: str):
    proto = tokenizer.sp.encode(text, return_type="proto")
    byte_starts = np.cumsum([0] + [len(c.encode("utf-8")) for c in text])
    to_char = lambda b: bisect.bisect_left(byte_starts, b)  # noqa: E731
    spans = [(to_char(p.begin), to_char(p.end)) for p in proto.pieces]
    encoded = tokenizer.encode(text)
    if [p.id for p in proto.pieces] != [int(i) for i in encoded["ids"]]:
        # Not expected (encode() runs the same model); never trust misaligned spans.
        return encoded, greedy_spans(text, [surface(tokenizer.id_to_token(i))
                                            for i in encoded["ids"]])
    return encoded, spans


def _morpheme_spans(tokenizer, text: str):
    morphemes = tokenizer.analyzer.analyze(text)
    encoded = tokenizer.encode_morphemes(morphemes)
    spans: list[tuple[int, int]] = []
    ids, morph = encoded["ids"], encoded["morph"]
    i = 0
    while i < len(ids):
        k = int(morph[i])
        j = i
        while j < len(ids) and morph[j] == k:
            j += 1
        m = morphemes[k]
        pieces = [surface(tokenizer.id_to_token(t)) for t in ids[i:j]]
        if "".join(pieces) == text[m.start:m.end]:
            start = m.start
            for p in pieces:
                spans.append((start, start + len(p)))
                start += len(p)
        else:
            spans += [(m.start, m.end)] + [(m.end, m.end)] * (j - i - 1)
        i = j
    return encoded, spans


def greedy_spans(text: str, pieces: list[str], window: int = 32) -> list[tuple[int, int]]:
    """Find each piece at or shortly after a cursor; a piece not found (an
    [UNK], a rewritten form) gets an empty span at the cursor."""
    spans, cursor = [], 0
    for p in pieces:
        found = text.find(p, cursor, cursor + window + len(p)) if p else -1
        if found < 0:
            spans.append((cursor, cursor))
            continue
        spans.append((found, found + len(p)))
        cursor = found + len(p)
    return spans


def align_morphemes(text: str, spans: list[tuple[int, int]], morphemes,
                    tag_id) -> tuple[np.ndarray, np.ndarray]:
    """Morpheme id and POS tag id per token, where tokens line up with a
    morpheme: the (whitespace-trimmed) tokens inside its span tile exactly its
    characters. Other tokens get morpheme -1 and tag 0 (no POS)."""
    morph_ids = np.full(len(spans), -1, np.int32)
    tags = np.zeros(len(spans), np.int32)
    trimmed = [trim(text, s) for s in spans]
    lo = 0
    for k, m in enumerate(morphemes):       # both in text order: one sweep
        if m.end <= m.start:
            continue
        while lo < len(trimmed) and trimmed[lo][1] <= m.start:
            lo += 1
        inside, t = [], lo
        while t < len(trimmed) and trimmed[t][0] < m.end:
            if trimmed[t][1] > trimmed[t][0]:
                inside.append(t)
            t += 1
        pieces = [trimmed[t] for t in inside]
        if pieces and pieces[0][0] == m.start and pieces[-1][1] == m.end and all(
                a[1] == b[0] for a, b in zip(pieces, pieces[1:])):
            morph_ids[inside] = k
            tags[inside] = tag_id(m.tag)
    return morph_ids, tags
