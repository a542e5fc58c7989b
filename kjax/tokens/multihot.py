"""UKnowBERT morpheme-unit vocabulary (METHODS §2.1) and the morpheme →
token-set map of §2.2 (Table 7), plus the tokenizer that feeds the multi-hot
input generator (§2.3): one *morpheme* per model position, its tokens summed.

Decisions the spec leaves open (kept in one place, tested):
- BPE units are `form + TAG`, the TAG written as ONE private-use character
  (U+E000 + tag id) instead of "/NNG": BPE then never learns tag fragments
  ("NN", "/J") as tokens. A piece ending in a tag char is a tagged token.
- SN, SL, SH and W_* morphemes are left out of the BPE corpus, and tokens that
  would shadow the character rules (multi-char digit/Latin strings, anything
  with Hanja or other-script letters) are dropped: `20/SN` must give
  `2## 0##`, never a whole-number token (§2.1 "Digits").
- Numbers: one character → bare digit (`7`); longer → every character gets
  `##`, `,` and `.` inside included: `1,000` → `1## ,## 0## 0## 0##`,
  `3.14` → `3## .## 1## 4##`. Full-width / other decimal digits and accented
  Latin letters are folded to ASCII first (`２０` → `2## 0##`, `é` → `e`).
- "Syllables" are characters: Hangul syllables, jamo (ᆫ, ㅋ), symbols and
  emoji all become `@c` tokens when seen >= min_syllable_count times in
  morphemes that are not single tokens. Runs of Hanja → one `[CHC]`, runs of
  other-script letters → one `[OTL]`. One unknown character makes the whole
  morpheme a single `[UNK]` (§2.1 "A morpheme with an unknown syllable").
"""
from __future__ import annotations

import collections
import functools
import io
import json
import os
import re
import unicodedata
from typing import Iterable, Iterator, Sequence

import numpy as np
import sentencepiece as spm

from kjax import paths
from kjax.errors import KjaxError
from kjax.morph.analyzer import KoreanAnalyzer, Morpheme
from kjax.morph.tags import PREDICATE_TAGS, TAGS, base_tag, tag_id
from kjax.tokens.morphemes import MorphemeEncoding
from kjax.tokens.sentencepiece import (CLS, MASK, PAD, SEP, SPECIAL_TOKENS, TOKEN_ARRAYS,
                                       UNK)

UNK_TOKEN, CHC, OTL = "[UNK]", "[CHC]", "[OTL]"
CONT = "##"          # continuation mark (§2.1)
SYLLABLE = "@"       # syllable-token prefix (§2.1)
DIGITS = "0123456789"
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
BASE_TOKENS = (*SPECIAL_TOKENS, CHC, OTL, *DIGITS, *(d + CONT for d in DIGITS),
               "," + CONT, "." + CONT, *LETTERS)
FORMAT = "kjax-multihot-vocab"
_NUMBER = re.compile(r"[0-9]+(?:[.,][0-9]+)*")
_APPEND_CONT = PREDICATE_TAGS | {"XPN", "XSV", "XSA"}
_X_HA_SUFFIXES = ("하", "되")                    # §2.2 step 3
_CHAR_RULE_TAGS = {"SN", "SL", "SH"}             # spelled by character rules
_TAG_CHAR_BASE = 0xE000                          # private use area
_WORD_START = "\u2581"


def rewrite(form: str, tag: str) -> str:
    """§2.1: predicates, XPN, XSV, XSA → `form##`; E*, J*, XSN → `##form`;
    every other tag is dropped."""
    t = base_tag(tag)
    if t in _APPEND_CONT:
        return form + CONT
    if t[:1] in ("E", "J") or t == "XSN":
        return CONT + form
    return form


def token_surface(token: str) -> str:
    """The text a token stands for (`##의` → 의, `하##` → 하, `@신` → 신)."""
    if len(token) > 2 and token.startswith(CONT):
        return token[2:]
    if len(token) > 2 and token.endswith(CONT):
        return token[:-2]
    if len(token) == 2 and token[0] == SYLLABLE:
        return token[1]
    return token


def _is_hangul(c: str) -> bool:
    o = ord(c)
    return (0xAC00 <= o <= 0xD7A3 or 0x1100 <= o <= 0x11FF or 0x3130 <= o <= 0x318F
            or 0xA960 <= o <= 0xA97F or 0xD7B0 <= o <= 0xD7FF)


def _is_hanja(c: str) -> bool:
    o = ord(c)
    return (0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF
            or 0x20000 <= o <= 0x3134F)


