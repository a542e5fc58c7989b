"""Kiwi morphological analysis → `Morpheme` lists with eojeol indices.

The morphemes feed the SHAKE attention pairs (METHODS §1.3: a postposition and
the substantive before it *inside the same eojeol*) and the morpheme-unit
tokenizers (§2.1–2.3). What Kiwi really returns, and how it is kept:

- spans may overlap or be empty: 했다 → 하/XSV 었/EP 다/EF with 하 and 었
  both on "했"; 가나다 → 가나/NNP 이/VCP(len 0) 다/EF. Offsets are kept as
  Kiwi gives them; the eojeol of a morpheme is the whitespace word holding its
  *start*, so a contracted morpheme stays in its word.
- forms are lemmas, not surface text (간 → 가/VV ᆫ/ETM, 고마운 → 고맙/VA 은/ETM),
  with final consonants as conjoining jamo (ᆫ, ᆯ); `normalize_coda` maps those
  to compatibility jamo (ㄴ, ㄹ) when a caller needs them.
- `VV-R`/`VA-I` suffixes are stripped (tags.base_tag); Kiwi-only tags (W_URL,
  W_EMOJI, Z_CODA, ...) are kept; a tag this kjax does not know becomes UN and
  is counted.

Offsets index `normalize_text(text)` (kjax/text/normalize.py, the one
normalisation of kjax): NFC, every whitespace/control character
→ " " and lone surrogates → U+FFFD (both one for one, so the NFC text's
offsets still hold). Kiwi crashes on lone surrogates and treats some control
characters as symbols; after this, "whitespace" means the same to Kiwi and to
the eojeol split.
"""
from __future__ import annotations

import bisect
import copy
import dataclasses
import os
import re
import threading
from typing import Iterable, Iterator

from kjax.morph.predicates import join_derived_predicates
from kjax.text.normalize import normalize_text  # noqa: F401 (morph's API too)
from kjax.morph.tags import base_tag, is_known_tag

DEFAULT_MAX_CHARS = 10_000  # no sentence is this long; Kiwi slows down past it
LONG_TEXT_POLICIES = ("truncate", "skip")
_WORD = re.compile(r"[^ ]+")

# Jongseong (final consonant) jamo U+11A8..U+11C2 in order → compatibility jamo.
_JONGSEONG_COMPAT = "ㄱㄲㄳㄴㄵㄶㄷㄹㄺㄻㄼㄽㄾㄿㅀㅁㅂㅄㅅㅆㅇㅈㅊㅋㅌㅍㅎ"
_CODA_TABLE = {0x11A8 + i: c for i, c in enumerate(_JONGSEONG_COMPAT)}


@dataclasses.dataclass(frozen=True)
class Morpheme:
    form: str     # as Kiwi gives it (lemma; codas as conjoining jamo)
    tag: str      # base tag: VV-I → VV
    start: int    # char offsets in normalize_text(text); start == end is possible
    end: int
    eojeol: int   # index of the whitespace word holding `start`


@dataclasses.dataclass
class AnalyzerStats:
    texts: int = 0
    empty: int = 0            # nothing left after normalisation
    truncated: int = 0        # longer than max_chars, cut (policy "truncate")
    skipped_long: int = 0     # longer than max_chars, dropped (policy "skip")
    replaced_chars: int = 0   # control / surrogate characters replaced
    unknown_tags: int = 0     # Kiwi tags missing from tags.py, mapped to UN


def normalize_coda(form: str) -> str:
    """ᆫ/ᆯ/ᆸ... (jongseong jamo, as in 가/VV ᆫ/ETM) → ㄴ/ㄹ/ㅂ (compatibility
    jamo). Not Kiwi's `normalize_coda` flag, which splits typed-on codas."""
    return form.translate(_CODA_TABLE)


def eojeol_starts(text: str) -> list[int]:
    """Start offsets of the space-separated words of a normalised text."""
    return [m.start() for m in _WORD.finditer(text)]


_KIWIS: dict[tuple[int, int], object] = {}
_KIWI_LOCK = threading.Lock()


def get_kiwi(num_workers: int = 1):
    """One Kiwi per (process, num_workers): construction takes seconds and
    ~0.5 GB. Keyed by pid so a forked worker builds its own (Kiwi's threads
    do not survive fork)."""
    key = (os.getpid(), num_workers)
    with _KIWI_LOCK:
        kiwi = _KIWIS.get(key)
        if kiwi is None:
            from kiwipiepy import Kiwi  # lazy: importing loads the model
            # num_workers=0 is single-threaded and cannot batch; -1 = all cores.
            # No multi-word dictionary: a morpheme never spans two eojeols.
            kiwi = Kiwi(num_workers=num_workers, load_multi_dict=False)
            kiwi.tokenize("")  # finish Kiwi's lazy initialisation now
            _KIWIS[key] = kiwi
        return kiwi


