"""Word in context (NIKL WiC), `wic`: two sentences sharing a target word;
does it mean the same in both? The head reads the pair's pooled [CLS] and,
per sentence, the mean hidden state over the positions holding the target
word: dense([tanh(pooler(h_CLS)); mean h(target in s1); mean h(target in s2)]).
Scored by accuracy (primary) and macro F1, as a pair task.

NIKL's TSV: ID, Target, SENTENCE1, SENTENCE2, ANSWER (True/False),
start_s1, end_s1, start_s2, end_s2 (character offsets, end exclusive).
"""
from __future__ import annotations

import unicodedata
from typing import Sequence

import numpy as np

from kjax.errors import KjaxError
from kjax.finetune.alignment import map_spans, nfc_with_offsets, token_char_spans
from kjax.finetune.contract import PairTask
from kjax.finetune.features import Features
from kjax.finetune.readers import Example, record_label

SPAN_KEYS = ("start_s1", "end_s1", "start_s2", "end_s2")


class WordInContext(PairTask):
    name = "wic"

    def from_record(self, rec, text_a, text_b, guid, where) -> Example:
        if not isinstance(text_b, str):
            return super().from_record(rec, text_a, text_b, guid, where)
        label = self.parse_label(record_label(rec, where), where)
        return Example(guid, text_a, text_b, label, None, where,
                       target_spans=target_spans(rec, text_a, text_b, where))

    def encode(self, tokenizer, splits, names, ft, pos_from_kiwi) -> dict:
        features = super().encode(tokenizer, splits, names, ft, pos_from_kiwi)
        for k, feats in features.items():   # the target word's tokens in each sentence
            add_target_masks(tokenizer, splits[k], feats)
        return features


def target_spans(rec: dict, text_a: str, text_b: str, where: str) -> tuple:
    """((start, end) in sentence 1, (start, end) in sentence 2) of a record."""
    try:
        s1, e1, s2, e2 = (int(rec[k]) for k in SPAN_KEYS)
    except (KeyError, TypeError, ValueError):
        raise KjaxError(f"{where}: --task wic needs integer columns "
                        f"{', '.join(SPAN_KEYS)} (the target word's character span "
                        f"in each sentence)") from None
    for (s, e), text, n in (((s1, e1), text_a, 1), ((s2, e2), text_b, 2)):
        if not 0 <= s < e <= len(text):
            raise KjaxError(f"{where}: target span [{s}, {e}) lies outside sentence {n} "
                            f"({len(text)} characters)")
    return (s1, e1), (s2, e2)


def _spans(tokenizer, text: str) -> list[tuple[int, int]]:
    nfc, starts, ends = nfc_with_offsets(text)
    encoded, spans = token_char_spans(tokenizer, nfc)
    return map_spans(spans, starts, ends)


def add_target_masks(tokenizer, examples: Sequence[Example], feats: Features) -> None:
    """feats.target_mask [n, 2, seq]: the row's tokens overlapping the target
    word in sentence 1 and in sentence 2 (after the pair's truncation)."""
    n, seq = feats.input_ids.shape
    mask = np.zeros((n, 2, seq), bool)
    for r, ex in enumerate(examples):
        types = feats.token_type_ids[r, :feats.lengths[r]]
        keep_a, keep_b = int((types == 0).sum()) - 2, int((types == 1).sum()) - 1
        for k, (text, offset, keep) in enumerate(((ex.text_a, 1, keep_a),
                                                   (unicodedata.normalize("NFC", ex.text_b),
                                                    keep_a + 2, keep_b))):
            start, end = ex.target_spans[k]
            for i, (s, e) in enumerate(_spans(tokenizer, text)[:keep]):
                mask[r, k, offset + i] = e > s and s < end and e > start
        if not mask[r].any(axis=1).all():
            raise KjaxError(f"{ex.where}: the target word was cut by finetune.max_seq_len="
                            f"{seq}; raise it")
    feats.target_mask = mask

