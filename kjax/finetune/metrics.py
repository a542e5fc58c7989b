"""Task metrics, written out (no sklearn/seqeval dependency) and tested
against hand-computed values. Which task reports which (and selects by
which: `primary`) is the task's business (its `metrics`, `primary` and
`baseline`; kjax/finetune/registry.py lists the tasks):

    classify  accuracy, macro_f1                (KLUE-YNAT reports macro F1)
    pair      accuracy, macro_f1                (KLUE-NLI reports accuracy)
    regress   pearson, spearman, f1 at 3.0      (KLUE-STS: Pearson and binary F1)
    ner       entity_f1 (micro), entity_macro_f1, char_macro_f1  (KLUE-NER)
    qa        f1 (KorQuAD's character F1), exact_match, squad_f1   (kjax/finetune/qa_metrics.py)
    choice    accuracy                          (NIKL CoPA)
    wic       accuracy, macro_f1                (NIKL WiC)

NER follows KLUE's scoring: entities decoded strictly (IOB2: only B-X opens
an entity), per sentence; the character-level macro F1 averages the B-/I-
labels, O excluded, a label absent from both gold and prediction counting 1.
"""
from __future__ import annotations

import collections
import math
from typing import Sequence

import numpy as np

from kjax.finetune.bio import OUTSIDE, tags_to_spans


def _f1(tp: float, fp: float, fn: float, empty: float = 0.0) -> float:
    if tp + fp + fn == 0:
        return empty
    return 2 * tp / (2 * tp + fp + fn)


def accuracy(gold: Sequence, pred: Sequence) -> float:
    gold, pred = np.asarray(gold), np.asarray(pred)
    return float((gold == pred).mean()) if len(gold) else 0.0


def macro_f1(gold: Sequence, pred: Sequence, labels: Sequence | None = None) -> float:
    """Mean per-class F1 over `labels` (default: classes seen in gold or pred)."""
    labels = sorted(set(gold) | set(pred)) if labels is None else labels
    scores = []
    for c in labels:
        tp = sum(g == c and p == c for g, p in zip(gold, pred))
        fp = sum(g != c and p == c for g, p in zip(gold, pred))
        fn = sum(g == c and p != c for g, p in zip(gold, pred))
        scores.append(_f1(tp, fp, fn))
    return float(np.mean(scores)) if scores else 0.0


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """None when either side is constant (the correlation is undefined)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if len(x) < 2 or x.min() == x.max() or y.min() == y.max():
        return None   # exactly: x - mean(x) of a constant is rounding noise, not 0
    dx, dy = x - x.mean(), y - y.mean()
    denominator = math.sqrt(float((dx * dx).sum() * (dy * dy).sum()))
    return float((dx * dy).sum() / denominator) if denominator > 0 else None


def average_ranks(x: Sequence[float]) -> np.ndarray:
    """1-based ranks, ties sharing their mean rank (as Spearman needs)."""
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), np.float64)
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    return pearson(average_ranks(x), average_ranks(y))


def binary_f1(gold: Sequence[float], pred: Sequence[float], threshold: float = 3.0) -> float:
    """KLUE-STS's F1: both sides binarised at `threshold` (>= is positive)."""
    g = np.asarray(gold) >= threshold
    p = np.asarray(pred) >= threshold
    return _f1(float((g & p).sum()), float((~g & p).sum()), float((g & ~p).sum()))


def entity_scores(gold_tags: Sequence[Sequence[str]],
                  pred_tags: Sequence[Sequence[str]]) -> dict:
    """Entity-level micro/macro F1 over sentences (strict IOB2 decoding)."""
    counts = collections.defaultdict(lambda: [0, 0, 0])   # type → tp, fp, fn
    for gold, pred in zip(gold_tags, pred_tags):
        g, p = set(tags_to_spans(gold)), set(tags_to_spans(pred))
        for span in g | p:
            counts[span[2]][0 if span in g and span in p else 1 if span in p else 2] += 1
    tp, fp, fn = (sum(c[i] for c in counts.values()) for i in range(3))
    per_type = {t: _f1(*c) for t, c in sorted(counts.items())}
    return {"entity_f1": _f1(tp, fp, fn),
            "entity_precision": tp / (tp + fp) if tp + fp else 0.0,
            "entity_recall": tp / (tp + fn) if tp + fn else 0.0,
            "entity_macro_f1": float(np.mean(list(per_type.values()))) if per_type else 0.0,
            "entity_f1_by_type": per_type}


def char_macro_f1(gold_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]],
                  labels: Sequence[str]) -> float:
    """Character-level macro F1 over the B-/I- `labels` (O excluded)."""
    counts = collections.Counter()
    for gold, pred in zip(gold_tags, pred_tags):
        for g, p in zip(gold, pred):
            if g == p:
                counts[(g, "tp")] += 1
            else:
                counts[(p, "fp")] += 1
                counts[(g, "fn")] += 1
    scores = [_f1(counts[(c, "tp")], counts[(c, "fp")], counts[(c, "fn")], empty=1.0)
              for c in labels if c != OUTSIDE]
    return float(np.mean(scores)) if scores else 0.0