@functools.lru_cache(maxsize=1 << 16)
def _fold(c: str) -> str:
    """Other decimal digits → ASCII digit; full-width/accented Latin → ASCII."""
    if c.isascii():
        return c
    cat = unicodedata.category(c)
    if cat == "Nd":
        return str(unicodedata.decimal(c))
    if cat[0] == "L":
        base = unicodedata.normalize("NFKD", c)[:1]
        if base.isascii() and base.isalpha():
            return base
    return c


def _char_class(c: str) -> str:
    """'digit' | 'latin' | 'hanja' | 'other' (other-script letter) |
    'space' | 'syllable' (Hangul, jamo, symbols, emoji: `@c` tokens)."""
    f = _fold(c)
    if f.isascii() and f.isdigit():
        return "digit"
    if f.isascii() and f.isalpha():
        return "latin"
    if _is_hanja(c):
        return "hanja"
    if c.isspace():
        return "space"
    if unicodedata.category(c)[0] == "L" and not _is_hangul(c):
        return "other"
    return "syllable"


def _number_or_latin(form: str) -> list[str] | None:
    """§2.2 step 2: digit or letter tokens, or None if not a number/Latin word."""
    folded = "".join(_fold(c) for c in form)
    if _NUMBER.fullmatch(folded):
        return [folded] if len(folded) == 1 else [c + CONT for c in folded]
    if folded.isascii() and folded.isalpha():
        return list(folded)
    return None


def _shadows_char_rules(token: str) -> bool:
    """True for tokens §2.1's character rules must produce instead."""
    core = token_surface(token)
    classes = {_char_class(c) for c in core}
    if classes & {"hanja", "other", "space"}:
        return True
    return len(core) > 1 and bool(classes & {"digit", "latin"})


def _storable(token: str) -> bool:
    return bool(token) and not any(c.isspace() or unicodedata.category(c) in ("Cc", "Cs")
                                   for c in token)


