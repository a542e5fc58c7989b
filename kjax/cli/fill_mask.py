"""`kjax fill-mask`: what a pretraining checkpoint puts in place of [MASK],
without exporting it (kjax/analysis/fill_mask.py says how texts are encoded
and how answers read; fill_mask_morphemes.py for multi-hot (UKnowBERT) runs,
whose [MASK] is one morpheme and whose answers are morphemes).

    kjax fill-mask --workdir runs/demo "오늘 날씨[MASK] 정말 좋네요." [--top-k 5]
    kjax fill-mask --workdir runs/demo --file TEXTS [--json]
    kjax fill-mask --workdir runs/demo --check [SET.tsv]   (hit rates on a check set)
"""
from __future__ import annotations

import json

from kjax.cli.common import add_weights, format_table
from kjax.errors import KjaxError


def register(verbs, add_config) -> None:
    p = verbs.add_parser("fill-mask", help="the top-k answers of a pretraining checkpoint for "
                         "each [MASK] of a text, as readable text (no export needed); "
                         "multi-hot runs: a [MASK] is one morpheme, answers are morphemes")
    p.add_argument("text", nargs="?", default=None,
                   help='a text with [MASK], e.g. "오늘 날씨[MASK] 정말 좋네요." (or --file)')
    p.add_argument("--file", default=None, metavar="TEXTS",
                   help="every line of this UTF-8 file (one text with [MASK] a line)")
    p.add_argument("--check", nargs="?", const="", default=None, metavar="SET.tsv",
                   help="hit rates on a check set (lines: sentence with one [MASK], a tab, "
                   "accepted answers separated by |); default the shipped everyday sentences")
    add_config(p, required=False)
    p.add_argument("--workdir", required=True, help="the training run (its checkpoints/ and "
                   "recorded config)")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default latest)")
    add_weights(p)
    p.add_argument("--top-k", type=int, default=5, help="answers per [MASK] (default 5)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(handler=run, before_load=check_args)


def check_args(args) -> None:
    """What needs no config is checked first (before the run's config is read)."""
    from kjax.analysis.fill_mask import MASK_TEXT, encode_masked
    given = [x is not None for x in (args.text, args.file, args.check)]
    if sum(given) != 1:
        raise KjaxError("kjax fill-mask: give one of a text, --file TEXTS or --check [SET.tsv]")
    if args.top_k < 1:
        raise KjaxError(f"--top-k {args.top_k}: give 1 or more")
    if args.text is not None and MASK_TEXT not in args.text:
        encode_masked(None, args.text, 0)   # its error names the text


def run(args, config) -> int:
    from kjax.analysis.fill_mask import read_check_set, run_check
    from kjax.analysis.fill_mask_morphemes import open_filler
    if args.check is not None:
        rows = read_check_set(args.check or None)
        result = run_check(open_filler(config, args.workdir, args.step, args.weights), rows,
                           args.top_k)
        print(json.dumps(result, ensure_ascii=False, indent=2) if args.json
              else format_check(result))
        return 0
    texts = [args.text] if args.text is not None else [t for _, t in _read_texts(args.file)]
    filler = open_filler(config, args.workdir, args.step, args.weights)
    from kjax.progress import Progress
    with Progress("fill-mask", total=len(texts), unit="text", enabled=len(texts) > 16) as bar:
        answers = filler.predict(texts, args.top_k, progress=bar)
    if args.json:
        for text, per_mask in zip(texts, answers):
            print(json.dumps({"text": text, "step": filler.step, "masks": [
                [vars(a) for a in found] for found in per_mask]}, ensure_ascii=False))
    else:
        print("\n\n".join(format_answers(text, per_mask) for text, per_mask in
                          zip(texts, answers)))
        print(f"\n(step {filler.step}; {getattr(filler, 'note', NOTE)})")
    return 0


NOTE = ("'␣ (word boundary)' is sentencepiece's bare word-start piece ▁: the model expects "
        "a new word to begin there but not which; 'starts a word' answers are shown with a "
        "space before them in the filled text")


def _read_texts(path: str) -> list[tuple[int, str]]:
    from kjax.analysis.fill_mask import MASK_TEXT
    from kjax.cli.inspect import read_lines
    lines = read_lines(path)
    if not lines:
        raise KjaxError(f"--file {path}: no texts (one text with [MASK] a line)")
    for n, text in lines:
        if MASK_TEXT not in text:
            raise KjaxError(f"--file {path}:{n}: no [MASK] in {text[:60]!r}; every line needs "
                            f"one or more")
    return lines


def format_answers(text: str, per_mask) -> str:
    from kjax.analysis.fill_mask import shown
    parts = [text]
    for j, found in enumerate(per_mask):
        if len(per_mask) > 1:
            parts.append(f"[MASK] {j + 1} of {len(per_mask)}")
        parts.append(format_table(["#", "answer", "word", "p", "filled in"], [
            [k + 1, shown(a), "starts a word" if a.starts_word else "continues", f"{a.probability:.3f}",
             a.filled] for k, a in enumerate(found)]))
    return "\n".join(parts)


def format_check(result: dict) -> str:
    k = result["top_k"]
    rows = [[r["sentence"], "|".join(r["accepted"]), r["answers"][0]["text"] or "␣",
             r["hit_rank"] or "-"] for r in result["rows"]]
    table = format_table(["sentence", "accepted", "top-1", f"hit rank (≤{k})"], rows)
    return (f"{table}\n\nstep {result['step']}: top-1 {result['top1']:.0%}, top-{k} "
            f"{result['topk']:.0%} of {result['sentences']} sentences")
