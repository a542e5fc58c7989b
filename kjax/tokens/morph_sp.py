"""`morph-sp`: sentencepiece over Kiwi morphemes; a piece never crosses a
morpheme boundary, and the original spaces survive as `▁`.

Each morpheme becomes one unit: its form, prefixed with `▁` when it starts an
eojeol (the first morpheme of a whitespace word; with overlapping spans such
as 했 → 하 + 었 only the first gets it). Training joins a sentence's units with
a delimiter sentencepiece splits on and never learns across
(`pretokenization_delimiter`); encoding runs each unit through sentencepiece
on its own. `add_dummy_prefix` is off: the `▁` marks are ours.

    나는 학교에서  →  ▁나 | 는 | ▁학교 | 에서   (| = unit boundary)

No bare "▁" tokens (docs/EXPERIMENTS.md, "Should morph-sp emit bare "▁"
tokens?"): when the vocabulary has no "▁form" piece, sentencepiece spells
"▁" + pieces of form, and that bare "▁" would take a model position (14.6 %
of all positions on held-out Wikipedia text), become a key of every SHAKE
pair of its noun and an MLM target of every masked word-initial morpheme,
while saying only "a word starts here" — which the eojeol ids in every
example say exactly. So
it is dropped: the word start shows where the vocabulary learned "▁form"
(the frequent word-initial morphemes), and `bare_word_starts=True` keeps
the bare "▁" tokens.

The per-token arrays follow the kjax contract (see tokens/sentencepiece.py):
`morph` is the morpheme index, `inpos` the piece's place in it, `tag` the
morpheme's POS id (METHODS §1.3 lines SHAKE pairs up on these).
"""
from __future__ import annotations

import os
from typing import Iterable, Iterator, Sequence

import numpy as np
import sentencepiece as spm

from kjax import paths
from kjax.errors import KjaxError
from kjax.morph.analyzer import KoreanAnalyzer, Morpheme
from kjax.morph.tags import tag_id
from kjax.tokens.morphemes import MorphemeEncoding
from kjax.tokens.sentencepiece import (CLS, MASK, PAD, SEP, SPECIAL_TOKENS, TOKEN_ARRAYS,
                                       UNK, WORD_START, SentencePieceTokenizer)

UNIT_DELIMITER = "\u241f"  # ␟ SYMBOL FOR UNIT SEPARATOR: never in real text
_STRIP = {ord(WORD_START): None, ord(UNIT_DELIMITER): None}


def morpheme_units(morphemes: Sequence[Morpheme]) -> list[str]:
    """One sentencepiece input per morpheme: `▁` + form at an eojeol start.
    Spaces and our two marks are removed from forms (a unit may come out as
    just "▁" or "": the encoder maps those to [UNK])."""
    units, last_eojeol = [], None
    for m in morphemes:
        form = "".join(m.form.split()).translate(_STRIP)
        units.append((WORD_START if m.eojeol != last_eojeol else "") + form)
        last_eojeol = m.eojeol
    return units


def _training_lines(sentences: Iterable[str], analyzer: KoreanAnalyzer,
                    num_workers: int | None) -> Iterator[str]:
    for morphemes in analyzer.analyze_many(sentences, num_workers):
        units = [u for u in morpheme_units(morphemes) if u not in ("", WORD_START)]
        if units:
            yield UNIT_DELIMITER.join(units)


class MorphSPTokenizer(MorphemeEncoding, SentencePieceTokenizer):
    """The sentencepiece model (vocabulary, id ↔ piece) of SentencePieceTokenizer,
    fed Kiwi's morphemes instead of raw text."""
    scheme = "morph-sp"
    PAD, UNK, CLS, SEP, MASK = PAD, UNK, CLS, SEP, MASK
    TRAIN_HINT = "`kjax tokenizer train` (tokenizer.scheme=morph-sp)"

    def __init__(self, model_file: str, analyzer: KoreanAnalyzer | None = None,
                 bare_word_starts: bool = False):
        super().__init__(model_file)
        self.analyzer = analyzer or KoreanAnalyzer()
        bare = self.sp.piece_to_id(WORD_START)
        self.bare_id = -1 if bare_word_starts or bare == UNK else bare   # dropped when alone

    @classmethod
    def train(cls, sentences: Iterable[str], vocab_size: int, model_prefix: str,
              model_type: str = "unigram", character_coverage: float = 0.9995,
              input_sentence_size: int = 2_000_000, analyzer: KoreanAnalyzer | None = None,
              num_workers: int | None = None, num_threads: int | None = None,
              ) -> "MorphSPTokenizer":
        """Analyses `sentences` with Kiwi and trains `<model_prefix>.model`."""
        if model_type not in ("unigram", "bpe"):
            raise KjaxError(f"morph-sp model_type={model_type!r}; choose unigram or bpe")
        analyzer = analyzer or KoreanAnalyzer()
        with paths.staged_prefix(model_prefix) as local_prefix:  # a URL: uploaded after
            cls._train(_training_lines(sentences, analyzer, num_workers), local_prefix,
                       vocab_size, model_type, character_coverage, input_sentence_size,
                       num_threads)
        return cls(model_prefix + ".model", analyzer)

    @staticmethod
    def _train(lines, model_prefix, vocab_size, model_type, character_coverage,
               input_sentence_size, num_threads) -> None:
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=lines,
                model_prefix=model_prefix, vocab_size=vocab_size, model_type=model_type,
                character_coverage=character_coverage,
                input_sentence_size=input_sentence_size, shuffle_input_sentence=True,
                pretokenization_delimiter=UNIT_DELIMITER,  # no piece crosses a morpheme
                add_dummy_prefix=False,                    # ▁ marks eojeol starts only
                pad_id=PAD, unk_id=UNK, bos_id=-1, eos_id=-1,
                pad_piece="[PAD]", unk_piece="[UNK]",
                user_defined_symbols=list(SPECIAL_TOKENS[CLS:]),   # [CLS] [SEP] [MASK] = 2, 3, 4
                normalization_rule_name="identity",        # Kiwi's input was NFC already
                num_threads=num_threads or os.cpu_count() or 1, minloglevel=2)
        except RuntimeError as e:
            raise KjaxError(f"morph-sp training failed ({e}); vocab_size={vocab_size} does not "
                            f"fit this corpus: change tokenizer.vocab_size as the message "
                            f"says") from None

    def encode_morphemes(self, morphemes: Sequence[Morpheme]) -> dict[str, np.ndarray]:
        units = morpheme_units(morphemes)
        pieces = self.sp.encode(units) if units else []
        ids, morph, inpos, tags, eojeol = [], [], [], [], []
        for k, (m, unit, piece_ids) in enumerate(zip(morphemes, units, pieces)):
            if unit in ("", WORD_START) or not piece_ids:
                piece_ids = [UNK]           # every morpheme keeps >= 1 token
            elif piece_ids[0] == self.bare_id and len(piece_ids) > 1:
                piece_ids = piece_ids[1:]   # no bare ▁ (module doc)
            n = len(piece_ids)
            ids += piece_ids
            morph += [k] * n
            inpos += range(n)
            tags += [tag_id(m.tag)] * n
            eojeol += [m.eojeol] * n
        return {key: np.asarray(a, np.int32)
                for key, a in zip(TOKEN_ARRAYS, (ids, morph, inpos, tags, eojeol))}

    def decode(self, ids) -> str:
        """Morpheme forms joined, a space where a piece shows a word start
        (lemmas: 보았다 comes back 보었다)."""
        return self.sp.decode([int(i) for i in ids])