class MultihotVocab:
    """Token list with fixed ids ([PAD] [UNK] [CLS] [SEP] [MASK] = 0..4)."""

    def __init__(self, tokens: Sequence[str], settings: dict | None = None,
                 source: str = "<memory>"):
        tokens = list(tokens)
        if tuple(tokens[:len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise KjaxError(f"{source}: the first tokens must be {' '.join(SPECIAL_TOKENS)} "
                            f"(ids 0..4), found {tokens[:5]}; rebuild the vocabulary")
        self.tokens = tokens
        self.settings = dict(settings or {})
        self._index: dict[str, int] = {}
        for i, tok in enumerate(tokens):
            if not _storable(tok):
                raise KjaxError(f"{source}: line {i + 1} ({tok!r}) is empty or holds whitespace/"
                                f"control characters; remove that line")
            if tok in self._index:
                raise KjaxError(f"{source}: token {tok!r} appears twice (lines "
                                f"{self._index[tok] + 1} and {i + 1}); remove one")
            self._index[tok] = i
        missing = [t for t in BASE_TOKENS if t not in self._index]
        if missing:
            raise KjaxError(f"{source}: the character-rule tokens {missing[:8]} are missing "
                            f"(§2.1 needs all of multihot.BASE_TOKENS); rebuild the vocabulary")
        self._encode_ids = functools.lru_cache(maxsize=1 << 18)(self._encode_ids_uncached)

    def __getstate__(self):  # picklable for worker processes: drop the cache
        return {k: v for k, v in self.__dict__.items() if k != "_encode_ids"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._encode_ids = functools.lru_cache(maxsize=1 << 18)(self._encode_ids_uncached)

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self._index

    def token_to_id(self, token: str) -> int:
        return self._index.get(token, UNK)

    def id_to_token(self, i: int) -> str:
        return self.tokens[int(i)]

    # ---- §2.2: morpheme → token set -------------------------------------
    def encode_morpheme(self, form: str, tag: str) -> list[str]:
        """The four steps of §2.2, in order (see the module docstring)."""
        form = unicodedata.normalize("NFC", form)
        if not form.strip():
            return [UNK_TOKEN]
        whole = rewrite(form, tag)                      # step 1: one token
        if whole in self._index:
            return [whole]
        digits_or_letters = _number_or_latin(form)      # step 2
        if digits_or_letters is not None:
            return digits_or_letters
        if (base_tag(tag) in PREDICATE_TAGS and len(form) > 1    # step 3: X+하, X+되
                and form[-1] in _X_HA_SUFFIXES and form[-1] + CONT in self._index):
            head = [form[:-1]] if form[:-1] in self._index else self._characters(form[:-1])
            return [UNK_TOKEN] if head is None else head + [form[-1] + CONT]
        chars = self._characters(form)                  # step 4: syllables
        return [UNK_TOKEN] if chars is None else chars

    def _characters(self, text: str) -> list[str] | None:
        """Character tokens; None when a syllable is not in the vocabulary."""
        out: list[str] = []
        several = len(text) > 1
        for c in text:
            kind = _char_class(c)
            if kind == "digit":
                out.append(_fold(c) + CONT if several else _fold(c))
            elif kind == "latin":
                out.append(_fold(c))
            elif kind in ("hanja", "other"):
                mark = CHC if kind == "hanja" else OTL
                if not out or out[-1] != mark:
                    out.append(mark)
            elif kind == "syllable":
                if SYLLABLE + c not in self._index:
                    return None
                out.append(SYLLABLE + c)
        return out or None

    def _encode_ids_uncached(self, form: str, tag: str) -> tuple[int, ...]:
        return tuple(self._index[t] for t in self.encode_morpheme(form, tag))

    def encode_morpheme_ids(self, form: str, tag: str) -> tuple[int, ...]:
        return self._encode_ids(form, tag)

    # ---- files: one token a line + `<path>.json` settings ------------------
    def save(self, path: str) -> None:
        paths.write_text(path, "\n".join(self.tokens) + "\n")   # local or a URL
        header = {"format": FORMAT, "version": 1, "size": len(self), **self.settings}
        paths.write_text(path + ".json", json.dumps(header, ensure_ascii=False, indent=1))

    @classmethod
    def load(cls, path: str) -> "MultihotVocab":
        if not paths.isfile(path):
            raise KjaxError(f"multi-hot vocabulary {path!r} not found; build it with "
                            f"`kjax tokenizer train` (tokenizer.scheme=multihot)")
        lines = paths.read_text(path).split("\n")   # not splitlines(): tokens may hold U+2028
        tokens = [t.rstrip("\r") for t in (lines[:-1] if lines[-1] == "" else lines)]
        settings = {}
        if paths.isfile(path + ".json"):
            settings = paths.read_json(path + ".json")
            if settings.get("format") != FORMAT or settings.get("size") != len(tokens):
                raise KjaxError(f"{path}.json describes format={settings.get('format')!r} "
                                f"size={settings.get('size')}, but {path} has {len(tokens)} "
                                f"lines; the two files do not belong together")
            settings = {k: v for k, v in settings.items()
                        if k not in ("format", "version", "size")}
        return cls(tokens, settings, source=path)

    # ---- §2.1: building --------------------------------------------------
    @classmethod
    def build(cls, morpheme_sentences: Iterable[Sequence], bpe_vocab_size: int,
              min_syllable_count: int = 50, character_coverage: float = 0.9995,
              input_sentence_size: int = 2_000_000,
              num_threads: int | None = None) -> "MultihotVocab":
        """BPE over `form+TAG` units, rewritten by POS, plus syllable, digit,
        letter and [CHC]/[OTL] tokens. `morpheme_sentences` yields sequences of
        `Morpheme` or `(form, tag)`; it is read once."""
        counts: collections.Counter = collections.Counter()

        def units() -> Iterator[str]:
            for sentence in morpheme_sentences:
                words = []
                for m in sentence:
                    form, tag = (m.form, m.tag) if isinstance(m, Morpheme) else m[:2]
                    form, tag = "".join(form.split()).replace(_WORD_START, ""), base_tag(tag)
                    if not form:
                        continue
                    counts[form, tag] += 1
                    if tag not in _CHAR_RULE_TAGS and not tag.startswith("W_"):
                        words.append(form + chr(_TAG_CHAR_BASE + tag_id(tag)))
                if words:
                    yield " ".join(words)

        pieces = _train_bpe(units(), bpe_vocab_size, character_coverage,
                            input_sentence_size, num_threads)
        vocab = dict.fromkeys(BASE_TOKENS)
        for piece in pieces:
            token = _rewrite_piece(piece)
            if token and _storable(token) and not _shadows_char_rules(token):
                vocab.setdefault(token)
        n_bpe = len(vocab) - len(BASE_TOKENS)
        syllables: collections.Counter = collections.Counter()
        for (form, tag), n in counts.items():   # morphemes that are not one token
            if rewrite(form, tag) in vocab or _number_or_latin(form) is not None:
                continue
            for c in form:
                if _char_class(c) == "syllable":
                    syllables[c] += n
        kept = sorted((c for c, n in syllables.items() if n >= min_syllable_count),
                      key=lambda c: (-syllables[c], c))
        for c in kept:
            vocab.setdefault(SYLLABLE + c)
        settings = {"bpe_vocab_size": bpe_vocab_size, "min_syllable_count": min_syllable_count,
                    "bpe_tokens_rewritten": n_bpe, "syllable_tokens": len(kept),
                    "morpheme_types": len(counts)}
        return cls(list(vocab), settings)


def _rewrite_piece(piece: str) -> str | None:
    """A BPE piece → vocabulary token (§2.1), or None for tag-only pieces.
    Only a whole unit (`▁form` + tag) is rewritten by its tag; the tail of a
    unit (`시`+VV out of `마시`+VV) is not a predicate, so it loses the tag
    and is kept like the pieces learned without one."""
    whole = piece.startswith(_WORD_START)
    piece = piece.replace(_WORD_START, "")
    if piece and _TAG_CHAR_BASE <= ord(piece[-1]) < _TAG_CHAR_BASE + len(TAGS):
        form, tag = piece[:-1], TAGS[ord(piece[-1]) - _TAG_CHAR_BASE]
        return (rewrite(form, tag) if whole else form) or None
    return piece or None            # learned without a tag: kept as it is


def _train_bpe(units: Iterator[str], vocab_size: int, character_coverage: float,
               input_sentence_size: int, num_threads: int | None) -> list[str]:
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=units, model_writer=model, vocab_size=vocab_size,
            model_type="bpe", character_coverage=character_coverage,
            input_sentence_size=input_sentence_size, shuffle_input_sentence=True,
            hard_vocab_limit=False,          # a small corpus gives a smaller vocabulary
            split_by_unicode_script=False,   # else form and tag char never merge
            normalization_rule_name="identity", unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1,
            num_threads=num_threads or os.cpu_count() or 1, minloglevel=2)
    except RuntimeError as e:
        raise KjaxError(f"BPE training for the multi-hot vocabulary failed ({e}); check that "
                        f"the corpus is non-empty Korean text") from None
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())
            if not (sp.is_unknown(i) or sp.is_control(i))]


