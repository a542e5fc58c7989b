"""[UNK] rate and morpheme splits of `multihot` and `morph-sp` against plain
`sentencepiece` of equal vocabulary size, on text the vocabularies never saw —
the analogue of METHODS §2.2's reported figures (BPE [UNK] 0.85 % vs
multi-hot 0.0008 %; 21.23 % of morphemes as token sets; 2.85–9.49 % of
morphemes split by BPE).

All three are trained on the KLUE dev NLI + STS + NER sentences (news, wiki,
reviews; 0.44 M characters) and measured there and on the KorQuAD 1.0 dev
paragraphs (Wikipedia, 0.5 M characters, not KLUE's sources). multihot is
built first from a BPE of --bpe pieces (kjax's default tokenizer.vocab_size);
its final vocabulary size (rewritten BPE + syllable, jamo, symbol, digit and
letter tokens, §2.1) is the size given to the other two. Every figure comes
from `kjax.tokens.stats.measure`, the code behind `kjax tokenizer stats`.

Runs against whichever kjax is importable, so the same script measures a
branch and its base (`PYTHONPATH=<checkout of the base> python ...`).
Writes one record per text and scheme to benchmarks/results/tokenizer_stats.jsonl
unless --no-record.

    python benchmarks/input/tokenizer_stats.py [--bpe 32000] [--min-syllable N] [--max-texts N]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import records  # noqa: E402
from klue_text import klue_sentences, korquad_contexts  # noqa: E402

import kjax  # noqa: E402
from kjax.errors import KjaxError  # noqa: E402
from kjax.morph import KoreanAnalyzer  # noqa: E402
from kjax.tokens.morph_sp import MorphSPTokenizer  # noqa: E402
from kjax.tokens.multihot_build import train_tokenizer  # noqa: E402
from kjax.tokens.sentencepiece import SentencePieceTokenizer, train_sentencepiece  # noqa: E402
from kjax.tokens.stats import measure  # noqa: E402



def train_all(train_text: list[str], tmp: str, bpe: int, min_syllable: int | None):
    analyzer = KoreanAnalyzer()
    options = {} if min_syllable is None else {"min_syllable_count": min_syllable}
    multihot = train_tokenizer(train_text, f"{tmp}/mh.txt", bpe, analyzer=analyzer, **options)
    size = multihot.vocab_size
    train_sentencepiece(train_text, f"{tmp}/sp", size, "unigram")
    tokenizers = [SentencePieceTokenizer(f"{tmp}/sp.model")]
    try:
        tokenizers.append(MorphSPTokenizer.train(train_text, size, f"{tmp}/msp", "unigram",
                                                 analyzer=analyzer))
    except KjaxError as e:   # its pieces cannot cross morphemes: fewer candidates
        print(f"morph-sp at {size}: {e}", file=sys.stderr)
    return [*tokenizers, multihot], size


def row(text: str, r: dict) -> str:
    pct = lambda x: "—" if x is None else f"{100 * x:.3f}%"  # noqa: E731
    return (f"| {text} | {r['scheme']} | {pct(r['unk_token_rate'])} | "
            f"{pct(r['unk_morpheme_rate'])} | {pct(r.get('bare_space_share'))} | "
            f"{pct(r['split_share']['all'])} | {pct(r['token_set_share'])} | "
            f"{pct(r['crossing_share'])} | {r['tokens_per_morpheme']:.3f} | {r['tokens']:,} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bpe", type=int, default=32000,
                    help="multihot's BPE size before rewriting (kjax's default vocab_size)")
    ap.add_argument("--min-syllable", type=int, default=None,
                    help="tokenizer.min_syllable_count (default: the tokenizer's own)")
    ap.add_argument("--max-texts", type=int, default=0, help="cap on each text (0: all)")
    ap.add_argument("--label", default="", help="names the kjax version in the record")
    ap.add_argument("--json", default=None, help="also write all figures here")
    records.add_arguments(ap)
    args = ap.parse_args()
    cap = (lambda xs: xs[:args.max_texts]) if args.max_texts else (lambda xs: xs)  # noqa: E731
    train_text = cap(klue_sentences(("nli", "sts", "ner")))
    texts = {"KLUE NLI+STS+NER (training text)": train_text,
             "KorQuAD dev contexts (unseen)": cap(korquad_contexts())}
    tmp = tempfile.mkdtemp(prefix="kjax-bench-tokstats-")
    tokenizers, size = train_all(train_text, tmp, args.bpe, args.min_syllable)
    results = [{"text": name, **measure(tok, sentences).summary()}
               for name, sentences in texts.items() for tok in tokenizers]
    header = ("| text | scheme | [UNK] tokens | morphemes with [UNK] | bare ▁ tokens | "
              "split morphemes | token sets | crossing pieces | tokens/morpheme | tokens |\n"
              "|---|---|---|---|---|---|---|---|---|---|")
    vocab = tokenizers[-1].vocab
    composition = getattr(vocab, "composition", lambda: vocab.settings)()
    about = (f"kjax {args.label or kjax.__file__}: trained on {len(train_text):,} KLUE dev "
             f"sentences, measured on them and on {len(texts['KorQuAD dev contexts (unseen)']):,} "
             f"KorQuAD dev paragraphs; every tokenizer has {size:,} tokens (multihot: BPE "
             f"{args.bpe} rewritten + fallback tokens, min_syllable_count="
             f"{args.min_syllable if args.min_syllable is not None else 'default'}; "
             f"sentencepiece and morph-sp: unigram of that size).\n\n"
             f"multihot vocabulary: {json.dumps(composition, ensure_ascii=False)}")
    table = "\n".join([about, "", header, *(row(r["text"], r) for r in results)])
    print(table)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"vocab_size": size, "composition": composition, "results": results}, f,
                      ensure_ascii=False, indent=2)
    records.save(args, "tokenizer_stats", [
        {"row": f"{r['text']}: {r['scheme']}", "figures": {
            k: v for k, v in r.items() if k not in ("text", "scheme")}} for r in results],
        notes=about, vocab_size=size, label=args.label)


if __name__ == "__main__":
    main()
