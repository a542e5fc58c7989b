"""UKnowBERT morpheme-unit vocabulary (METHODS §2.1) and the morpheme →
token-set map of §2.2 (Table 7), plus the tokenizer that feeds the multi-hot
input generator (§2.3): one *morpheme* per model position, its tokens summed.
Building a vocabulary from text, and describing what one is made of, is
kjax/tokens/multihot_build.py (it imports this module, never the reverse).

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
- Morphemes are Kiwi's with X+하/되 joined into one predicate (인정/NNG
  하/XSV → 인정하/VV; kjax/morph/predicates.py), as the thesis's analyser
  gives them, so rule 3 (`동의하/VV → [동의, 하##]`) applies; `하##` and
  `되##` are always in a built vocabulary.
- "Syllables" are characters (kjax/tokens/characters.py): Hangul syllables
  and jamo, symbols and emoji become `@c` tokens when seen often enough in
  *all* morphemes of the training text — at least `min_syllable_count`
  times and at least `min_syllable_share` of all syllable occurrences
  (default 1e-8: the thesis's 50 in its ≈5·10⁹ syllables, 16.2 GB; on any
  corpus under 10⁸ syllables every syllable seen is kept). Runs of Hanja →
  one `[CHC]`, runs of other-script letters → one `[OTL]`.
- Fallbacks, so a vocabulary built here has no [UNK] for lack of a
  syllable: an unseen Hangul syllable is spelled by its jamo (`@ᄇ @ᅰ @ᆰ`),
  an unseen symbol/emoji by its Unicode category (`[SYM:So]`); see
  characters.py. A vocabulary without those tokens (hand-made, or built by
  an older kjax) keeps §2.1's rule: one unknown character makes the whole
  morpheme a single `[UNK]`.
"""
from __future__ import annotations

import functools
import json
import os
import re
import unicodedata
from typing import Sequence

import numpy as np

from kjax import paths
from kjax.errors import KjaxError
from kjax.morph.analyzer import KoreanAnalyzer, Morpheme
from kjax.morph.predicates import JOINED_SUFFIXES, join_derived_predicates
from kjax.morph.tags import PREDICATE_TAGS, TAGS, base_tag, tag_id
from kjax.tokens.characters import (CHC, JAMO_TOKENS, OTL, SYLLABLE, SYMBOL_TOKENS, char_class,
                                    fold, jamo_of, symbol_token)
from kjax.tokens.morphemes import MorphemeEncoding
from kjax.tokens.sentencepiece import (CLS, MASK, PAD, SEP, SPECIAL_TOKENS, TOKEN_ARRAYS,
                                       UNK)

UNK_TOKEN = "[UNK]"
CONT = "##"          # continuation mark (§2.1)
DIGITS = "0123456789"
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
DIGIT_TOKENS = (*DIGITS, *(d + CONT for d in DIGITS), "," + CONT, "." + CONT)
BASE_TOKENS = (*SPECIAL_TOKENS, CHC, OTL, *DIGIT_TOKENS, *LETTERS)
# Always added by `build`, but not required of a vocabulary file (see the doc).
FALLBACK_TOKENS = (*JAMO_TOKENS, *SYMBOL_TOKENS, *(x + CONT for x in JOINED_SUFFIXES))
FORMAT = "kjax-multihot-vocab"
_NUMBER = re.compile(r"[0-9]+(?:[.,][0-9]+)*")
_APPEND_CONT = PREDICATE_TAGS | {"XPN", "XSV", "XSA"}


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


def _number_or_latin(form: str) -> list[str] | None:
    """§2.2 step 2: digit or letter tokens, or None if not a number/Latin word."""
    folded = "".join(fold(c) for c in form)
    if _NUMBER.fullmatch(folded):
        return [folded] if len(folded) == 1 else [c + CONT for c in folded]
    if folded.isascii() and folded.isalpha():
        return list(folded)
    return None


