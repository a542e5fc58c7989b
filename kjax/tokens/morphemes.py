"""What the morpheme schemes (`morph-sp`, `multihot`) share: text goes
through Kiwi first, then the scheme turns the morphemes into tokens."""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np


class MorphemeEncoding:
    """`encode` / `encode_many` for a tokenizer with `self.analyzer` (a
    KoreanAnalyzer) and `encode_morphemes(morphemes) -> per-token arrays`."""

    def encode(self, sentence: str) -> dict[str, np.ndarray]:
        return self.encode_morphemes(self.analyzer.analyze(sentence))

    def encode_many(self, sentences: Iterable[str],
                    num_workers: int | None = None) -> Iterator[dict[str, np.ndarray]]:
        for morphemes in self.analyzer.analyze_many(sentences, num_workers):
            yield self.encode_morphemes(morphemes)
