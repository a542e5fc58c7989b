"""The sentence-level tasks (one prediction per example), registered in
kjax/finetune/registry.py; the contract is kjax/finetune/task.py.

    classify  one sentence, a class (KLUE-YNAT)       accuracy, macro_f1 (primary)
    pair      two sentences, a class (KLUE-NLI)       accuracy (primary), macro_f1
    wic       two sentences sharing a target word     accuracy (primary), macro_f1
              (NIKL WiC): dense([tanh(pooler(h_CLS)); mean h(target in a); in b])
    regress   a score (KLUE-STS): one output, squared error; targets scaled to
              at most 1 (STS 0..5 → 0..1), predictions scaled back
                                                      pearson (primary), spearman,
                                                      f1 at sts_threshold, mse
    choice    a premise and alternatives (NIKL CoPA): one row per alternative,
              one output each, softmax over an example's `group` rows
                                                      accuracy
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from kjax.errors import KjaxError
from kjax.finetune import metrics as M
from kjax.finetune.task import PairTask, Task
from kjax.finetune.tasks import Example, choice_example, record_label

if TYPE_CHECKING:   # jax loads when a step is built, not when the CLI parses
    import jax


class Classify(Task):
    name = "classify"


class Pair(PairTask):
    name = "pair"


class WordInContext(PairTask):
    name = "wic"

    def from_record(self, rec, text_a, text_b, guid, where) -> Example:
        if not isinstance(text_b, str):
            return super().from_record(rec, text_a, text_b, guid, where)
        from kjax.finetune.wic import target_spans
        label = self.parse_label(record_label(rec, where), where)
        return Example(guid, text_a, text_b, label, None, where,
                       target_spans=target_spans(rec, text_a, text_b, where))

    def encode(self, tokenizer, splits, names, ft, pos_from_kiwi) -> dict:
        from kjax.finetune.wic import add_target_masks
        features = super().encode(tokenizer, splits, names, ft, pos_from_kiwi)
        for k, feats in features.items():   # the target word's tokens in each sentence
            add_target_masks(tokenizer, splits[k], feats)
        return features


class NoLabelNames(Task):
    """Tasks whose labels are not class names (scores, choice numbers)."""

    def check(self, ex: Example) -> None:
        pass

    def label_names(self, splits) -> list[str]:
        return []


class Regress(NoLabelNames):
    name = "regress"
    label_dtype = np.float32
    scalar_output = True
    metric_names = ("pearson", "spearman", "f1", "mse")
    primary = "pearson"

    def parse_label(self, value, where: str):
        try:
            return float(value)
        except (TypeError, ValueError):
            raise KjaxError(f"{where}: label {value!r} is not a number; --task regress "
                            f"needs scores (use --task classify/pair for classes)") from None

    def encode_label(self, encoder, ex: Example):
        return float(ex.label)

    def scale_targets(self, features: dict) -> float:
        scale = float(np.abs(features["train"].labels).max()) or 1.0
        for feats in features.values():
            feats.labels = (feats.labels / scale).astype(np.float32)
        return scale

    def num_outputs(self, num_labels: int) -> int:
        return 1

    def loss(self, outputs: jax.Array, batch: dict, group: int = 1) -> jax.Array:
        import jax.numpy as jnp
        w = batch["weights"]
        per_example = (outputs - batch["labels"]) ** 2
        return (per_example * w).sum() / jnp.maximum(w.sum(), 1.0)

    def predictions(self, outputs: jax.Array, group: int = 1) -> jax.Array:
        return outputs

    def decode_row(self, tuner, feats, i: int, pred):
        return float(pred) * tuner.target_scale

    def prediction_row(self, ex: Example, pred) -> dict:
        return {"gold": ex.label, "pred": float(pred)}

    def metrics(self, gold, pred, label_names=(), sts_threshold: float = 3.0) -> dict:
        return {"pearson": M.pearson(gold, pred), "spearman": M.spearman(gold, pred),
                "f1": M.binary_f1(gold, pred, sts_threshold),
                "mse": float(np.mean((np.asarray(gold) - np.asarray(pred)) ** 2))}

    def baseline(self, train_gold: Sequence, eval_gold: Sequence) -> list:
        return [float(np.mean(train_gold))] * len(eval_gold)


class Choice(NoLabelNames):
    name = "choice"
    scalar_output = True
    metric_names = ("accuracy",)
    primary = "accuracy"

    def from_record(self, rec, text_a, text_b, guid, where) -> Example:
        return choice_example(rec, text_a, text_b, record_label(rec, where), guid, where)

    def encode(self, tokenizer, splits, names, ft, pos_from_kiwi) -> dict:
        from kjax.finetune.choice import encode_choices
        pairs = Pair().encoder(tokenizer, ["0", "1"], ft, pos_from_kiwi)
        return {k: encode_choices(pairs, v) for k, v in splits.items()}

    def num_outputs(self, num_labels: int) -> int:
        return 1

    def loss(self, outputs: jax.Array, batch: dict, group: int = 1) -> jax.Array:
        import jax.numpy as jnp
        import optax
        # rows of one example side by side: softmax over them
        w = batch["weights"]
        ce = optax.softmax_cross_entropy_with_integer_labels(
            outputs.reshape(-1, group), batch["labels"].reshape(-1, group)[:, 0])
        w = w.reshape(-1, group)[:, 0]
        return (ce * w).sum() / jnp.maximum(w.sum(), 1.0)

    def predictions(self, outputs: jax.Array, group: int = 1) -> jax.Array:
        import jax.numpy as jnp
        return jnp.argmax(outputs.reshape(-1, group), axis=-1).astype(jnp.int32)

    def decode_row(self, tuner, feats, i: int, pred):
        return int(pred)

    def metrics(self, gold, pred, label_names=(), sts_threshold: float = 3.0) -> dict:
        return {"accuracy": M.accuracy(gold, pred)}
