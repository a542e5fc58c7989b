"""`kjax inspect "문장" --config C [--json]`: what the pipeline makes of one
text; `kjax inspect --file TEXTS --config C [--out OUT.jsonl]`: the same for
every line of a file (one text a line, one process, the tokenizer loaded once),
one JSON object a line. Both show Kiwi's morphemes (tag, char span, eojeol) and the configured
tokenizer's tokens with their per-token arrays (morph, inpos, tag, eojeol).

The output is a list of sections, each printed as a table (or a key of the
JSON object): morphemes, tokens, shaking (the pairs of B, over the input
mode's positions) and knowledge (multihot). Features add theirs to
`SECTIONS`, a list of functions

    section(text, config, tokenizer, encoded) -> {"name": str, "rows": [dict], "note": str?}

(or None when it does not apply), where `encoded` holds:

    text        the text as analysed: kjax/text/normalize.py, the normalisation
                prepare, fine-tuning and the exported tokenizer apply (offsets refer to it)
    morphemes   list[kjax.morph.Morpheme]
    tokens      token strings; ids, morph, inpos, tag, eojeol: the per-token arrays
    example     the text as a one-segment model input `[CLS] tokens [SEP]`, in the
                layout of prepared examples (input_ids, token_type_ids, word_ids,
                morph_ids, inpos, tags): position p is token p - 1
"""
from __future__ import annotations

import json

import numpy as np

from kjax.cli.common import format_table
from kjax.errors import KjaxError
from kjax.inputs import input_mode
from kjax.inputs.knowledge import KnowledgeTargets
from kjax.knowledge.targets import knowledge_targets
from kjax.morph.analyzer import KoreanAnalyzer
from kjax.morph.tags import TAGS, pos_class
from kjax.shake.matrix import pos_pairs, random_pairs, tag_weights
from kjax.tokens.sentencepiece import UNK, special_ids
from kjax.tokens.stats import piece_spans


def encode(text: str, config, tokenizer) -> dict:
    """The `encoded` dict the sections read (see the module docstring)."""
    analyzer = getattr(tokenizer, "analyzer", None) or KoreanAnalyzer()
    analysed = analyzer.prepare(text)
    morphemes = analyzer.analyze(analysed)
    if not hasattr(tokenizer, "encode_morphemes"):   # sentencepiece, imported: no morphemes
        arrays = tokenizer.encode(analysed)
    else:
        arrays = tokenizer.encode_morphemes(morphemes)
    n = len(arrays["ids"])
    around = lambda a, edge: np.concatenate([[edge], a, [edge]]).astype(np.int32)  # noqa: E731
    specials = special_ids(tokenizer)   # an imported vocabulary keeps its own ids
    example = {"input_ids": around(arrays["ids"], specials["cls"]), "token_type_ids": np.zeros(n + 2, np.int32),
               "word_ids": around(arrays["eojeol"], -1), "morph_ids": around(arrays["morph"], -1),
               "inpos": around(arrays["inpos"], 0), "tags": around(arrays["tag"], 0)}
    example["input_ids"][-1] = specials["sep"]
    return {"text": analysed, "morphemes": morphemes,
            "tokens": [tokenizer.id_to_token(i) for i in arrays["ids"]], **arrays,
            "example": example}


def _tokens_of_morphemes(tokenizer, encoded) -> list[list[int]]:
    """Token indices covering each morpheme: the `morph` array for the
    morpheme schemes; character overlap for plain sentencepiece."""
    morphemes = encoded["morphemes"]
    if tokenizer.scheme != "sentencepiece":
        return [np.flatnonzero(encoded["morph"] == k).tolist() for k in range(len(morphemes))]
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


# ---- shaking: the pairs of B (METHODS §1.3) under the configured variant ------------
# With shake.variant "none" the POS pairs are shown all the same (marked as what
# variant "pos" would use); the random variant draws with data.seed.

def model_positions(config, encoded) -> tuple[dict, list[str]]:
    """Per-position arrays and a label per position, as the input mode
    (kjax/inputs) makes positions: tokens, morphemes, merged units."""
    example = encoded["example"]
    mode = input_mode(config)
    positions, groups = mode.positions(example)
    tokens = ["[CLS]", *encoded["tokens"], "[SEP]"]
    if mode.positions_are_tokens:
        return positions, [tokens[group[0]] for group in groups]
    # Positions of several tokens: the forms of the morphemes they hold.
    morph = np.concatenate([[-1], encoded["morph"], [-1]])
    labels = []
    for group in groups:
        ks = list(dict.fromkeys(int(k) for k in morph[group]))
        labels.append(tokens[group[0]] if ks == [-1] else
                      "".join(encoded["morphemes"][k].form for k in ks if k >= 0))
    return positions, labels


def _describe(indices, labels) -> str:
    return " ".join(f"{labels[i]}@{i}" for i in indices)


