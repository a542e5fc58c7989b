"""Extractive question answering (KorQuAD v1.0, KLUE-MRC; SQuAD-style JSON).

    read_squad      {"data": [{"title", "paragraphs": [{"context", "qas": [{"id",
                    "question", "answers": [{"text", "answer_start"}],
                    "is_impossible"?, "plausible_answers"?}]}]}]}
    QAEncoder       one question → windows of its context (doc stride), each
                    row [CLS] question [SEP] context window [SEP]; the answer's
                    character span → the row's start/end token (or [CLS] when
                    the window does not hold the whole answer, or the question
                    has none)
    decode_answers  per question, the best span over its windows: the n-best
                    start and end positions of each window, end ≥ start, at
                    most `max_answer_len` positions; the text is the context's
                    characters from the start position's first token to the
                    end position's last token. With unanswerable questions in
                    the training data (KLUE-MRC), "" wins when the [CLS] score
                    s₀ + e₀ (its lowest over the windows) beats the best span.

Positions are the input mode's: a multi-hot model points at morphemes, so
labels move from tokens to positions (features.apply_input_mode) and
answers come back through the tokens of the chosen positions.
Unanswerable questions train towards [CLS]; their plausible answers are not
used (as SQuAD 2.0 baselines do).

    QuestionAnswering  the task `qa` (listed in kjax/finetune/registry.py):
                    h_t → dropout → dense(2), start and end logits per
                    position; f1 (KorQuAD's character F1, primary),
                    exact_match, squad_f1 (kjax/finetune/qa_metrics.py)
"""
from __future__ import annotations

import json
import unicodedata
from typing import TYPE_CHECKING, Sequence

import numpy as np

from kjax import paths
from kjax.errors import KjaxError
from kjax.finetune.alignment import map_spans, nfc_with_offsets, token_char_spans
from kjax.finetune.contract import NoLabelNames
from kjax.finetune.features import UNIT_KEYS, UNIT_PAD, Features, _units, first_tokens, last_tokens
from kjax.finetune.qa_metrics import qa_metrics
from kjax.finetune.readers import Example
from kjax.tokens.sentencepiece import special_ids

if TYPE_CHECKING:   # jax loads when a step is built, not when the CLI parses
    import jax

NO_SPAN = (-1, -1)


def read_squad(path: str) -> list[Example]:
    """Every question of a SQuAD-style file, its answers as (start, text)."""
    try:
        with paths.open_file(path, "r", encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise KjaxError(f"{path}: not valid JSON ({e.msg} at line {e.lineno} column "
                        f"{e.colno}); --task qa reads SQuAD-style JSON") from None
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list):
        raise KjaxError(f"{path}: --task qa needs SQuAD-style JSON: an object whose 'data' "
                        f"is a list of articles with 'paragraphs' (KorQuAD, KLUE-MRC)")
    out = []
    for a, article in enumerate(articles):
        group = str(article.get("title", a))
        for p, para in enumerate(article.get("paragraphs", [])):
            where = f"{path} (article {a}, paragraph {p})"
            context = para.get("context")
            if not isinstance(context, str) or "qas" not in para:
                raise KjaxError(f"{where}: a paragraph needs 'context' (a string) and 'qas'")
            for qa in para["qas"]:
                out.append(_question(qa, context, group, where))
    if not out:
        raise KjaxError(f"{path}: no questions found; check the file (SQuAD-style JSON)")
    return out


def _question(qa: dict, context: str, group: str, where: str) -> Example:
    qid = str(qa.get("id", qa.get("guid", "")))
    where = f"{where} question {qid}"
    if not isinstance(qa.get("question"), str):
        raise KjaxError(f"{where}: no 'question' (a string)")
    impossible = bool(qa.get("is_impossible", False))
    answers = []
    for ans in [] if impossible else qa.get("answers", []):
        start, text = ans.get("answer_start"), ans.get("text")
        if not isinstance(start, int) or not isinstance(text, str) or not text:
            raise KjaxError(f"{where}: an answer needs 'text' and an integer 'answer_start'")
        if context[start:start + len(text)] != text:
            raise KjaxError(f"{where}: answer {text!r} is not at answer_start {start} of its "
                            f"context (found {context[start:start + len(text)]!r}); fix "
                            f"answer_start")
        answers.append((start, text))
    if not impossible and not answers:
        raise KjaxError(f"{where}: no answers; give 'answers' or set \"is_impossible\": true")
    return Example(qid, qa["question"], context, tuple(answers), None, where,
                   group=group, impossible=impossible)


