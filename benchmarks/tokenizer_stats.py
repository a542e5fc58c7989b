"""[UNK] rate and morpheme splits of `morph-sp` and `multihot` against plain
`sentencepiece` of equal vocabulary size, on KLUE dev text — the analogue of
METHODS §2.2's reported figures (BPE [UNK] 0.85 % vs multi-hot 0.0008 %;
21.23 % of morphemes as token sets; 2.85–9.49 % of morphemes split by BPE).

All three are trained on the KLUE NLI + STS sentences and measured on that
text and on the KLUE NER sentences (news and wiki text they did not see).
multihot is built first from a BPE of --bpe pieces; its final vocabulary
size (rewritten BPE + syllable/digit/letter tokens, §2.1) is the size given
to the other two. Syllables need --min-syllable occurrences (the thesis used
50 on 16 GB of text; this corpus is 0.3 MB). Appends a dated table to
docs/EXPERIMENTS.md (--no-record skips that).

    python benchmarks/tokenizer_stats.py [--bpe 8000] [--min-syllable 5]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from klue_text import klue_sentences  # noqa: E402

from kjax.morph import KoreanAnalyzer  # noqa: E402
from kjax.tokens.morph_sp import MorphSPTokenizer  # noqa: E402
from kjax.tokens.multihot import MultihotTokenizer  # noqa: E402
from kjax.tokens.sentencepiece import SentencePieceTokenizer, train_sentencepiece  # noqa: E402
from kjax.tokens.stats import measure  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = """# Experiments

Results of scripts in `benchmarks/` that measure what the methods produce
(not speed: see PERFORMANCE.md). Each section names the script, the date and
the data.
"""


def train_all(train_text: list[str], tmp: str, bpe: int, min_syllable: int):
    analyzer = KoreanAnalyzer()
    multihot = MultihotTokenizer.train(train_text, f"{tmp}/mh.txt", bpe,
                                       min_syllable_count=min_syllable, analyzer=analyzer)
    size = multihot.vocab_size
    train_sentencepiece(train_text, f"{tmp}/sp", size, "unigram")
    morph_sp = MorphSPTokenizer.train(train_text, size, f"{tmp}/msp", "unigram",
                                      analyzer=analyzer)
    return [SentencePieceTokenizer(f"{tmp}/sp.model"), morph_sp, multihot], size


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bpe", type=int, default=8000, help="multihot's BPE size before rewriting")
    ap.add_argument("--min-syllable", type=int, default=5)
    ap.add_argument("--json", default=None, help="also write all figures here")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    train_text = klue_sentences(("nli", "sts"))
    texts = {"NLI+STS (training text)": train_text, "NER (unseen text)": klue_sentences(("ner",))}
    tmp = tempfile.mkdtemp(prefix="kjax-bench-tokstats-")
    tokenizers, size = train_all(train_text, tmp, args.bpe, args.min_syllable)
    results = []
    for name, sentences in texts.items():
        for tok in tokenizers:
            results.append({"text": name, **measure(tok, sentences).summary()})
    pct = lambda x: "—" if x is None else f"{100 * x:.2f}%"  # noqa: E731
    header = ("| text | scheme | [UNK] tokens | morphemes with [UNK] | split: nouns | "
              "predicates | other | all | token sets | crossing pieces | tokens/morpheme |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [f"| {r['text']} | {r['scheme']} | {pct(r['unk_token_rate'])} | "
             f"{pct(r['unk_morpheme_rate'])} | {pct(r['split_share']['noun'])} | "
             f"{pct(r['split_share']['predicate'])} | {pct(r['split_share']['other'])} | "
             f"{pct(r['split_share']['all'])} | {pct(r['token_set_share'])} | "
             f"{pct(r['crossing_share'])} | {r['tokens_per_morpheme']:.2f} |" for r in results]
    about = (f"KLUE dev: {len(train_text):,} NLI+STS sentences (training text), "
             f"{len(texts['NER (unseen text)']):,} NER sentences; every tokenizer has "
             f"{size:,} tokens (multihot: BPE {args.bpe} rewritten + syllables seen >= "
             f"{args.min_syllable} times; sentencepiece and morph-sp: unigram of that size).")
    table = "\n".join([about, "", header, *lines])
    print(table)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"vocab_size": size, "results": results}, f, ensure_ascii=False, indent=2)
    if not args.no_record:
        path = os.path.join(ROOT, "docs", "EXPERIMENTS.md")
        new = not os.path.exists(path)
        with open(path, "a", encoding="utf-8") as f:
            if new:
                f.write(HEADER)
            f.write(f"\n### tokenizer_stats — {datetime.date.today().isoformat()} — "
                    f"{platform.node() or 'host'}\n\n{table}\n")


if __name__ == "__main__":
    main()