def shaking_section(text, config, tokenizer, encoded) -> dict:
    positions, labels = model_positions(config, encoded)
    k = config.shake
    if k.variant == "random":
        maskable = np.asarray(positions["word_ids"]) >= 0
        pairs = random_pairs(maskable, k.p, np.random.default_rng(config.data.seed))
        note = f"variant random, p={k.p}: one draw (seed data.seed)"
    else:
        pairs = pos_pairs(positions["morph_ids"], positions["word_ids"], positions["tags"],
                          tag_weights(k))
        note = "variant pos" if k.variant == "pos" else \
            "shake.variant is 'none': the pairs variant 'pos' would use"
    tags = np.asarray(positions["tags"])
    rows = [{"query": _describe(q, labels), "query tag": TAGS[int(tags[q[0]])] or "-",
             "key": _describe(keys, labels), "weight": float(w)}
            for q, keys, w in pairs]
    return {"name": "shaking", "rows": rows,
            "note": f"{note}; B[query, key] = weight, positions are model.input_mode="
                    f"{config.model.input_mode!r}'s (label@position)"}


# ---- knowledge (multihot scheme): the targets the loader would build (§2.5) --------
# Nothing is masked or sampled away here: every qualifying noun is listed.

def knowledge_section(text, config, tokenizer, encoded) -> dict | None:
    if tokenizer.scheme != "multihot":
        return None  # the knowledge objectives work on morpheme positions only
    try:
        builder = KnowledgeTargets(config, tokenizer)
    except KjaxError as e:
        return {"name": "knowledge", "rows": [], "note": f"resources not loadable: {e}"}
    example = encoded["example"]
    forms, tags = builder.morphemes(np.asarray(example["input_ids"]), example)
    n = len(forms)
    targets = knowledge_targets(forms, tags, builder.kb, tokenizer.token_to_id,
                                np.random.default_rng(0), n, max_hypernym=n, max_sense=n,
                                max_hypernyms_per_noun=config.knowledge.max_hypernyms_per_noun,
                                unk_id=UNK)
    hyp = {int(p): [tokenizer.id_to_token(int(t)) for t, ok in zip(ids, mask) if ok]
           for p, ids, mask, used in zip(targets["hyp_positions"], targets["hyp_targets"],
                                         targets["hyp_target_mask"], targets["hyp_mask"]) if used}
    sense = {int(p) for p, used in zip(targets["sense_positions"], targets["sense_mask"]) if used}
    verb = targets["verb_targets"]
    rows = []
    for p in range(n):
        if p in hyp or p in sense or verb[p] >= 0:
            rows.append({"#": p, "form": forms[p], "tag": tags[p],
                         "hypernyms": " ".join(hyp.get(p, [])) or "-",
                         "sense": "yes" if p in sense else "-",
                         "verb →": f"{forms[verb[p]]}@{verb[p]}" if verb[p] >= 0 else "-"})
    return {"name": "knowledge", "rows": rows,
            "note": f"resources: {builder.kb.describe()}; positions are morphemes "
                    f"([CLS] = 0)"}


SECTIONS = [morpheme_section, token_section, shaking_section, knowledge_section]


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
    p.add_argument("text", nargs="?", default=None,
                   help='the text, e.g. "나는 너를 학교에서 보았다" (or --file)')
    p.add_argument("--file", default=None, metavar="TEXTS", help="inspect every line of this "
                   "UTF-8 file (one text a line; blank lines skipped) and write JSON Lines")
    p.add_argument("--out", default=None, metavar="OUT.jsonl", help="with --file: where the "
                   "JSON Lines go (default: stdout)")
    add_config(p, required=False)
    p.add_argument("--workdir", default=None, help="a training run: use the config it "
                   "recorded (WORKDIR/kjax_config.py) when --config is not given")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(handler=_run)


def _run(args, config) -> int:
    if (args.text is None) == (args.file is None):
        raise KjaxError("kjax inspect: give a text or --file TEXTS (one text a line), not "
                        "both or neither")
    if args.file is not None:
        return _run_file(args, config)
    if args.out is not None:
        raise KjaxError("kjax inspect: --out goes with --file (one text: --json prints JSON)")
    result = inspect_text(args.text, config)
    print(json.dumps(result, ensure_ascii=False, indent=2) if args.json
          else format_inspection(result))
    return 0


def read_lines(path: str) -> list[tuple[int, str]]:
    """(line number, text) of the non-blank lines of a UTF-8 file."""
    from kjax import paths
    if not paths.isfile(path):
        raise KjaxError(f"--file {path!r} not found; pass a UTF-8 file with one text a line")
    try:
        text = paths.read_text(path)
    except UnicodeDecodeError as e:
        raise KjaxError(f"--file {path}: not UTF-8 ({e.reason} at byte {e.start}); "
                        f"save it as UTF-8") from None
    return [(n, line.rstrip("\r")) for n, line in enumerate(text.split("\n"), 1)
            if line.strip()]


def _run_file(args, config) -> int:
    """Batch mode: one JSON object a line ({"line": N, ...inspect_text}),
    in file order; the tokenizer and Kiwi are loaded once."""
    import contextlib
    import sys

    from kjax import paths
    from kjax.progress import Progress
    from kjax.tokens.factory import open_tokenizer
    lines = read_lines(args.file)
    tokenizer = open_tokenizer(config)
    with contextlib.ExitStack() as stack:
        out = sys.stdout if args.out is None else \
            stack.enter_context(paths.open_file(args.out, "w", encoding="utf-8"))
        with Progress("inspect", total=len(lines), unit="text",
                      enabled=args.out is not None) as bar:
            for n, text in lines:
                out.write(json.dumps({"line": n, **inspect_text(text, config, tokenizer)},
                                     ensure_ascii=False) + "\n")
                bar.update()
    if args.out is not None:
        print(f"inspected {len(lines)} texts of {args.file} → {args.out}")
    return 0
