"""`kjax tokenizer stats`: how a tokenizer cuts Korean morphemes, on any
corpus — the analogues of METHODS §2.2's reported figures (Tables 3 and 8):

    [UNK] rate            share of tokens that are [UNK] (and of morphemes holding one)
    split morphemes       share of Kiwi morphemes covered by more than one token,
                          by POS class (kjax.morph.tags.pos_class: noun,
                          predicate, other) and overall
    token sets            morph-sp / multihot: share of morphemes encoded as a
                          set of >= 2 tokens (multihot's §2.2 token sets)
    crossing pieces       plain sentencepiece: share of pieces that overlap two
                          morphemes (a piece like ▁했다 spans 하+었+다)
    bare ▁ tokens         share of tokens that are a bare "▁" (a word start
                          sentencepiece could not attach to a piece)

morph-sp and multihot assign every token to one morpheme, so their splits are
read off the per-token `morph` array and no token crosses a boundary. Plain
sentencepiece knows nothing of morphemes: its pieces are aligned to Kiwi's by
character offsets in the same normalised text. A morpheme is split when more
than one piece overlaps it; a piece crosses when it overlaps two morphemes.
Morphemes that share one span (했 → 하/VV + 었/EP both on "했") are one unit
for the alignment, since no piece could separate them; zero-width morphemes
(이/VCP after a vowel) are overlapped by no piece and count as not split.

Bare "▁" pieces count the same way in both sentencepiece schemes: as tokens
(each takes a model position), never as a piece of a morpheme. Plain
sentencepiece's "▁" covers the space before a word, which no morpheme
overlaps; morph-sp assigns it to the morpheme that starts the word, so it
is taken out of that morpheme's count here. multihot's morphemes are its
own (X+하/되 joined, kjax/morph/predicates.py), as its analyser gives them.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Iterable, Iterator

import numpy as np

from kjax.morph.analyzer import KoreanAnalyzer, Morpheme
from kjax.morph.tags import pos_class
from kjax.text.corpus import CorpusStats, iter_sentences, resolve_corpus
from kjax.tokens.sentencepiece import UNK, WORD_START

POS_CLASSES = ("noun", "predicate", "other")
_BATCH = 512  # sentences analysed per Kiwi call


@dataclasses.dataclass
class ClassCounts:
    morphemes: int = 0
    split: int = 0          # covered by more than one token
    with_unk: int = 0       # at least one of its tokens is [UNK]


@dataclasses.dataclass
class TokenizerStats:
    scheme: str
    sentences: int = 0
    chars: int = 0
    tokens: int = 0
    unk_tokens: int = 0
    crossing_tokens: int = 0    # pieces overlapping two morpheme spans (sentencepiece)
    bare_space_tokens: int = 0  # bare "▁" pieces (sentencepiece, morph-sp)
    by_class: dict = dataclasses.field(
        default_factory=lambda: {c: ClassCounts() for c in POS_CLASSES})

    def add_morpheme(self, tag: str, n_tokens: int, has_unk: bool) -> None:
        c = self.by_class[pos_class(tag)]
        c.morphemes += 1
        c.split += n_tokens > 1
        c.with_unk += has_unk

    def total(self) -> ClassCounts:
        return ClassCounts(*(sum(getattr(c, f) for c in self.by_class.values())
                             for f in ("morphemes", "split", "with_unk")))

    def summary(self) -> dict:
        """Counts and shares, JSON-ready."""
        share = lambda part, whole: part / whole if whole else 0.0  # noqa: E731
        rows = {**self.by_class, "all": self.total()}
        out = {"scheme": self.scheme, "sentences": self.sentences, "chars": self.chars,
               "morphemes": rows["all"].morphemes, "tokens": self.tokens,
               "tokens_per_morpheme": share(self.tokens, rows["all"].morphemes),
               "unk_token_rate": share(self.unk_tokens, self.tokens),
               "bare_space_share": share(self.bare_space_tokens, self.tokens),
               "unk_morpheme_rate": share(rows["all"].with_unk, rows["all"].morphemes),
               "split_share": {k: share(c.split, c.morphemes) for k, c in rows.items()},
               "counts": {k: dataclasses.asdict(c) for k, c in rows.items()}}
        if self.scheme == "sentencepiece":
            out["token_set_share"] = None     # pieces are not assigned to morphemes
            out["crossing_share"] = share(self.crossing_tokens, self.tokens)
        else:
            out["token_set_share"] = out["split_share"]["all"]
            out["crossing_share"] = 0.0       # by construction
        out["unk_tokens"], out["crossing_tokens"] = self.unk_tokens, self.crossing_tokens
        out["bare_space_tokens"] = self.bare_space_tokens
        return out


def _char_offsets(text: str, byte_offsets: np.ndarray) -> np.ndarray:
    """UTF-8 byte offsets (at character starts, or len) → character offsets."""
    if text.isascii():
        return byte_offsets
    raw = np.frombuffer(text.encode("utf-8"), np.uint8)
    char_of_byte = np.append(np.cumsum((raw & 0xC0) != 0x80) - 1, len(text))
    return char_of_byte[byte_offsets]


def piece_spans(text: str, pieces) -> tuple[np.ndarray, np.ndarray]:
    """Character [begin, end) of sentencepiece pieces (its proto gives bytes)."""
    if not len(pieces):
        return np.zeros(0, int), np.zeros(0, int)
    offsets = _char_offsets(text, np.asarray([[p.begin, p.end] for p in pieces]).reshape(-1))
    return offsets[0::2], offsets[1::2]


def align_pieces(begin: np.ndarray, end: np.ndarray, morphemes: list[Morpheme]):
    """Pieces' character spans vs morphemes of the same text →
    (pieces overlapping each morpheme [m], morpheme spans each piece overlaps [p])."""
    spans = sorted({(m.start, m.end) for m in morphemes if m.end > m.start})
    if not spans or not len(begin):
        return np.zeros(len(morphemes), int), np.zeros(len(begin), int)
    starts, ends = np.asarray(spans).T
    overlap = (begin[:, None] < ends[None, :]) & (starts[None, :] < end[:, None])  # [p, span]
    per_span = dict(zip(spans, overlap.sum(0).tolist()))
    per_morpheme = np.asarray([per_span.get((m.start, m.end), 0) for m in morphemes], int)
    return per_morpheme, overlap.sum(1)


def _batches(sentences: Iterable[str]) -> Iterator[list[str]]:
    it = iter(sentences)
    while batch := list(itertools.islice(it, _BATCH)):
        yield batch


def measure(tokenizer, sentences: Iterable[str],
            analyzer: KoreanAnalyzer | None = None) -> TokenizerStats:
    """Statistics of `tokenizer` (any kjax scheme) over `sentences`."""
    analyzer = getattr(tokenizer, "analyzer", None) or analyzer or KoreanAnalyzer()
    stats = TokenizerStats(tokenizer.scheme)
    bare = bare_space_id(tokenizer)
    for batch in _batches(sentences):
        texts = [analyzer.prepare(s) for s in batch]   # the text offsets refer to
        stats.sentences += len(texts)
        stats.chars += sum(map(len, texts))
        analyses = analyzer.analyze_many(texts)
        if tokenizer.scheme == "sentencepiece":
            protos = tokenizer.sp.encode(texts, return_type="proto")
            for text, morphemes, proto in zip(texts, analyses, protos):
                _add_aligned(stats, text, morphemes, proto.pieces)
        else:
            for morphemes in analyses:
                _add_encoded(stats, morphemes, tokenizer.encode_morphemes(morphemes), bare)
    return stats


def bare_space_id(tokenizer) -> int:
    """The id of the bare "▁" piece, -1 if the vocabulary has none (multihot's
    never has: its BPE pieces lose the mark)."""
    if tokenizer.scheme == "multihot":
        return -1
    i = int(tokenizer.token_to_id(WORD_START))
    return -1 if i == UNK else i


def _add_aligned(stats: TokenizerStats, text: str, morphemes, pieces) -> None:
    ids = np.asarray([p.id for p in pieces], int)
    stats.tokens += len(ids)
    stats.unk_tokens += int((ids == UNK).sum())
    stats.bare_space_tokens += sum(p.piece == WORD_START for p in pieces)
    begin, end = piece_spans(text, pieces)
    per_morpheme, per_piece = align_pieces(begin, end, morphemes)
    stats.crossing_tokens += int((per_piece > 1).sum())
    unk_spans = list(zip(begin[ids == UNK].tolist(), end[ids == UNK].tolist()))
    for m, n in zip(morphemes, per_morpheme):
        has_unk = any(b < m.end and m.start < e for b, e in unk_spans)
        stats.add_morpheme(m.tag, int(n), has_unk)


def _add_encoded(stats: TokenizerStats, morphemes, encoded: dict, bare: int = -1) -> None:
    ids, morph = encoded["ids"], encoded["morph"]
    stats.tokens += len(ids)
    stats.unk_tokens += int((ids == UNK).sum())
    stats.bare_space_tokens += int((ids == bare).sum())
    counts = np.bincount(morph, weights=ids != bare, minlength=len(morphemes)).astype(int)
    unk = np.bincount(morph, weights=ids == UNK, minlength=len(morphemes)) > 0
    for m, n, has_unk in zip(morphemes, counts, unk):
        stats.add_morpheme(m.tag, int(n), bool(has_unk))


def corpus_stats(config, corpus: str | None = None, max_sentences: int | None = None) -> dict:
    """`kjax tokenizer stats`: the configured tokenizer on `corpus` (default
    data.corpus), at most `max_sentences` sentences."""
    from kjax.tokens.factory import open_tokenizer, tokenizer_file
    spec = corpus or config.data.corpus
    tokenizer = open_tokenizer(config)
    reading = CorpusStats()
    sentences = iter_sentences(resolve_corpus(spec, config.data.tfds_data_dir or None), reading)
    if max_sentences:
        sentences = itertools.islice(sentences, max_sentences)
    out = measure(tokenizer, sentences).summary()
    out.update(tokenizer=tokenizer_file(config), vocab_size=tokenizer.vocab_size, corpus=spec,
               skipped_lines=reading.skipped)
    return out