def _nfc_tokens(tokenizer, text: str) -> tuple[dict, list[tuple[int, int]]]:
    nfc, starts, ends = nfc_with_offsets(text)
    encoded, spans = token_char_spans(tokenizer, nfc)
    return encoded, map_spans(spans, starts, ends)


def answer_tokens(spans: Sequence[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    """First and last token overlapping characters [start, end) (-1, -1: none)."""
    hit = [i for i, (s, e) in enumerate(spans) if e > s and s < end and e > start]
    return (hit[0], hit[-1]) if hit else NO_SPAN


class QAEncoder:
    def __init__(self, tokenizer, max_seq_len: int, doc_stride: int, max_query_len: int):
        self.tokenizer, self.seq = tokenizer, max_seq_len
        specials = special_ids(tokenizer)   # an imported vocabulary keeps its own ids
        self.cls, self.sep, self.pad = specials["cls"], specials["sep"], specials["pad"]
        self.stride, self.max_query = doc_stride, max_query_len
        self._contexts = {}

    def _context(self, text: str):
        if text not in self._contexts:   # many questions share one paragraph
            self._contexts[text] = _nfc_tokens(self.tokenizer, text)
        return self._contexts[text]

    def windows(self, n_context: int, budget: int) -> list[tuple[int, int]]:
        out, start = [], 0
        while True:
            end = min(start + budget, n_context)
            out.append((start, end))
            if end >= n_context:
                return out
            start += min(self.stride, budget)

    def encode(self, examples: Sequence[Example]) -> Features:
        rows = []
        for index, ex in enumerate(examples):
            q = self.tokenizer.encode(unicodedata.normalize("NFC", ex.text_a))
            n_q = min(len(q["ids"]), self.max_query)
            c, spans = self._context(ex.text_b)
            budget = self.seq - n_q - 3
            if budget < 1:
                raise KjaxError(f"finetune.max_seq_len={self.seq} leaves no room for the "
                                f"context after a {n_q}-token question; raise it or lower "
                                f"finetune.max_query_len")
            answer = NO_SPAN
            if ex.label:
                start, text = ex.label[0]
                answer = answer_tokens(spans, start, start + len(text))
            for lo, hi in self.windows(len(c["ids"]), budget):
                rows.append(self._row(index, q, n_q, c, spans, lo, hi, answer))
        return self._stack(rows, len(examples))

    def _row(self, index, q, n_q, c, spans, lo, hi, answer) -> dict:
        uq = {k: v[:n_q] for k, v in _units(q, {}).items()}
        shift = {k: int(uq[k].max(initial=-1)) + 1 for k in ("word_ids", "morph_ids")}
        uc = {k: v[lo:hi] for k, v in _units(c, shift).items()}
        offset = n_q + 2                          # [CLS] question [SEP]
        ids = [self.cls, *q["ids"][:n_q], self.sep, *c["ids"][lo:hi], self.sep]
        label = (0, 0)                            # [CLS]: no (whole) answer in this window
        if answer != NO_SPAN and lo <= answer[0] and answer[1] < hi:
            label = (answer[0] - lo + offset, answer[1] - lo + offset)
        return {"index": index, "ids": ids, "types": [0] * offset + [1] * (hi - lo + 1),
                "units": {k: [UNIT_PAD[k], *uq[k], UNIT_PAD[k], *uc[k], UNIT_PAD[k]]
                          for k in UNIT_KEYS},
                "spans": [NO_SPAN] * offset + list(spans[lo:hi]) + [NO_SPAN], "label": label}

    def _stack(self, rows: list[dict], n_examples: int) -> Features:
        n, s = len(rows), self.seq
        arrays = {k: np.zeros((n, s), np.int32) for k in ("ids", "types", "mask")}
        units = {k: np.full((n, s), UNIT_PAD[k], np.int32) for k in UNIT_KEYS}
        arrays["ids"][:] = self.pad
        lengths = np.zeros(n, np.int32)
        for r, row in enumerate(rows):
            m = lengths[r] = len(row["ids"])
            arrays["ids"][r, :m], arrays["types"][r, :m], arrays["mask"][r, :m] = \
                row["ids"], row["types"], 1
            for k in UNIT_KEYS:
                units[k][r, :m] = row["units"][k]
        labels = np.asarray([row["label"] for row in rows], np.int32).reshape(n, 2)
        feats = Features(arrays["ids"], arrays["types"], arrays["mask"], units, labels, lengths,
                         [], [row["spans"] for row in rows])
        feats.label_kind = "span"
        feats.example_index = np.asarray([row["index"] for row in rows], np.int64)
        feats.truncated = n - n_examples          # qa: windows beyond one per question
        return feats


def decode_answers(feats: Features, outputs: Sequence[np.ndarray], examples: Sequence[Example],
                   n_best: int = 20, max_answer_len: int = 30, allow_null: bool = False
                   ) -> list[str]:
    """The predicted answer text of each example ("" = unanswerable)."""
    first, last = first_tokens(feats.token_position), last_tokens(feats.token_position)
    best = [(-np.inf, "") for _ in examples]
    null = [np.inf] * len(examples)
    for row, logits in enumerate(outputs):
        e = int(feats.example_index[row])
        spans = feats.token_spans[row]
        starts, ends = np.asarray(logits[:, 0], np.float64), np.asarray(logits[:, 1], np.float64)
        null[e] = min(null[e], starts[0] + ends[0])
        context = np.asarray([f >= 0 and spans[f] != NO_SPAN for f in first[row]])
        candidates = np.flatnonzero(context)
        if not len(candidates):
            continue
        top_s = candidates[np.argsort(-starts[candidates], kind="stable")[:n_best]]
        top_e = candidates[np.argsort(-ends[candidates], kind="stable")[:n_best]]
        for ps in top_s:
            for pe in top_e:
                if pe < ps or pe - ps + 1 > max_answer_len:
                    continue
                score = starts[ps] + ends[pe]
                if score > best[e][0]:
                    lo, hi = spans[first[row, ps]][0], spans[last[row, pe]][1]
                    best[e] = (score, examples[e].text_b[lo:hi])
    return ["" if allow_null and null[i] > best[i][0] else best[i][1]
            for i in range(len(examples))]


def gold_answers(examples: Sequence[Example]) -> list[list[str]]:
    """Every gold answer text per question; [""] for an unanswerable one."""
    return [[""] if ex.impossible else [t for _, t in ex.label] for ex in examples]


class QuestionAnswering(NoLabelNames):
    name = "qa"
    per_position = True
    metric_names = ("f1", "exact_match", "squad_f1")
    primary = "f1"

    def detect_format(self, path: str) -> str:
        return "squad"

    def read(self, path: str, fmt: str) -> list[Example]:
        if fmt != "squad":
            raise KjaxError(f"{path}: --task qa reads SQuAD-style JSON (KorQuAD, KLUE-MRC; "
                            f"--format squad) and --format squad is only for --task qa")
        return read_squad(path)

    def encode(self, tokenizer, splits, names, ft, pos_from_kiwi) -> dict:
        encode = QAEncoder(tokenizer, ft.max_seq_len, ft.doc_stride, ft.max_query_len).encode
        return {k: encode(v) for k, v in splits.items()}

    def num_outputs(self, num_labels: int) -> int:
        return 2

    def loss(self, outputs: jax.Array, batch: dict, group: int = 1) -> jax.Array:
        """Start and end over the row's positions (padding excluded)."""
        import jax.numpy as jnp
        import optax
        w, labels = batch["weights"], batch["labels"]
        logits = jnp.where(batch["attention_mask"][..., None] > 0, outputs, -1e9)
        ce = sum(optax.softmax_cross_entropy_with_integer_labels(logits[..., i], labels[:, i])
                 for i in (0, 1)) / 2
        return (ce * w).sum() / jnp.maximum(w.sum(), 1.0)

    def predictions(self, outputs: jax.Array, group: int = 1) -> jax.Array:
        return outputs

    def gold(self, examples: Sequence[Example]) -> list:
        return gold_answers(examples)

    def decode(self, tuner, split: str, feats, outputs: list) -> list:
        """Windows → one answer per question."""
        allow_null = any(ex.impossible for ex in tuner.data.examples["train"])
        return decode_answers(feats, outputs, tuner.data.examples[split], tuner.ft.n_best,
                              tuner.ft.max_answer_len, allow_null)

    def prediction_row(self, ex: Example, pred) -> dict:
        return {"question": ex.text_a, "gold": [t for _, t in ex.label or ()],
                "impossible": ex.impossible, "pred": pred}

    def metrics(self, gold, pred, label_names=(), sts_threshold: float = 3.0) -> dict:
        return qa_metrics(gold, pred)

    def baseline(self, train_gold, eval_gold) -> list:
        return [""] * len(eval_gold)
