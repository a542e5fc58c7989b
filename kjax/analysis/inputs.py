"""Texts → model inputs for the analysis, with what the statistics need per
model position: a readable label, a token class and the postposition →
substantive pairs.

A text is one sentence (`[CLS] text [SEP]`) or, with a tab, a pair
(`[CLS] A [SEP] B [SEP]`, token types 0/1), as in pretraining. Positions are
the input mode's (kjax/inputs): tokens, morphemes for the multi-hot input
(METHODS §2.3), merged substantive + postposition positions (§1.5, 6), with
the mode's position ids (shared positions, §1.5, 5).

Token classes (per key position j):
  [CLS], [SEP]   the special tokens
  punctuation    POS tag SF SP SS SSO SSC SE SO SW; for a token without a tag
                 (plain sentencepiece), text made only of Unicode punctuation
                 or symbol characters
  postposition   J*            substantive   NNG NNP NNB NP NR
  other          everything else ([UNK], predicates, endings, ...)
"""
from __future__ import annotations

import dataclasses
import unicodedata

import numpy as np

from kjax.config.load import copy_of
from kjax.examples.pairs import assemble
from kjax.inputs import InputMode, input_mode
from kjax.morph.tags import TAGS, base_tag, is_postposition, is_substantive
from kjax.shake.matrix import GROUP1, GROUP2, build_shake_matrix, pos_pairs
from kjax.tokens.sentencepiece import CLS, SEP, TOKEN_ARRAYS, WORD_START, special_ids

CLASSES = ("[CLS]", "[SEP]", "punctuation", "postposition", "substantive", "other")
PUNCTUATION_TAGS = frozenset({"SF", "SP", "SS", "SSO", "SSC", "SE", "SO", "SW"})
POSTPOSITION_WEIGHTS = {t: 1.0 for t in GROUP1 + GROUP2}   # every J* tag


@dataclasses.dataclass
class AnalysisText:
    text: str
    example: dict          # token-level arrays as `assemble` names them
    positions: dict        # per model position: input_ids, word_ids, morph_ids, tags, token_type_ids
    labels: list[str]      # per model position
    classes: np.ndarray    # index into CLASSES, per model position
    postpositions: list    # (query positions, substantive positions) per postposition
    truncated: bool
    mode: InputMode        # kjax/inputs: how its tokens became these positions

    @property
    def length(self) -> int:
        return len(self.labels)


def _is_punctuation_text(text: str) -> bool:
    text = text.replace(WORD_START, "")   # a bare word-start piece is not punctuation
    return bool(text) and all(unicodedata.category(c)[0] in "PS" for c in text)


def token_class(token_id: int, tag_id: int, label: str, cls: int = CLS, sep: int = SEP) -> int:
    if token_id == cls:
        return CLASSES.index("[CLS]")
    if token_id == sep:
        return CLASSES.index("[SEP]")
    tag = base_tag(TAGS[tag_id])
    if tag in PUNCTUATION_TAGS or (tag_id == 0 and _is_punctuation_text(label)):
        return CLASSES.index("punctuation")
    if tag and is_postposition(tag):
        return CLASSES.index("postposition")
    if tag and is_substantive(tag):
        return CLASSES.index("substantive")
    return CLASSES.index("other")


def _piece_text(tokenizer, token_id: int) -> str:
    piece = tokenizer.id_to_token(int(token_id))
    if tokenizer.scheme == "multihot":
        from kjax.tokens.multihot import token_surface
        return token_surface(piece)
    return piece.replace(WORD_START, "") or piece


def _cut(encoded: dict, n: int) -> dict:
    return {k: v[:n] for k, v in encoded.items()}


def _fit(a: dict, b: dict | None, max_len: int) -> tuple[dict, dict | None, bool]:
    """Drops tokens from the end of the longer side until the sequence fits."""
    budget = max_len - (3 if b is not None else 2)
    la, lb = len(a["ids"]), len(b["ids"]) if b is not None else 0
    truncated = la + lb > budget
    while la + lb > budget:
        if la >= lb:
            la -= 1
        else:
            lb -= 1
    return _cut(a, la), (_cut(b, lb) if b is not None else None), truncated


def encode_text(tokenizer, text: str, max_len: int, mode: InputMode | None = None
                ) -> AnalysisText:
    """One text as the model sees it under `mode` (default onehot)."""
    mode = mode or input_mode("onehot")
    parts = text.split("\t", 1)
    a = tokenizer.encode(parts[0].strip())
    b = tokenizer.encode(parts[1].strip()) if len(parts) == 2 else None
    a, b, truncated = _fit(a, b, max_len)
    empty = {k: np.zeros(0, np.int32) for k in TOKEN_ARRAYS}
    example = assemble(a, b if b is not None else empty, 0, (0, 0))
    if b is None:  # assemble always closes B with a [SEP]: drop it for a single sentence
        example = {k: (v[:-1] if v.ndim else v) for k, v in example.items()}
    specials = special_ids(tokenizer)   # an imported vocabulary keeps its own [CLS]/[SEP]
    ids = example["input_ids"]
    seps = [1 + len(a["ids"])] + ([len(ids) - 1] if b is not None else [])
    ids[0], ids[seps] = specials["cls"], specials["sep"]
    positions, groups = mode.positions(example)   # per model position, and its tokens
    labels = ["".join(_piece_text(tokenizer, t) for t in ids[group]) for group in groups]
    classes = np.asarray([token_class(int(t), int(g), s, specials["cls"], specials["sep"])
                          for t, g, s in zip(positions["input_ids"], positions["tags"], labels)],
                         np.int32)
    pairs = [(q, k) for q, k, _ in pos_pairs(positions["morph_ids"], positions["word_ids"],
                                             positions["tags"], POSTPOSITION_WEIGHTS)]
    return AnalysisText(text, example, positions, labels, classes, pairs, truncated, mode)


def shake_matrix(item: AnalysisText, seq_len: int, shake_cfg, seed: int) -> np.ndarray:
    """B for the shaken run: the config's variant (the random one seeded by the
    text's index, so a report is reproducible); POS pairs when the config has
    none (a `--bf` on a model pretrained without shaking)."""
    if shake_cfg.variant == "none":
        shake_cfg = copy_of(shake_cfg)
        shake_cfg.variant = "pos"
    return build_shake_matrix(item.positions, seq_len, shake_cfg, np.random.default_rng(seed))


def model_batch(items: list[AnalysisText], first_index: int, seq_len: int, config,
                shaken: bool) -> dict:
    """Padded model inputs [b, seq_len] for a batch of texts (keyword arguments
    of `BertForPreTraining.encode`)."""
    rows = []
    for offset, item in enumerate(items):
        row = item.mode.position_batch(item.example, seq_len)
        ids = item.mode.position_ids(item.positions, config, seq_len)   # as it was trained
        row["position_ids"] = ids if ids is not None else np.arange(seq_len, dtype=np.int32)
        if shaken:
            row["shake"] = shake_matrix(item, seq_len, config.shake, first_index + offset)
        rows.append(row)
    return _stack(rows)


def _stack(rows: list[dict]) -> dict:
    out = {}
    for key, value in rows[0].items():
        if isinstance(value, dict):
            out[key] = _stack([r[key] for r in rows])
        else:
            out[key] = np.stack([r[key] for r in rows])
    return out
