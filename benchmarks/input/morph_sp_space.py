"""Should `morph-sp` emit bare "▁" pieces?

morph-sp marks the first morpheme of every eojeol with sentencepiece's "▁"
(kjax/tokens/morph_sp.py). When "▁form" is not a piece, sentencepiece spells
it "▁" + pieces of form: a bare "▁" token that takes a model position (and a
row and column of SHAKE's B) and says only "a word starts here". Three
encodings of the same text, with vocabularies of one size trained on the same
KLUE dev sentences, measured on the KorQuAD dev paragraphs (held out):

    marks       ▁ on eojeol starts, bare ▁ when needed
                (MorphSPTokenizer(bare_word_starts=True))
    drop-bare   kjax's encoding: the same vocabulary, bare ▁ tokens dropped at
                encoding: the word start of those morphemes is not shown
    no-marks    units without ▁ (trained and encoded): no word starts at all

plus plain sentencepiece of the same size. Columns: positions per morpheme
(sequence length), bare ▁ share, morphemes split into >= 2 real pieces, and
the share of eojeols whose start the tokens still show.

    python benchmarks/input/morph_sp_space.py [--vocab 6000] [--max-texts N]

One record per text and encoding (benchmarks/results/morph_sp_space.jsonl).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import records  # noqa: E402
from klue_text import klue_sentences, korquad_contexts  # noqa: E402

from kjax.morph import KoreanAnalyzer  # noqa: E402
from kjax.tokens import morph_sp  # noqa: E402
from kjax.tokens.morph_sp import MorphSPTokenizer  # noqa: E402
from kjax.tokens.sentencepiece import (WORD_START, SentencePieceTokenizer,  # noqa: E402
                                       train_sentencepiece)
from kjax.tokens.stats import measure  # noqa: E402


class NoMarks(MorphSPTokenizer):
    """morph-sp whose units carry no ▁ (encoding side; train with units alike)."""

    def encode_morphemes(self, morphemes):
        original = morph_sp.morpheme_units
        morph_sp.morpheme_units = lambda ms: [u.lstrip(WORD_START) for u in original(ms)]
        try:
            return super().encode_morphemes(morphemes)
        finally:
            morph_sp.morpheme_units = original


def train_no_marks(text, size, prefix, analyzer):
    original = morph_sp.morpheme_units
    morph_sp.morpheme_units = lambda ms: [u.lstrip(WORD_START) for u in original(ms)]
    try:
        tok = MorphSPTokenizer.train(text, size, prefix, "unigram", analyzer=analyzer)
    finally:
        morph_sp.morpheme_units = original
    return NoMarks(tok.model_file, analyzer)


def word_starts_shown(tok, sentences, analyzer) -> float:
    """Share of eojeols whose first token carries ▁ (what the model can see)."""
    shown = total = 0
    for morphemes in analyzer.analyze_many(sentences):
        if tok.scheme == "sentencepiece":
            continue
        enc = tok.encode_morphemes(morphemes)
        pieces = [tok.id_to_token(i) for i in enc["ids"]]
        first = np.r_[True, enc["eojeol"][1:] != enc["eojeol"][:-1]]
        total += int(first.sum())
        shown += sum(p.startswith(WORD_START) for p, f in zip(pieces, first) if f)
    return shown / total if total else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=6000)
    ap.add_argument("--max-texts", type=int, default=0)
    records.add_arguments(ap)
    args = ap.parse_args()
    cap = (lambda xs: xs[:args.max_texts]) if args.max_texts else (lambda xs: xs)  # noqa: E731
    train, held_out = cap(klue_sentences(("nli", "sts", "ner"))), cap(korquad_contexts())
    tmp, analyzer = tempfile.mkdtemp(prefix="kjax-bench-msp-"), KoreanAnalyzer()
    train_sentencepiece(train, f"{tmp}/sp", args.vocab, "unigram")
    marks = MorphSPTokenizer.train(train, args.vocab, f"{tmp}/msp", "unigram", analyzer=analyzer)
    variants = {"sentencepiece": SentencePieceTokenizer(f"{tmp}/sp.model"),
                "marks": MorphSPTokenizer(marks.model_file, analyzer, bare_word_starts=True),
                "drop-bare": marks,
                "no-marks": train_no_marks(train, args.vocab, f"{tmp}/nomarks", analyzer)}
    print(f"vocabularies of {args.vocab:,} tokens trained on {len(train):,} KLUE dev sentences; "
          f"measured on them and on {len(held_out):,} KorQuAD dev paragraphs\n")
    print("| text | encoding | positions/morpheme | bare ▁ tokens | split morphemes | "
          "[UNK] tokens | word starts shown | tokens |\n|---|---|---|---|---|---|---|---|")
    rows = []
    for text, sentences in (("KLUE (training)", train), ("KorQuAD (held out)", held_out)):
        for name, tok in variants.items():
            s = measure(tok, sentences, analyzer).summary()
            shown = None if name == "sentencepiece" else \
                word_starts_shown(tok, sentences, analyzer)
            print(f"| {text} | {name} | {s['tokens_per_morpheme']:.3f} | "
                  f"{100 * s['bare_space_share']:.2f}% | {100 * s['split_share']['all']:.2f}% | "
                  f"{100 * s['unk_token_rate']:.3f}% | "
                  f"{'—' if shown is None else f'{100 * shown:.1f}%'} | {s['tokens']:,} |")
            rows.append({"row": f"{text}: {name}", "figures": {
                "tokens_per_morpheme": round(s["tokens_per_morpheme"], 4),
                "bare_space_share": s["bare_space_share"], "split_share": s["split_share"]["all"],
                "unk_token_rate": s["unk_token_rate"], "word_starts_shown": shown,
                "tokens": s["tokens"]}})
    records.save(args, "morph_sp_space", rows, vocab_size=args.vocab)


if __name__ == "__main__":
    main()
