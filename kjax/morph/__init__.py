"""Korean morphology: Kiwi analysis (`analyzer`) and the POS tag inventory (`tags`)."""
from kjax.morph.analyzer import (AnalyzerStats, KoreanAnalyzer, Morpheme, get_kiwi,
                                 normalize_coda, normalize_text)
from kjax.morph.tags import NUM_TAGS, TAGS, base_tag, pos_class, tag_id

__all__ = ["AnalyzerStats", "KoreanAnalyzer", "Morpheme", "get_kiwi", "normalize_coda",
           "normalize_text", "NUM_TAGS", "TAGS", "base_tag", "pos_class", "tag_id"]
