"""Multiple choice (NIKL CoPA), `choice`: one row per (premise, alternative)
pair, [CLS] premise [SEP] alternative [SEP]; the head scores each row
(tanh(pooler(h_[CLS])) → dense(1)) and a softmax runs over the rows of one
example. Rows of an example sit next to each other (`group_size` of them),
so batches take whole examples. Scored by accuracy."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from kjax.errors import KjaxError
from kjax.finetune import metrics as M
from kjax.finetune.contract import NoLabelNames, PairTask
from kjax.finetune.features import Encoder, Features
from kjax.finetune.readers import Example, choice_example, record_label

if TYPE_CHECKING:   # jax loads when a step is built, not when the CLI parses
    import jax


class Choice(NoLabelNames):
    name = "choice"
    scalar_output = True
    metric_names = ("accuracy",)
    primary = "accuracy"

    def from_record(self, rec, text_a, text_b, guid, where) -> Example:
        return choice_example(rec, text_a, text_b, record_label(rec, where), guid, where)

    def encode(self, tokenizer, splits, names, ft, pos_from_kiwi) -> dict:
        pairs = PairTask().encoder(tokenizer, ["0", "1"], ft, pos_from_kiwi)
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


def encode_choices(encoder: Encoder, examples: Sequence[Example]) -> Features:
    """`encoder` encodes pairs with labels "0"/"1"; every example must have
    as many alternatives as the first."""
    k = len(examples[0].choices)
    rows = []
    for ex in examples:
        if len(ex.choices) != k:
            raise KjaxError(f"{ex.where}: {len(ex.choices)} alternatives, but the first "
                            f"example has {k}; --task choice needs the same number everywhere")
        rows += [Example(ex.guid, ex.text_a, c, str(int(j == ex.label)), where=ex.where)
                 for j, c in enumerate(ex.choices)]
    feats = encoder.encode(rows)
    feats.labels = np.repeat(np.asarray([ex.label for ex in examples], np.int32), k)
    feats.group_size = k
    return feats
