"""POS tag inventory: the tags Kiwi (kiwipiepy 0.24) emits, with fixed ids.

Id 0 is reserved for tokens that carry no POS ([PAD], [CLS], [SEP], ... and
tokenizers without an analyser), so `E_postag` (METHODS §2.3, Eq. 4) can zero
it out like padding. The order below is part of every saved dataset and model:
append new tags at the end, never reorder.

Kiwi marks conjugation classes with suffixes (`VA-I` irregular, `VV-R`
regular); they are stripped: the tag ids name the POS only.
"""
from __future__ import annotations

NO_TAG = ""  # id 0: special tokens / no analyser

# Kiwi's tag list (kiwipiepy.utils._valid_tags, documentation "품사 태그").
KIWI_TAGS = (
    "NNG", "NNP", "NNB", "NR", "NP",            # 체언 (substantives)
    "VV", "VA", "VX", "VCP", "VCN",             # 용언 (predicates)
    "MM", "MAG", "MAJ", "IC",                   # 관형사, 부사, 감탄사
    "JKS", "JKC", "JKG", "JKO", "JKB", "JKV", "JKQ", "JX", "JC",   # 조사
    "EP", "EF", "EC", "ETN", "ETM",             # 어미 (endings)
    "XPN", "XSN", "XSV", "XSA", "XSM", "XR",    # 접사, 어근
    "SF", "SP", "SS", "SSO", "SSC", "SE", "SO", "SW", "SB",        # 부호
    "SL", "SH", "SN", "UN",                     # 외국어, 한자, 숫자, 분석 불능
    "W_URL", "W_EMAIL", "W_HASHTAG", "W_MENTION", "W_SERIAL", "W_EMOJI",
    "Z_CODA", "Z_SIOT",                         # 덧붙은 받침, 사이시옷
    "USER0", "USER1", "USER2", "USER3", "USER4",
)
# Sejong's adnominal subtypes: Kiwi emits plain MM, but METHODS §1.3 group 3
# names MMA/MMD/MMN, and other analysers' data (knowledge files) may use them.
SEJONG_EXTRA_TAGS = ("MMA", "MMD", "MMN")

TAGS: tuple[str, ...] = (NO_TAG, *KIWI_TAGS, *SEJONG_EXTRA_TAGS)
NUM_TAGS = len(TAGS)
_TAG_TO_ID = {t: i for i, t in enumerate(TAGS)}

SUBSTANTIVE_TAGS = frozenset({"NNG", "NNP", "NNB", "NP", "NR"})   # METHODS §1.1
PREDICATE_TAGS = frozenset({"VV", "VA", "VX", "VCP", "VCN"})      # METHODS §2.1


def _strip_class(tag: str) -> str:
    if tag.endswith("-R") or tag.endswith("-I"):
        return tag[:-2]
    return tag


_BASE_TAGS = {t: _strip_class(t) for t in TAGS}


def base_tag(tag: str) -> str:
    """`VV-R`/`VA-I` → `VV`/`VA`: the conjugation-class suffix is not a POS.
    (A dict lookup for the known tags: the loader calls this per token.)"""
    base = _BASE_TAGS.get(tag)
    return base if base is not None else _strip_class(tag)


def is_known_tag(tag: str) -> bool:
    return base_tag(tag) in _TAG_TO_ID


def tag_id(tag: str) -> int:
    """Fixed id of a tag (suffixes stripped); `""` → 0. Unknown tags raise:
    a silent fallback would merge a new Kiwi tag into another's embedding."""
    try:
        return _TAG_TO_ID[base_tag(tag)]
    except KeyError:
        raise ValueError(
            f"unknown POS tag {tag!r} (kjax/morph/tags.py knows {NUM_TAGS - 1} tags); "
            f"if a newer Kiwi added it, append it to KIWI_TAGS") from None


def tag_name(i: int) -> str:
    if not 0 <= i < NUM_TAGS:
        raise ValueError(f"tag id {i} out of range 0..{NUM_TAGS - 1}")
    return TAGS[i]


def is_substantive(tag: str) -> bool:
    """체언 NNG NNP NNB NP NR: the keys of postposition attention (§1.3)."""
    return base_tag(tag) in SUBSTANTIVE_TAGS


def is_postposition(tag: str) -> bool:
    """조사 J*: the queries of postposition attention (§1.3)."""
    return base_tag(tag).startswith("J")


def is_predicate(tag: str) -> bool:
    """용언 VV VA VX VCP VCN (§2.1 rewrite rule, §2.5 verb relation)."""
    return base_tag(tag) in PREDICATE_TAGS


def is_ending(tag: str) -> bool:
    """어미 E* (EP EF EC ETN ETM)."""
    return base_tag(tag).startswith("E")


def is_prefix_or_adnominal(tag: str) -> bool:
    """XPN and MM/MMA/MMD/MMN: §1.3 group 3 (they modify the next noun)."""
    t = base_tag(tag)
    return t == "XPN" or t.startswith("MM")


def pos_class(tag: str) -> str:
    """Coarse class for statistics: 'noun' | 'predicate' | 'other'."""
    if is_substantive(tag):
        return "noun"
    if is_predicate(tag):
        return "predicate"
    return "other"
