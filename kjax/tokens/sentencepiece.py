"""Plain sentencepiece over whitespace words (the generic scheme).

Every tokenizer in kjax encodes a sentence into the same per-token arrays,
which flow unchanged into examples and batches:

    ids     token id
    morph   index of the morpheme the token belongs to (here: the eojeol)
    inpos   position of the token inside that morpheme
    tag     POS tag id (0 here: plain sentencepiece knows no POS)
    eojeol  index of the whitespace word (eojeol) holding the token

Special tokens have fixed ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4.
"""
from __future__ import annotations

import os
from typing import Iterable

import numpy as np
import sentencepiece as spm

from kjax import paths
from kjax.errors import KjaxError
from kjax.text.normalize import normalize

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
NUM_SPECIAL = len(SPECIAL_TOKENS)
TOKEN_ARRAYS = ("ids", "morph", "inpos", "tag", "eojeol")
WORD_START = "\u2581"  # sentencepiece's ▁: this piece starts a whitespace word
KJAX_SPECIAL_IDS = {"pad": PAD, "unk": UNK, "cls": CLS, "sep": SEP, "mask": MASK}


def special_ids(tokenizer) -> dict[str, int]:
    """pad/unk/cls/sep/mask ids of `tokenizer`: kjax's fixed ones, or those of
    an imported vocabulary (kjax/tokens/imported.py), which keeps its own."""
    return getattr(tokenizer, "special_ids", None) or KJAX_SPECIAL_IDS


def train_sentencepiece(sentences: Iterable[str], model_prefix: str, vocab_size: int,
                        model_type: str = "unigram", character_coverage: float = 0.9995,
                        input_sentence_size: int = 2_000_000, user_symbols=()) -> str:
    """Trains a model whose ids 0..4 are kjax's special tokens; writes
    `model_prefix`.model/.vocab (sentencepiece writes local files: a URL
    prefix gets them uploaded, kjax/paths.py)."""
    with paths.staged_prefix(model_prefix) as local_prefix:
        _train(sentences, local_prefix, vocab_size, model_type, character_coverage,
               input_sentence_size, user_symbols)
    return model_prefix + ".model"


def _train(sentences, model_prefix, vocab_size, model_type, character_coverage,
           input_sentence_size, user_symbols) -> None:
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences), model_prefix=model_prefix,
            vocab_size=vocab_size, model_type=model_type,
            character_coverage=character_coverage,
            input_sentence_size=input_sentence_size, shuffle_input_sentence=True,
            pad_id=PAD, unk_id=UNK, bos_id=-1, eos_id=-1,
            pad_piece="[PAD]", unk_piece="[UNK]",
            user_defined_symbols=["[CLS]", "[SEP]", "[MASK]", *user_symbols],
            normalization_rule_name="identity",  # text is NFC already; keep it exact
            num_threads=os.cpu_count() or 1,
            minloglevel=2)
    except RuntimeError as e:
        if "smaller than required_chars" in str(e):   # the corpus has more characters
            hint = (f"a vocabulary of {vocab_size} cannot hold every character this corpus "
                    f"needs at tokenizer.character_coverage={character_coverage:g}: raise "
                    f"tokenizer.vocab_size or lower tokenizer.character_coverage")
        else:
            hint = (f"a vocabulary of {vocab_size} may be too large for this corpus: lower "
                    f"tokenizer.vocab_size")
        raise KjaxError(f"sentencepiece training failed ({' '.join(str(e).split())}); "
                        f"{hint}") from None


class SentencePieceTokenizer:
    scheme = "sentencepiece"
    TRAIN_HINT = "`kjax tokenizer train --config ...`"   # how to make the model file

    def __init__(self, model_file: str):
        if not paths.isfile(model_file):
            raise KjaxError(f"tokenizer model {model_file!r} not found; run "
                            f"{self.TRAIN_HINT} first")
        self.model_file = model_file   # local or a URL: read through kjax/paths.py
        self.sp = spm.SentencePieceProcessor(model_proto=paths.read_bytes(model_file))
        for i, piece in enumerate(SPECIAL_TOKENS):
            if self.sp.id_to_piece(i) != piece:
                raise KjaxError(f"{model_file}: id {i} is {self.sp.id_to_piece(i)!r}, not "
                                f"{piece}; retrain it with {self.TRAIN_HINT}")

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def id_to_token(self, i: int) -> str:
        return self.sp.id_to_piece(int(i))

    def token_to_id(self, token: str) -> int:
        return self.sp.piece_to_id(token)

    def encode(self, sentence: str) -> dict[str, np.ndarray]:
        # kjax's one normalisation (a no-op on corpus text, normalised when read):
        # inspect, prepare, fine-tuning and the exported tokenizer.json agree.
        pieces = self.sp.encode(normalize(sentence), out_type=str)
        ids = np.asarray([self.sp.piece_to_id(p) for p in pieces], np.int32)
        starts = np.asarray([p.startswith(WORD_START) for p in pieces], bool)
        if len(starts):
            starts[0] = True
        eojeol = np.cumsum(starts).astype(np.int32) - 1
        first = np.maximum.accumulate(np.where(starts, np.arange(len(ids)), 0))
        inpos = (np.arange(len(ids)) - first).astype(np.int32)
        return {"ids": ids, "morph": eojeol.copy(), "inpos": inpos,
                "tag": np.zeros_like(ids), "eojeol": eojeol}

    def decode(self, ids) -> str:
        return self.sp.decode([int(i) for i in ids])