def _shadows_char_rules(token: str) -> bool:
    """True for tokens §2.1's character rules must produce instead."""
    core = token_surface(token)
    classes = {char_class(c) for c in core}
    if classes & {"hanja", "other", "space", "ignorable"}:
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
                and form[-1] in JOINED_SUFFIXES and form[-1] + CONT in self._index):
            head = [form[:-1]] if form[:-1] in self._index else self._characters(form[:-1])
            return [UNK_TOKEN] if head is None else head + [form[-1] + CONT]
        chars = self._characters(form)                  # step 4: syllables
        return [UNK_TOKEN] if chars is None else chars

    def _characters(self, text: str) -> list[str] | None:
        """Character tokens with the fallbacks of characters.py; None when a
        character has neither a token nor a fallback in this vocabulary."""
        out: list[str] = []
        several = len(text) > 1
        for c in text:
            kind = char_class(c)
            if kind == "digit":
                out.append(fold(c) + CONT if several else fold(c))
            elif kind == "latin":
                out.append(fold(c))
            elif kind in ("hanja", "other"):
                mark = CHC if kind == "hanja" else OTL
                if not out or out[-1] != mark:
                    out.append(mark)
            elif kind == "hangul":
                if SYLLABLE + c in self._index:
                    out.append(SYLLABLE + c)
                    continue
                jamo = [SYLLABLE + j for j in jamo_of(c) or ()]
                if not jamo or not all(j in self._index for j in jamo):
                    return None
                out += jamo
            elif kind == "symbol":
                if SYLLABLE + c in self._index:
                    out.append(SYLLABLE + c)
                    continue
                mark = symbol_token(c)
                if mark not in self._index:
                    return None
                if not out or out[-1] != mark:
                    out.append(mark)
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


class MultihotTokenizer(MorphemeEncoding):
    """Sentence → per-token arrays for the multi-hot input (§2.3): `morph` is
    the morpheme index (the model position), `inpos` the token's place in it.
    Its morphemes are Kiwi's with X+하/되 joined (`self.analyzer` joins them,
    so callers that index morphemes by `morph` get the same list)."""
    scheme = "multihot"
    PAD, UNK, CLS, SEP, MASK = PAD, UNK, CLS, SEP, MASK

    def __init__(self, vocab: MultihotVocab | str, analyzer: KoreanAnalyzer | None = None):
        self.vocab = MultihotVocab.load(vocab) if isinstance(vocab, str) else vocab
        self.analyzer = (analyzer or KoreanAnalyzer()).joining_predicates()

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def id_to_token(self, i: int) -> str:
        return self.vocab.id_to_token(i)

    def token_to_id(self, token: str) -> int:
        return self.vocab.token_to_id(token)

    def encode_morphemes(self, morphemes: Sequence[Morpheme]) -> dict[str, np.ndarray]:
        """Kiwi's morphemes → per-token arrays; `morph` indexes the list with
        X+하/되 joined (the analyzer's own output is joined already)."""
        ids, morph, inpos, tags, eojeol = [], [], [], [], []
        for k, m in enumerate(join_derived_predicates(morphemes)):
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
        material (jamo-spelled syllables included); [UNK], [CHC], [OTL] and
        [SYM:*] come back as themselves."""
        out: list[tuple[str, str]] = []
        last = None
        for i, k, t in zip(encoded["ids"], encoded["morph"], encoded["tag"]):
            surface = token_surface(self.vocab.id_to_token(i))
            if k == last:
                out[-1] = (out[-1][0] + surface, out[-1][1])
            else:
                out.append((surface, TAGS[int(t)]))
                last = k
        return [(unicodedata.normalize("NFC", form), tag) for form, tag in out]

    def decode(self, ids) -> str:
        """Tokens joined by spaces (morpheme boundaries need `decode_morphemes`)."""
        return " ".join(self.vocab.id_to_token(i) for i in ids)
