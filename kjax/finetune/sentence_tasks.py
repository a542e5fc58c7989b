"""The sentence-level tasks (one prediction per example), listed in
kjax/finetune/registry.py; the contract is kjax/finetune/contract.py.

    classify  one sentence, a class (KLUE-YNAT)       accuracy, macro_f1 (primary)
    pair      two sentences, a class (KLUE-NLI)       accuracy (primary), macro_f1
    regress   a score (KLUE-STS): one output, squared error; targets scaled to
              at most 1 (STS 0..5 → 0..1), predictions scaled back
                                                      pearson (primary), spearman,
                                                      f1 at sts_threshold, mse

Word in context (wic.py) and multiple choice (choice.py) are sentence-level
too, each in its own module.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from kjax.errors import KjaxError
from kjax.finetune import metrics as M
from kjax.finetune.contract import NoLabelNames, PairTask, Task
from kjax.finetune.readers import Example

if TYPE_CHECKING:   # jax loads when a step is built, not when the CLI parses
    import jax


class Classify(Task):
    name = "classify"


class Pair(PairTask):
    name = "pair"


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

