"""Named entities (KLUE-NER), `ner`: the head reads every position,
h_t → dropout → dense(num_labels); cross-entropy over labelled positions;
entity_f1 (micro, primary), entity_macro_f1, char_macro_f1, scored as
KLUE-NER does (kjax/finetune/metrics.py). Labels are BIO tags per character
(kjax/finetune/bio.py), moved to tokens when encoded and back to characters
when decoded. Listed in kjax/finetune/registry.py; the contract is
kjax/finetune/contract.py.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from kjax.errors import KjaxError
from kjax.finetune import metrics as M
from kjax.finetune.bio import (OUTSIDE, split_tag, tags_to_spans, token_to_char_tags)
from kjax.finetune.contract import Task
from kjax.finetune.readers import Example, ner_tags, read_generic, read_klue_ner

if TYPE_CHECKING:   # jax loads when a step is built, not when the CLI parses
    import jax


class NamedEntities(Task):
    name = "ner"
    token_labels = True
    per_position = True
    metric_names = ("entity_f1", "entity_macro_f1", "char_macro_f1")
    primary = "entity_f1"

    def detect_format(self, path: str) -> str:
        kind = super().detect_format(path)
        return kind if kind in ("json", "jsonl") else "klue-ner"

    def read(self, path: str, fmt: str) -> list[Example]:
        if fmt == "klue-ner":
            return list(read_klue_ner(path))
        return super().read(path, fmt) if fmt == "squad" else read_generic(path, self, fmt)

    def from_record(self, rec, text_a, text_b, guid, where) -> Example:
        return Example(guid, text_a, None, None, ner_tags(rec, text_a, where), where)

    def check(self, ex: Example) -> None:
        if len(ex.char_tags) != len(ex.text_a):
            raise KjaxError(f"{ex.where}: {len(ex.char_tags)} tags for {len(ex.text_a)} "
                            f"characters; give one tag per character")
        bad = [t for t in ex.char_tags if t != OUTSIDE and split_tag(t)[0] == OUTSIDE]
        if bad:
            raise KjaxError(f"{ex.where}: tag {bad[0]!r} is not BIO (O, B-TYPE, I-TYPE)")

    def label_names(self, splits) -> list[str]:
        kinds = sorted({split_tag(t)[1] for part in splits for ex in part
                        for t in ex.char_tags} - {""})
        return [OUTSIDE] + [f"{p}-{k}" for k in kinds for p in "BI"]

    def loss(self, outputs: jax.Array, batch: dict, group: int = 1) -> jax.Array:
        """Mean cross-entropy over labelled tokens of real examples."""
        import jax.numpy as jnp
        import optax
        w, labels = batch["weights"], batch["labels"]
        ce = optax.softmax_cross_entropy_with_integer_labels(outputs, jnp.maximum(labels, 0))
        mask = (labels >= 0) * w[:, None]
        return (ce * mask).sum() / jnp.maximum(mask.sum(), 1.0)

    def gold(self, examples: Sequence[Example]) -> list:
        return [list(e.char_tags) for e in examples]

    def decode_row(self, tuner, feats, i: int, pred):
        spans = feats.token_spans[i]
        names = tuner.data.label_names
        tags = [names[t] for t in token_predictions(feats, i, pred, names)]
        return token_to_char_tags(feats.texts[i], tags[1:1 + len(spans)], spans)

    def prediction_row(self, ex: Example, pred) -> dict:
        return {"text": ex.text_a, "gold": _entities(ex.text_a, tags_to_spans(ex.char_tags)),
                "pred": _entities(ex.text_a, tags_to_spans(pred)), "pred_tags": pred}

    def metrics(self, gold, pred, label_names=(), sts_threshold: float = 3.0) -> dict:
        scores = M.entity_scores(gold, pred)
        scores["char_macro_f1"] = M.char_macro_f1(gold, pred, label_names)
        return scores

    def baseline(self, train_gold, eval_gold) -> list:
        return [[OUTSIDE] * len(tags) for tags in eval_gold]


def token_predictions(feats, row: int, pred, names: list[str]) -> list[int]:
    """Per token of `row`, the label id predicted at the position it feeds; a
    B- label continues as I- over the later tokens of the same position."""
    owner = feats.token_position[row] if feats.token_position is not None else \
        np.arange(len(pred))
    n = int(feats.lengths[row])
    out = []
    for t in range(n):
        label = int(pred[owner[t]])
        if t and owner[t] == owner[t - 1] and names[label].startswith("B-"):
            label = names.index("I-" + names[label][2:])
        out.append(label)
    return out


def _entities(text: str, spans) -> list:
    return [[s, e, t, text[s:e]] for s, e, t in spans]
