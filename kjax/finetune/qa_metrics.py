"""Extractive QA scores: exact match and F1, the maximum over a question's
gold answers, averaged over questions (reported as fractions, 0–1).

    exact_match   KorQuAD v1.0's official EM (its normalisation, below)
    f1            KorQuAD v1.0's official F1: **character** level — the
                  normalised answer's characters, whitespace dropped, as a bag.
                  This is the F1 the UKnowBERT thesis reports (METHODS §2.7:
                  KorQuAD F1 80.11, 84.11, ...), so it is the primary metric.
    squad_f1      SQuAD v1.1's F1 over whitespace tokens (same normalisation):
                  much lower on Korean, where an answer rarely lines up with
                  whole eojeol; reported for comparison with English work.

KorQuAD's normalisation: the quote and bracket marks ' " 《 》 < > 〈 〉 ( ) ‘ ’
become spaces, then lower-casing, ASCII punctuation removed, whitespace
collapsed. Unanswerable questions (KLUE-MRC) have the gold answer "": an
empty prediction scores 1, anything else 0 (SQuAD 2.0's rule);
`has_answer_f1` / `no_answer_accuracy` split the two kinds when both occur.
"""
from __future__ import annotations

import collections
import re
import string
from typing import Sequence

_MARKS = re.compile(r"['\"《》<>〈〉()‘’]")
_PUNCT = set(string.punctuation)


def normalize(text: str) -> str:
    text = _MARKS.sub(" ", text).lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    return " ".join(text.split())


def exact_match(pred: str, gold: str) -> float:
    return float(normalize(pred) == normalize(gold))


def _bag_f1(pred: list, gold: list) -> float:
    if not pred or not gold:
        return float(pred == gold)              # both empty: 1 (unanswerable done right)
    same = sum((collections.Counter(pred) & collections.Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def char_f1(pred: str, gold: str) -> float:
    """KorQuAD v1.0: characters of the normalised text, spaces excluded."""
    return _bag_f1(list(normalize(pred).replace(" ", "")), list(normalize(gold).replace(" ", "")))


def token_f1(pred: str, gold: str) -> float:
    """SQuAD v1.1: whitespace tokens of the normalised text."""
    return _bag_f1(normalize(pred).split(), normalize(gold).split())


def qa_metrics(gold: Sequence[Sequence[str]], pred: Sequence[str]) -> dict:
    def best(score, p, answers):
        return max(score(p, g) for g in answers)

    em = [best(exact_match, p, g) for p, g in zip(pred, gold)]
    f1 = [best(char_f1, p, g) for p, g in zip(pred, gold)]
    out = {"f1": _mean(f1), "exact_match": _mean(em),
           "squad_f1": _mean([best(token_f1, p, g) for p, g in zip(pred, gold)])}
    empty = [list(g) == [""] for g in gold]
    if any(empty):
        out["has_answer_f1"] = _mean([f for f, e in zip(f1, empty) if not e])
        out["no_answer_accuracy"] = _mean([m for m, e in zip(em, empty) if e])
    return out


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