class MultihotTokenizer(MorphemeEncoding):
    """Sentence → per-token arrays for the multi-hot input (§2.3): `morph` is
    the morpheme index (the model position), `inpos` the token's place in it."""
    scheme = "multihot"
    PAD, UNK, CLS, SEP, MASK = PAD, UNK, CLS, SEP, MASK

    def __init__(self, vocab: MultihotVocab | str, analyzer: KoreanAnalyzer | None = None):
        self.vocab = MultihotVocab.load(vocab) if isinstance(vocab, str) else vocab
        self.analyzer = analyzer or KoreanAnalyzer()

    @classmethod
    def train(cls, sentences: Iterable[str], path: str, bpe_vocab_size: int,
              min_syllable_count: int = 50, analyzer: KoreanAnalyzer | None = None,
              num_workers: int | None = None, **build_options) -> "MultihotTokenizer":
        """Analyses raw sentences with Kiwi, builds the vocabulary (§2.1) and
        saves it to `path` (+ `path.json`)."""
        analyzer = analyzer or KoreanAnalyzer()
        vocab = MultihotVocab.build(analyzer.analyze_many(sentences, num_workers),
                                    bpe_vocab_size, min_syllable_count, **build_options)
        vocab.save(path)
        return cls(vocab, analyzer)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def id_to_token(self, i: int) -> str:
        return self.vocab.id_to_token(i)

    def token_to_id(self, token: str) -> int:
        return self.vocab.token_to_id(token)

    def encode_morphemes(self, morphemes: Sequence[Morpheme]) -> dict[str, np.ndarray]:
        ids, morph, inpos, tags, eojeol = [], [], [], [], []
        for k, m in enumerate(morphemes):
            token_ids = self.vocab.encode_morpheme_ids(m.form, m.tag)
            n = len(token_ids)
            ids += token_ids
            morph += [k] * n
            inpos += range(n)
            tags += [tag_id(m.tag)] * n
            eojeol += [m.eojeol] * n
        arrays = (ids, morph, inpos, tags, eojeol)
        return {key: np.asarray(a, np.int32)
                for key, a in zip(TOKEN_ARRAYS, arrays)}

    def decode_morphemes(self, encoded: dict[str, np.ndarray]) -> list[tuple[str, str]]:
        """Per-token arrays → (form, tag) per morpheme. Exact for in-vocabulary
        material; [UNK], [CHC] and [OTL] come back as themselves."""
        out: list[tuple[str, str]] = []
        last = None
        for i, k, t in zip(encoded["ids"], encoded["morph"], encoded["tag"]):
            surface = token_surface(self.vocab.id_to_token(i))
            if k == last:
                out[-1] = (out[-1][0] + surface, out[-1][1])
            else:
                out.append((surface, TAGS[int(t)]))
                last = k
        return out

    def decode(self, ids) -> str:
        """Tokens joined by spaces (morpheme boundaries need `decode_morphemes`)."""
        return " ".join(self.vocab.id_to_token(i) for i in ids)
