"""BIO tags between KLUE's characters and the model's tokens, and back.

KLUE-NER labels every *character* (spaces included: a space inside an entity
is I-X). The model labels *tokens*, whose character spans come from
`alignment.token_char_spans` (a span may be empty, and Kiwi's contracted
morphemes make two tokens share a character). The mapping:

- char → token: a token is B-X if it holds the first non-space character
  (the "head") of an entity X not yet claimed by an earlier token; else I-X if
  its first non-space character lies inside X; else O. A token without
  non-space characters continues the previous token (I-X after B-X/I-X, else O).
- token → char: B-X marks its first unwritten non-space character B-X and the
  rest I-X; I-X and O write all of theirs. Earlier tokens win shared
  characters. Characters no token wrote (spaces, truncated text) become I-X
  only when they sit between two characters of the same entity, else O.

Entity boundaries that fall on token boundaries survive the round trip
exactly; one that cuts a token is widened to the token. Scoring
`round_trip` output against the gold tags gives the ceiling a tokenizer
imposes on NER.
"""
from __future__ import annotations

from typing import Sequence

Span = tuple[int, int, str]   # [start, end) character offsets and the entity type
OUTSIDE = "O"


def split_tag(tag: str) -> tuple[str, str]:
    """"B-PS" → ("B", "PS"); "O" → ("O", "")."""
    if tag == OUTSIDE or len(tag) < 3 or tag[1] != "-" or tag[0] not in "BI":
        return OUTSIDE, ""
    return tag[0], tag[2:]


def tags_to_spans(tags: Sequence[str], strict: bool = True) -> list[Span]:
    """Entities of one BIO sequence. strict (IOB2, as KLUE's seqeval scoring):
    an entity starts only at B-X and I-X without a matching open entity is
    dropped; lenient: such an I-X opens a new entity."""
    spans, start, kind = [], None, ""
    for i, tag in enumerate([*tags, OUTSIDE]):
        prefix, t = split_tag(tag)
        if start is not None and (prefix != "I" or t != kind):
            spans.append((start, i, kind))
            start = None
        if prefix == "B" or (prefix == "I" and start is None and not strict):
            start, kind = i, t
    return spans


def spans_to_tags(length: int, spans: Sequence[Span]) -> list[str]:
    tags = [OUTSIDE] * length
    for start, end, kind in spans:
        for i in range(start, end):
            tags[i] = ("B-" if i == start else "I-") + kind
    return tags


def _content(text: str, start: int, end: int) -> list[int]:
    return [c for c in range(start, min(end, len(text))) if not text[c].isspace()]


def char_to_token_tags(text: str, spans: Sequence[Span],
                       token_spans: Sequence[tuple[int, int]]) -> list[str]:
    owner = [-1] * len(text)
    heads = {}
    for k, (start, end, _) in enumerate(spans):
        content = _content(text, start, end)
        for c in range(start, end):
            owner[c] = k
        if content:
            heads[content[0]] = k
    claimed, out = set(), []
    for start, end in token_spans:
        chars = _content(text, start, end)
        if not chars:
            prev = split_tag(out[-1]) if out else (OUTSIDE, "")
            out.append(f"I-{prev[1]}" if prev[0] != OUTSIDE else OUTSIDE)
            continue
        fresh = [heads[c] for c in chars if c in heads and heads[c] not in claimed]
        if fresh:
            claimed.add(fresh[0])
            out.append("B-" + spans[fresh[0]][2])
        elif owner[chars[0]] >= 0:
            out.append("I-" + spans[owner[chars[0]]][2])
        else:
            out.append(OUTSIDE)
    return out


def token_to_char_tags(text: str, token_tags: Sequence[str],
                       token_spans: Sequence[tuple[int, int]]) -> list[str]:
    out: list[str | None] = [None] * len(text)
    for tag, (start, end) in zip(token_tags, token_spans):
        chars = [c for c in _content(text, start, end) if out[c] is None]
        prefix, kind = split_tag(tag)
        for j, c in enumerate(chars):
            if prefix == OUTSIDE:
                out[c] = OUTSIDE
            else:
                out[c] = ("B-" if prefix == "B" and j == 0 else "I-") + kind
    # Unwritten characters: inside an entity only when both neighbours say so.
    written = [c for c, t in enumerate(out) if t is not None]
    result, w = [], 0
    for c, tag in enumerate(out):
        if tag is not None:
            result.append(tag)
            w += 1
            continue
        prev_tag = out[written[w - 1]] if w > 0 else OUTSIDE
        next_tag = out[written[w]] if w < len(written) else OUTSIDE
        p, n = split_tag(prev_tag), split_tag(next_tag)
        inside = p[0] != OUTSIDE and n[0] == "I" and p[1] == n[1]
        result.append("I-" + p[1] if inside else OUTSIDE)
    return result


def round_trip(text: str, char_tags: Sequence[str],
               token_spans: Sequence[tuple[int, int]]) -> list[str]:
    """char tags → token tags → char tags: what a perfect tagger could return."""
    token_tags = char_to_token_tags(text, tags_to_spans(char_tags), token_spans)
    return token_to_char_tags(text, token_tags, token_spans)
