"""Examples → fixed-shape model inputs, and batches (with SHAKE's B) from them.

    single  [CLS] a [SEP]            token types 0
    pair    [CLS] a [SEP] b [SEP]    token types 0 … 0 1 … 1; longest-first truncation

Every token keeps its unit ids (`word_ids` eojeol, `morph_ids` morpheme, `tags`
POS; -1/-1/0 for [CLS]/[SEP]/padding); segment b's unit ids continue after
a's, so no unit spans both sentences. They are what `build_shake_matrix`
reads (METHODS §1.3). B itself is built per batch on the host: it is
[seq, seq] per example, too big to keep for a whole dataset.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from kjax.errors import KjaxError
from kjax.finetune.alignment import (align_morphemes, map_spans, nfc_with_offsets,
                                     token_char_spans)
from kjax.finetune.bio import char_to_token_tags, tags_to_spans
from kjax.finetune.readers import Example
from kjax.text.normalize import normalize
from kjax.tokens.sentencepiece import special_ids

UNIT_KEYS = ("word_ids", "morph_ids", "tags", "inpos")
UNIT_PAD = {"word_ids": -1, "morph_ids": -1, "tags": 0, "inpos": 0}
SHAKE_BUILDER = None   # tests may install a stand-in; None = kjax.shake.matrix's


@dataclasses.dataclass
class Features:
    input_ids: np.ndarray           # [n, seq] int32
    token_type_ids: np.ndarray
    attention_mask: np.ndarray
    units: dict[str, np.ndarray]    # word_ids / morph_ids / tags, [n, seq] int32
    labels: np.ndarray              # [n] int32 | [n] float32 | ner: [n, seq] int32, -1 = no loss
    lengths: np.ndarray             # [n] real tokens, specials included
    texts: list[str]                # ner: the text token_spans index
    token_spans: list[list[tuple[int, int]]]   # ner: per kept token (specials excluded)
    truncated: int = 0              # examples that lost tokens to max_seq_len
    aligned_tokens: float = 0.0     # POS from Kiwi: share of tokens lined up with a morpheme
    position_ids: np.ndarray | None = None   # [n, seq] when the input mode sets them
    inputs: dict | None = None      # the input mode's model arrays per row (finetune_inputs)
    token_position: np.ndarray | None = None   # [n, seq] the position each token feeds, -1
    b_view: object = None           # the input mode's finetune_b_view (B over its positions)
    label_kind: str = "example"     # "example" | "tokens" (ner) | "span" (qa: [n, 2] start/end)
    example_index: np.ndarray | None = None   # qa: the question each row (window) belongs to
    group_size: int = 1             # choice: rows per example (one per alternative)
    target_mask: np.ndarray | None = None   # wic: [n, 2, seq] the target word in a and in b

    def __len__(self) -> int:
        return len(self.input_ids)


def _units(encoded: dict, offset: dict) -> dict[str, np.ndarray]:
    out = {}
    for key, src in (("word_ids", "eojeol"), ("morph_ids", "morph"), ("tags", "tag"),
                     ("inpos", "inpos")):
        a = np.asarray(encoded.get(src, np.zeros(len(encoded["ids"]))), np.int32)
        out[key] = a if key in ("tags", "inpos") else \
            np.where(a >= 0, a + offset.get(key, 0), -1)
    return out


def _truncate_pair(n_a: int, n_b: int, budget: int) -> tuple[int, int]:
    while n_a + n_b > budget:    # BERT's longest-first
        if n_a >= n_b:
            n_a -= 1
        else:
            n_b -= 1
    return n_a, n_b


class Encoder:
    """Tokenizes examples of one task; `pos_from_kiwi` lines plain
    sentencepiece tokens up with Kiwi morphemes for POS shaking."""

    def __init__(self, tokenizer, task, label_names: Sequence[str], max_seq_len: int,
                 pos_from_kiwi: bool = False):
        # `task`: a task object (kjax/finetune/contract.py; the registry's
        # finetune_task(name) gives it): its labels are per token or per example
        self.tokenizer, self.task, self.seq = tokenizer, task, max_seq_len
        specials = special_ids(tokenizer)   # an imported vocabulary keeps its own ids
        self.cls, self.sep, self.pad = specials["cls"], specials["sep"], specials["pad"]
        self.label_index = {name: i for i, name in enumerate(label_names)}
        self.analyzer = None
        if pos_from_kiwi:
            from kjax.morph.analyzer import KoreanAnalyzer
            self.analyzer = KoreanAnalyzer()
        self.aligned = [0, 0]

    def _tokenize(self, text: str) -> tuple[dict, list[tuple[int, int]] | None]:
        if not self.task.token_labels and self.analyzer is None:
            return self.tokenizer.encode(text), None
        encoded, spans = token_char_spans(self.tokenizer, text)
        if self.analyzer is not None:
            from kjax.morph.tags import tag_id
            morph, tags = align_morphemes(text, spans, self.analyzer.analyze(text), tag_id)
            encoded = {**encoded, "morph": morph, "tag": tags}
            self.aligned[0] += int((morph >= 0).sum())
            self.aligned[1] += len(morph)
        return encoded, spans

    def encode(self, examples: Sequence[Example]) -> Features:
        n, s = len(examples), self.seq
        arrays = {k: np.zeros((n, s), np.int32) for k in ("input_ids", "token_type_ids",
                                                           "attention_mask")}
        arrays["input_ids"][:] = self.pad
        units = {k: np.full((n, s), UNIT_PAD[k], np.int32) for k in UNIT_KEYS}
        labels = (np.full((n, s), -1, np.int32) if self.task.token_labels else
                  np.zeros(n, self.task.label_dtype))
        lengths, texts, all_spans, truncated = np.zeros(n, np.int32), [], [], 0
        for row, ex in enumerate(examples):
            # The model reads kjax's normalised text (NFC, then one-for-one
            # replacements: kjax/text/normalize.py); NER's spans are mapped back
            # to the characters as given.
            text_a, starts, ends = nfc_with_offsets(ex.text_a)
            text_a = normalize(text_a)
            a, spans = self._tokenize(text_a)
            if spans is not None:
                spans = map_spans(spans, starts, ends)
            b = (self._tokenize(normalize(ex.text_b))[0]
                 if ex.text_b is not None else None)
            n_a, n_b = len(a["ids"]), len(b["ids"]) if b is not None else 0
            keep_a, keep_b = _truncate_pair(n_a, n_b, s - (3 if b is not None else 2))
            truncated += (keep_a, keep_b) != (n_a, n_b)
            ua = {k: v[:keep_a] for k, v in _units(a, {}).items()}
            ids = [self.cls, *a["ids"][:keep_a], self.sep]
            types = [0] * len(ids)
            unit_rows = {k: [UNIT_PAD[k], *ua[k], UNIT_PAD[k]] for k in UNIT_KEYS}
            if b is not None:
                shift = {k: int(ua[k].max(initial=-1)) + 1 for k in ("word_ids", "morph_ids")}
                ub = {k: v[:keep_b] for k, v in _units(b, shift).items()}
                ids += [*b["ids"][:keep_b], self.sep]
                types += [1] * (keep_b + 1)
                for k in UNIT_KEYS:
                    unit_rows[k] += [*ub[k], UNIT_PAD[k]]
            length = len(ids)
            lengths[row] = length
            arrays["input_ids"][row, :length] = ids
            arrays["token_type_ids"][row, :length] = types
            arrays["attention_mask"][row, :length] = 1
            for k in UNIT_KEYS:
                units[k][row, :length] = unit_rows[k]
            if self.task.token_labels:
                spans = spans[:keep_a]
                token_tags = char_to_token_tags(ex.text_a, tags_to_spans(ex.char_tags), spans)
                labels[row, 1:1 + keep_a] = [self._label(t, ex) for t in token_tags]
                texts.append(ex.text_a)
                all_spans.append(spans)
            else:
                labels[row] = self.task.encode_label(self, ex)
        aligned = self.aligned[0] / max(self.aligned[1], 1) if self.analyzer else 0.0
        return Features(arrays["input_ids"], arrays["token_type_ids"],
                        arrays["attention_mask"], units, labels, lengths, texts, all_spans,
                        truncated, aligned,
                        label_kind="tokens" if self.task.token_labels else "example")

    def _label(self, name: str, ex: Example) -> int:
        if name not in self.label_index:
            raise KjaxError(f"{ex.where}: label {name!r} is not among the task's labels "
                            f"({', '.join(self.label_index)})")
        return self.label_index[name]


def shake_builder():
    if SHAKE_BUILDER is not None:
        return SHAKE_BUILDER
    try:
        from kjax.shake.matrix import build_shake_matrix
    except ImportError as e:
        raise KjaxError(f"shaking needs kjax/shake/matrix.py (build_shake_matrix), which "
                        f"this checkout lacks ({e}); set --config.finetune.shake.bf_train=0 "
                        f"and bf_infer=0, or update kjax") from None
    return build_shake_matrix


def shake_matrices(feats: Features, rows: np.ndarray, shake_cfg, seed_parts: Sequence[int],
                   real: np.ndarray) -> np.ndarray:
    """B [len(rows), seq, seq]; the random variant draws from a
    generator seeded by (seed_parts, row), so a resumed run draws the same."""
    build = shake_builder()
    seq = feats.input_ids.shape[1]
    out = None
    for i, (row, keep) in enumerate(zip(rows, real)):
        if not keep:
            continue
        n = int(feats.lengths[row])
        encoded = {"input_ids": feats.input_ids[row, :n],
                   "token_type_ids": feats.token_type_ids[row, :n],
                   **{k: feats.units[k][row, :n] for k in UNIT_KEYS}}
        if feats.b_view is not None:   # B over the input mode's positions
            encoded = feats.b_view(encoded)
        rng = np.random.default_rng([*seed_parts, int(row)])
        b = build(encoded, seq, shake_cfg, rng=rng)
        if out is None:   # the builder's dtype (float8 e4m3 in kjax.shake: one byte per pair)
            out = np.zeros((len(rows), seq, seq), b.dtype)
        out[i] = b
    return out if out is not None else np.zeros((len(rows), seq, seq), np.float32)


def make_batch(feats: Features, rows: Sequence[int], shake_cfg=None,
               seed_parts: Sequence[int] = ()) -> dict[str, np.ndarray]:
    """The batch of `rows`; a row of -1 is padding (a weight-0 copy of row 0),
    which keeps shapes fixed. `shake` is added when `shake_cfg` is given."""
    rows = np.asarray(rows, np.int64)
    real = rows >= 0
    rows = np.where(real, rows, 0)
    if feats.inputs is not None:         # the input mode's arrays (kjax/inputs finetune_inputs)
        batch = {k: v[rows] for k, v in feats.inputs.items()}
    else:
        batch = {"input_ids": feats.input_ids[rows],
                 "token_type_ids": feats.token_type_ids[rows],
                 "attention_mask": feats.attention_mask[rows]}
        if feats.position_ids is not None:
            batch["position_ids"] = feats.position_ids[rows]
    batch.update(labels=feats.labels[rows], weights=real.astype(np.float32))
    if feats.target_mask is not None:    # wic: over the mode's positions (apply_input_mode)
        batch["target_mask"] = feats.target_mask[rows]
    if shake_cfg is not None:
        batch["shake"] = shake_matrices(feats, rows, shake_cfg, seed_parts, real)
    return batch


def apply_input_mode(feats: Features, mode, config, seq_len: int) -> None:
    """The input mode's model arrays for `feats`, and its token labels moved
    to the mode's positions (a position takes the label of its first token)."""
    rows = {"input_ids": feats.input_ids, "token_type_ids": feats.token_type_ids,
            "attention_mask": feats.attention_mask, **feats.units}
    feats.inputs, feats.token_position = mode.finetune_inputs(rows, feats.lengths, seq_len,
                                                               config)
    feats.position_ids = feats.inputs.get("position_ids")
    feats.b_view = mode.finetune_b_view
    if feats.target_mask is not None:               # wic: token masks → position masks
        feats.target_mask = masks_to_positions(feats.target_mask, feats.token_position)
    if feats.label_kind == "span":                  # start/end token → its position
        feats.labels = np.take_along_axis(feats.token_position, feats.labels, axis=1)
    elif feats.label_kind == "tokens":              # token labels (NER)
        first = first_tokens(feats.token_position)
        feats.labels = np.where(first >= 0, np.take_along_axis(
            feats.labels, np.maximum(first, 0), axis=1), -1).astype(np.int32)


def first_tokens(token_position: np.ndarray) -> np.ndarray:
    """[n, seq]: the first token of each position, -1 where no token feeds it."""
    n, s = token_position.shape
    first = np.full((n, s), -1, np.int64)
    for r in range(n):
        pos = token_position[r]
        tok = np.flatnonzero(pos >= 0)[::-1]         # reversed: the first write wins last
        first[r, pos[tok]] = tok
    return first


def last_tokens(token_position: np.ndarray) -> np.ndarray:
    """[n, seq]: the last token of each position, -1 where no token feeds it."""
    n, s = token_position.shape
    last = np.full((n, s), -1, np.int64)
    for r in range(n):
        tok = np.flatnonzero(token_position[r] >= 0)
        last[r, token_position[r, tok]] = tok
    return last


def masks_to_positions(token_mask: np.ndarray, token_position: np.ndarray) -> np.ndarray:
    """[n, k, seq] token masks (wic: the target word in a and in b) → masks
    over the input mode's positions."""
    out = np.zeros_like(token_mask)
    for r in range(token_mask.shape[0]):
        for k in range(token_mask.shape[1]):
            out[r, k, token_position[r][token_mask[r, k]]] = True
    return out