class KoreanAnalyzer:
    """Sentence → list[Morpheme]. Never raises on text content: empty,
    symbol-only, NUL-laden or huge inputs give [] or a truncated analysis and
    are counted in `self.stats`."""

    def __init__(self, num_workers: int = 1, max_chars: int = DEFAULT_MAX_CHARS,
                 long_text: str = "truncate", compatible_jamo: bool = False,
                 join_predicates: bool = False):
        if num_workers == 0 or num_workers < -1:
            raise ValueError(f"KoreanAnalyzer(num_workers={num_workers}): use -1 (all "
                             f"cores) or >= 1; Kiwi cannot batch with 0 workers")
        if long_text not in LONG_TEXT_POLICIES:
            raise ValueError(f"KoreanAnalyzer(long_text={long_text!r}): choose one of "
                             f"{LONG_TEXT_POLICIES}")
        if max_chars < 1:
            raise ValueError(f"KoreanAnalyzer(max_chars={max_chars}): must be >= 1")
        self.num_workers = num_workers
        self.max_chars = max_chars
        self.long_text = long_text
        self.compatible_jamo = compatible_jamo
        # X+하/되 as one predicate (kjax/morph/predicates.py): the multi-hot scheme's view.
        self.join_predicates = join_predicates
        self.stats = AnalyzerStats()

    def joining_predicates(self) -> "KoreanAnalyzer":
        """This analyzer with join_predicates on (a copy sharing its stats)."""
        if self.join_predicates:
            return self
        other = copy.copy(self)
        other.join_predicates = True
        return other

    @property
    def kiwi(self):
        return get_kiwi(self.num_workers)

    def prepare(self, text: str) -> str:
        """The exact text that gets analysed (offsets refer to it): normalised,
        then cut to max_chars (or emptied, policy "skip")."""
        text, replaced = normalize_text(text)
        self.stats.texts += 1
        self.stats.replaced_chars += replaced
        if len(text) > self.max_chars:
            if self.long_text == "skip":
                self.stats.skipped_long += 1
                return ""
            self.stats.truncated += 1
            cut = text.rfind(" ", 0, self.max_chars + 1)
            text = text[:cut if cut > self.max_chars // 2 else self.max_chars]
        if not text.strip():
            self.stats.empty += 1
        return text

    def _morphemes(self, tokens, text: str) -> list[Morpheme]:
        starts = eojeol_starts(text)
        out = []
        for t in tokens:
            tag = base_tag(t.tag)
            if not is_known_tag(tag):
                self.stats.unknown_tags += 1
                tag = "UN"
            eojeol = max(bisect.bisect_right(starts, t.start) - 1, 0)
            out.append(Morpheme(t.form, tag, t.start, t.start + t.len, eojeol))
        return join_derived_predicates(out) if self.join_predicates else out

    def analyze(self, text: str) -> list[Morpheme]:
        text = self.prepare(text)
        if not text.strip():
            return []
        return self._morphemes(self._tokenize(text), text)

    def _tokenize(self, text_or_texts, **kw):
        return self.kiwi.tokenize(text_or_texts, compatible_jamo=self.compatible_jamo, **kw)

    def analyze_many(self, texts: Iterable[str],
                     num_workers: int | None = None) -> Iterator[list[Morpheme]]:
        """Lazily analyses many texts in order with Kiwi's own thread pool
        (`num_workers` threads; default: this analyzer's)."""
        kiwi_workers = self.num_workers if num_workers is None else num_workers
        if kiwi_workers == 0 or kiwi_workers < -1:
            raise ValueError(f"analyze_many(num_workers={num_workers}): use -1 or >= 1")
        kiwi = get_kiwi(kiwi_workers)
        prepared = (self.prepare(t) for t in texts)
        for tokens, text in kiwi.tokenize(prepared, echo=True,
                                          compatible_jamo=self.compatible_jamo):
            yield self._morphemes(tokens, text) if text.strip() else []

    def split_sentences(self, text: str) -> list[str]:
        """Kiwi's sentence split (for NSP documents). Long texts are split in
        max_chars chunks at spaces first, so nothing is lost or slow."""
        text, _ = normalize_text(text)
        sentences = []
        for chunk in _chunks(text, self.max_chars):
            if chunk.strip():
                sentences += [s.text.strip() for s in self.kiwi.split_into_sents(chunk)
                              if s.text.strip()]
        return sentences


def _chunks(text: str, size: int) -> Iterator[str]:
    while len(text) > size:
        cut = text.rfind(" ", 0, size + 1)
        cut = cut if cut > size // 2 else size
        yield text[:cut]
        text = text[cut:]
    yield text
