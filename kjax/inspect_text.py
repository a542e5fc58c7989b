"""`kjax inspect "문장" --config C [--json]`: what the pipeline makes of one
text — Kiwi's morphemes (tag, char span, eojeol) and the configured
tokenizer's tokens with their per-token arrays (morph, inpos, tag, eojeol).

The output is a list of sections, each printed as a table (or a key of the
JSON object). Features add theirs by appending to `SECTIONS` a function

    section(text, config, tokenizer, encoded) -> {"name": str, "rows": [dict], "note": str?}

(or None when it does not apply), where `encoded` holds:

    text        the text as analysed (NFC, odd whitespace → " "; offsets refer to it)
    morphemes   list[kjax.morph.Morpheme]
    tokens      token strings; ids, morph, inpos, tag, eojeol: the per-token arrays
    example     the text as a one-segment model input `[CLS] tokens [SEP]`, in the
                layout of prepared examples (input_ids, token_type_ids, word_ids,
                morph_ids, inpos, tags): position p is token p - 1
"""
from __future__ import annotations

import json
import unicodedata

import numpy as np

from kjax.morph.analyzer import KoreanAnalyzer
from kjax.morph.tags import TAGS, pos_class
from kjax.tokens.sentencepiece import CLS, SEP


def _width(text: str) -> int:
    """Terminal columns: Hangul and Hanja take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def format_table(columns: list[str], rows: list[list]) -> str:
    """A Markdown table, padded so that Korean text lines up in a terminal."""
    cells = [[str(c) for c in columns]] + [[str(v) for v in row] for row in rows]
    widths = [max(_width(r[i]) for r in cells) for i in range(len(columns))]
    line = lambda r: "| " + " | ".join(v + " " * (w - _width(v))  # noqa: E731
                                       for v, w in zip(r, widths)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), rule, *map(line, cells[1:])])


def encode(text: str, config, tokenizer) -> dict:
    """The `encoded` dict the sections read (see the module docstring)."""
    analyzer = getattr(tokenizer, "analyzer", None) or KoreanAnalyzer()
    analysed = analyzer.prepare(text)
    morphemes = analyzer.analyze(analysed)
    if tokenizer.scheme == "sentencepiece":
        arrays = tokenizer.encode(analysed)
    else:
        arrays = tokenizer.encode_morphemes(morphemes)
    n = len(arrays["ids"])
    around = lambda a, edge: np.concatenate([[edge], a, [edge]]).astype(np.int32)  # noqa: E731
    example = {"input_ids": around(arrays["ids"], CLS), "token_type_ids": np.zeros(n + 2, np.int32),
               "word_ids": around(arrays["eojeol"], -1), "morph_ids": around(arrays["morph"], -1),
               "inpos": around(arrays["inpos"], 0), "tags": around(arrays["tag"], 0)}
    example["input_ids"][-1] = SEP
    return {"text": analysed, "morphemes": morphemes,
            "tokens": [tokenizer.id_to_token(i) for i in arrays["ids"]], **arrays,
            "example": example}


def _tokens_of_morphemes(tokenizer, encoded) -> list[list[int]]:
    """Token indices covering each morpheme: the `morph` array for the
    morpheme schemes; character overlap for plain sentencepiece."""
    morphemes = encoded["morphemes"]
    if tokenizer.scheme != "sentencepiece":
        return [np.flatnonzero(encoded["morph"] == k).tolist() for k in range(len(morphemes))]
    from kjax.tokens.stats import piece_spans
    pieces = tokenizer.sp.encode(encoded["text"], return_type="proto").pieces
    begin, end = piece_spans(encoded["text"], pieces)
    return [np.flatnonzero((begin < m.end) & (m.start < end)).tolist() for m in morphemes]


def morpheme_section(text, config, tokenizer, encoded) -> dict:
    covering = _tokens_of_morphemes(tokenizer, encoded)
    rows = [{"#": k, "form": m.form, "tag": m.tag, "class": pos_class(m.tag),
             "span": f"{m.start}:{m.end}", "surface": encoded["text"][m.start:m.end],
             "eojeol": m.eojeol, "tokens": ",".join(map(str, covering[k]))}
            for k, m in enumerate(encoded["morphemes"])]
    note = None
    if tokenizer.scheme == "sentencepiece":
        note = "tokens: pieces overlapping the morpheme's characters (sentencepiece ignores morphemes)"
    return {"name": "morphemes", "rows": rows, "note": note}


def token_section(text, config, tokenizer, encoded) -> dict:
    rows = [{"#": i, "token": tok, "id": int(encoded["ids"][i]), "morph": int(encoded["morph"][i]),
             "inpos": int(encoded["inpos"][i]), "tag": TAGS[int(encoded["tag"][i])] or "-",
             "eojeol": int(encoded["eojeol"][i])}
            for i, tok in enumerate(encoded["tokens"])]
    note = None
    if tokenizer.scheme == "sentencepiece":
        note = "morph = eojeol and no tags: plain sentencepiece has no morphemes"
    return {"name": "tokens", "rows": rows, "note": note}


def _feature_sections():
    from kjax.knowledge.inspect import knowledge_section
    from kjax.shake.inspect import shaking_section
    return [shaking_section, knowledge_section]


SECTIONS = [morpheme_section, token_section, *_feature_sections()]


def inspect_text(text: str, config, tokenizer=None) -> dict:
    """All sections for one text, as a JSON-ready dict (sections by name)."""
    from kjax.tokens.factory import open_tokenizer, tokenizer_file
    tokenizer = tokenizer or open_tokenizer(config)
    encoded = encode(text, config, tokenizer)
    out = {"text": text, "analysed_text": encoded["text"], "scheme": tokenizer.scheme,
           "tokenizer": tokenizer_file(config), "sections": []}
    for section in SECTIONS:
        result = section(text, config, tokenizer, encoded)
        if result is not None:
            out["sections"].append(result["name"])
            out[result["name"]] = result["rows"]
            if result.get("note"):
                out[result["name"] + "_note"] = result["note"]
    return out


def format_inspection(result: dict) -> str:
    parts = [f"{result['scheme']} tokenizer {result['tokenizer']}: {result['analysed_text']!r}"]
    for name in result["sections"]:
        rows = result[name]
        parts.append(f"\n{name} ({len(rows)})")
        if result.get(name + "_note"):
            parts.append(f"  {result[name + '_note']}")
        columns = list(rows[0]) if rows else ["(none)"]
        parts.append(format_table(columns, [[r[c] for c in columns] for r in rows]))
    return "\n".join(parts)


def register(verbs, add_config) -> None:
    p = verbs.add_parser("inspect", help="morphemes, tokens and per-token arrays of one text "
                         "under the configured tokenizer, its shaking pairs and (multihot) "
                         "knowledge targets")
    p.add_argument("text", help='the text, e.g. "나는 너를 학교에서 보았다"')
    add_config(p, required=False)
    p.add_argument("--workdir", default=None, help="a training run: use the config it "
                   "recorded (WORKDIR/kjax_config.py) when --config is not given")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(handler=_run)


def _run(args, config) -> int:
    result = inspect_text(args.text, config)
    print(json.dumps(result, ensure_ascii=False, indent=2) if args.json
          else format_inspection(result))
    return 0
