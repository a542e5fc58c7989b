"""Picks the tokenizer named by `config.tokenizer.scheme`, for training a
vocabulary (`kjax tokenizer train`) and for encoding (prepare, inspect)."""
from __future__ import annotations

import os

from kjax.errors import KjaxError
from kjax.text.corpus import CorpusStats, iter_sentences, resolve_corpus
from kjax.tokens.sentencepiece import SentencePieceTokenizer, train_sentencepiece

SCHEMES = ("sentencepiece",)


def _check_scheme(scheme: str) -> None:
    if scheme not in SCHEMES:
        raise KjaxError(f"tokenizer.scheme={scheme!r}; choose one of {', '.join(SCHEMES)}")


def train_tokenizer(config) -> tuple[str, CorpusStats]:
    t = config.tokenizer
    _check_scheme(t.scheme)
    stats = CorpusStats()
    sentences = iter_sentences(resolve_corpus(config.data.corpus), stats)
    path = train_sentencepiece(sentences, t.path, t.vocab_size, t.model_type,
                               t.character_coverage, t.input_sentence_size)
    return path, stats


def load_tokenizer(config):
    t = config.tokenizer
    _check_scheme(t.scheme)
    tok = SentencePieceTokenizer(t.path + ".model")
    if tok.vocab_size != config.model.vocab_size:
        raise KjaxError(
            f"model.vocab_size={config.model.vocab_size} disagrees with the tokenizer "
            f"{os.path.abspath(t.path)}.model ({tok.vocab_size} tokens); set "
            f"--config.model.vocab_size={tok.vocab_size} or retrain the tokenizer")
    return tok
