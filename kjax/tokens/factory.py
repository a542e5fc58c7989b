"""Picks the tokenizer named by `config.tokenizer.scheme`, for training a
vocabulary (`kjax tokenizer train`) and for encoding (prepare, inspect).

    sentencepiece  plain sentencepiece over whitespace words
    morph-sp       sentencepiece over Kiwi morphemes: no piece crosses a morpheme
    multihot       the UKnowBERT morpheme vocabulary (METHODS §2.1–2.2)
    imported       a transformers folder's own tokenizer.json (`kjax import`;
                   kjax/tokens/imported.py): never trained here

All four encode a sentence into the same per-token arrays
(ids, morph, inpos, tag, eojeol); see kjax/tokens/sentencepiece.py.
"""
from __future__ import annotations

import contextlib
import os

from kjax import paths
from kjax.config.load import copy_of
from kjax.errors import KjaxError
from kjax.progress import Progress, Ticker
from kjax.config.sources import sources
from kjax.text.corpus import CorpusStats, iter_sentences, resolve_corpus
from kjax.tokens.sentencepiece import SentencePieceTokenizer, train_sentencepiece

SCHEMES = ("sentencepiece", "morph-sp", "multihot", "imported")


def check_scheme(scheme: str) -> None:
    if scheme not in SCHEMES:
        raise KjaxError(f"tokenizer.scheme={scheme!r}; choose one of {', '.join(SCHEMES)}")


def tokenizer_file(config) -> str:
    """The file that holds the vocabulary of the configured scheme."""
    t = config.tokenizer
    if t.scheme == "imported":    # the file itself (a tokenizer.json)
        return t.path
    return t.path + (".multihot.txt" if t.scheme == "multihot" else ".model")


class _Feed:
    """The corpus sentences a trainer reads, with progress: a count while it
    reads (Kiwi analyses, for the morpheme schemes), then the elapsed time of
    the training proper, which reports nothing itself (sentencepiece's C++)."""

    def __init__(self, sentences, scheme: str, enabled: bool):
        self.sentences, self.enabled = sentences, enabled
        self.reading = Progress("tokenizer: reading the corpus", unit="sentence",
                                enabled=enabled)
        self.training = Ticker(f"tokenizer: training the {scheme} vocabulary", enabled)
        self.started = False

    def __iter__(self):
        for sentence in self.sentences:
            self.reading.update()
            yield sentence
        self.reading.close()
        if not self.started:
            self.started = True
            self.training.__enter__()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.reading.close()
        if self.started:
            self.training.__exit__(*exc)


def train_tokenizer(config, progress: bool = True) -> tuple[str, CorpusStats]:
    t = config.tokenizer
    check_scheme(t.scheme)
    if t.scheme == "imported":
        raise KjaxError("tokenizer.scheme='imported' is the tokenizer of an imported model "
                        "(`kjax import --hf DIR` copies it); it is not trained by kjax")
    stats = CorpusStats()
    # tokenizer.corpus: the vocabulary's own text; else data.corpus, or every source's
    corpus = t.corpus or config.data.corpus or ",".join(
        s.corpus for s in sources(config) if s.corpus)
    with _Feed(iter_sentences(resolve_corpus(corpus), stats), t.scheme,
               progress) as sentences:
        _train(config, sentences)
    return tokenizer_file(config), stats


def _train(config, sentences) -> None:
    t = config.tokenizer
    if t.scheme == "sentencepiece":
        train_sentencepiece(sentences, t.path, t.vocab_size, t.model_type,
                            t.character_coverage, t.input_sentence_size)
    elif t.scheme == "morph-sp":
        from kjax.tokens.morph_sp import MorphSPTokenizer
        MorphSPTokenizer.train(sentences, t.vocab_size, t.path, t.model_type,
                               t.character_coverage, t.input_sentence_size)
    else:
        from kjax.tokens.multihot_build import train_tokenizer
        # vocab_size is the BPE size before rewriting; the final vocabulary is
        # smaller (duplicates merge) plus syllable/digit/letter tokens (§2.1).
        train_tokenizer(sentences, tokenizer_file(config), t.vocab_size,
                        min_syllable_count=t.min_syllable_count,
                        min_syllable_share=t.min_syllable_share)


def vocabulary_report(config) -> str:
    """What `kjax tokenizer train` prints about the new vocabulary: for
    multihot its composition and warnings when the [UNK] fallback is thin."""
    tok = open_tokenizer(config)
    if config.tokenizer.scheme != "multihot":
        return f"{tok.vocab_size:,} pieces"
    from kjax.tokens.multihot_build import composition, format_composition
    return format_composition(composition(tok.vocab.tokens), tok.vocab.settings)


def open_tokenizer(config):
    """The trained tokenizer of the configured scheme, without size checks."""
    t = config.tokenizer
    check_scheme(t.scheme)
    path = tokenizer_file(config)
    if t.scheme == "imported":
        from kjax.tokens.imported import ImportedTokenizer
        return ImportedTokenizer(path)
    if not paths.isfile(path):
        raise KjaxError(f"tokenizer {path!r} not found; run `kjax tokenizer train --config ...` "
                        f"first (tokenizer.scheme={t.scheme})")
    if t.scheme == "sentencepiece":
        return SentencePieceTokenizer(path)
    if t.scheme == "morph-sp":
        from kjax.tokens.morph_sp import MorphSPTokenizer
        return MorphSPTokenizer(path)
    from kjax.tokens.multihot import MultihotTokenizer
    return MultihotTokenizer(path)


def load_tokenizer(config):
    tok = open_tokenizer(config)
    # An imported vocabulary may be smaller than its model's embedding table
    # (models pad it to a round size); its ids only have to fit.
    if config.tokenizer.scheme == "imported" and tok.vocab_size <= config.model.vocab_size:
        return tok
    if tok.vocab_size != config.model.vocab_size:
        raise KjaxError(
            f"model.vocab_size={config.model.vocab_size} disagrees with the tokenizer "
            f"{_shown(tokenizer_file(config))} ({tok.vocab_size} tokens); set "
            f"--config.model.vocab_size={tok.vocab_size} or retrain the tokenizer")
    return tok


def _shown(path: str) -> str:
    return path if paths.is_remote(path) else os.path.abspath(path)


# Every file a scheme's tokenizer consists of, by suffix after tokenizer.path.
TOKENIZER_SUFFIXES = {"sentencepiece": (".model", ".vocab"), "morph-sp": (".model", ".vocab"),
                      "multihot": (".multihot.txt", ".multihot.txt.json"), "imported": ("",)}


@contextlib.contextmanager
def local_tokenizer(config):
    """`config` itself when tokenizer.path is local; else a copy whose
    tokenizer.path points at a temporary local download of the tokenizer's
    files (for tools that need local files: transformers' save_pretrained)."""
    t = config.tokenizer
    if not paths.is_remote(t.path) or not paths.isfile(tokenizer_file(config)):
        yield config   # (a missing tokenizer is reported under its real name)
        return
    import tempfile
    with tempfile.TemporaryDirectory(prefix="kjax-tok-") as tmp:
        prefix = os.path.join(tmp, paths.name(t.path))
        for suffix in TOKENIZER_SUFFIXES.get(t.scheme, ()):
            if paths.isfile(t.path + suffix):
                paths.download(t.path + suffix, prefix + suffix)
        local = copy_of(config)
        local.tokenizer.path = prefix
        yield local
