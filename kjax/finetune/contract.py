"""What a fine-tuning task is: everything that depends on the task, in one
object. Each task family's module subclasses `Task` (sentence_tasks, choice,
wic, ner, qa) and kjax/finetune/registry.py lists them. Consumers — the
readers, the encoder, the task model, the trainer, the run's outputs — ask
the task; none of them branches on task names (tests/test_architecture.py
checks). The defaults below are sentence classification's, built on the
shared readers (readers.py) and encoding (features.py); this module imports
no task family and no registry.

    reader     detect_format(path), read(path, fmt), from_record(...),
               parse_label(value, where), check(example), label_names(splits)
    encoding   token_labels (labels per token, NER), label_dtype,
               encode_label(encoder, example), encode(tokenizer, splits, ...),
               scale_targets(features)
    head       per_position (the head reads every position, not the pooled
               [CLS]), num_outputs(num_labels), scalar_output (drop the last
               axis), reads_target_word (WiC's target-word vectors)
    loss       loss(outputs, batch, group), predictions(outputs, group)
    host side  gold(examples), decode(tuner, split, features, predictions),
               prediction_row(example, prediction) for predictions_<split>.jsonl
    metrics    metric_names, primary, metrics(gold, pred, label_names,
               sts_threshold), baseline(train_gold, eval_gold)

The base class is sentence classification (`classify`): tanh(pooler(h_[CLS]))
→ dropout → dense(num_labels), cross-entropy, accuracy and macro F1.
`PairTask` adds the second sentence; `NoLabelNames` is for labels that are
not class names (scores, choice numbers).
"""
from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Sequence

import numpy as np

from kjax.errors import KjaxError
from kjax.finetune import metrics as M
from kjax.finetune.features import Encoder
from kjax.finetune.readers import (NLI_LABELS, TEXT_B_KEYS, Example, klue_ner_file,
                                   read_generic, record_label)

if TYPE_CHECKING:   # jax loads when a step is built, not when the CLI parses
    import jax


class Task:
    name = ""
    token_labels = False                   # labels per token (NER) rather than per example
    label_dtype = np.int32
    per_position = False                   # the head reads every position's vector
    scalar_output = False                  # one output per row: drop the last axis
    metric_names: tuple = ("accuracy", "macro_f1")
    primary = "macro_f1"                   # finetune.select_metric="" selects by this

    # ---- reader ------------------------------------------------------------------
    def detect_format(self, path: str) -> str:
        lower = path.lower()
        if lower.endswith(".jsonl"):
            return "jsonl"
        if lower.endswith(".json"):
            return "json"
        return "klue-ner" if klue_ner_file(path) else "tsv"

    def read(self, path: str, fmt: str) -> list[Example]:
        if fmt == "squad":
            raise KjaxError(f"{path}: --task qa reads SQuAD-style JSON (KorQuAD, KLUE-MRC; "
                            f"--format squad) and --format squad is only for --task qa")
        if fmt == "klue-ner":
            raise KjaxError(f"{path}: the KLUE-NER format holds character tags; use --task ner "
                            f"(or --format tsv for text<TAB>label rows)")
        return read_generic(path, self, fmt)

    def from_record(self, rec: dict, text_a: str, text_b, guid: str, where: str) -> Example:
        """One record of a JSON/JSONL/TSV file (its texts checked)."""
        return Example(guid, text_a, text_b, self.parse_label(record_label(rec, where), where),
                       None, where)

    def parse_label(self, value, where: str):
        if isinstance(value, (dict, list)) or value is None or str(value) == "":
            raise KjaxError(f"{where}: label {value!r} is not a class name")
        return str(value)

    def check(self, ex: Example) -> None:
        if ex.text_b is not None:
            raise KjaxError(f"{ex.where}: a sentence pair, but --task classify takes one "
                            f"sentence; use --task pair")

    def label_names(self, splits: Sequence[Sequence[Example]]) -> list[str]:
        """Class names (NLI in KLUE's order); a dev/test label never seen in
        train is an error."""
        train, *others = splits
        names = sorted({ex.label for ex in train})
        if len(set(names) & set(NLI_LABELS)) >= 2:       # NLI data: a stray label is a typo
            stray = [ex for ex in train if ex.label not in NLI_LABELS]
            if stray:
                raise KjaxError(f"{stray[0].where}: label {stray[0].label!r} is not an NLI "
                                f"label ({', '.join(NLI_LABELS)}); fix the label or drop the "
                                f"example")
            names = [n for n in NLI_LABELS if n in names]
        known = set(names)
        for part in others:
            for ex in part:
                if ex.label not in known:
                    raise KjaxError(f"{ex.where}: label {ex.label!r} never occurs in the "
                                    f"training data (labels: {', '.join(names)}); fix the file "
                                    f"or the split")
        return names

    # ---- encoding ----------------------------------------------------------------
    def encode_label(self, encoder, ex: Example):
        return encoder._label(ex.label, ex)

    def encoder(self, tokenizer, names, ft, pos_from_kiwi: bool):
        return Encoder(tokenizer, self, names, ft.max_seq_len, pos_from_kiwi)

    def encode(self, tokenizer, splits: dict, names: list[str], ft,
               pos_from_kiwi: bool) -> dict:
        """Features per split (before the input mode places them)."""
        encode = self.encoder(tokenizer, names, ft, pos_from_kiwi).encode
        return {k: encode(v) for k, v in splits.items()}

    def scale_targets(self, features: dict) -> float:
        """Regression scales its targets (and predictions back); 1 = none."""
        return 1.0

    # ---- head and loss -----------------------------------------------------------
    def num_outputs(self, num_labels: int) -> int:
        return num_labels

    def loss(self, outputs: jax.Array, batch: dict, group: int = 1) -> jax.Array:
        """Mean cross-entropy over real examples (weights)."""
        import jax.numpy as jnp
        import optax
        w = batch["weights"]
        safe = jnp.maximum(batch["labels"], 0)
        ce = optax.softmax_cross_entropy_with_integer_labels(outputs, safe)
        return (ce * w).sum() / jnp.maximum(w.sum(), 1.0)

    def predictions(self, outputs: jax.Array, group: int = 1) -> jax.Array:
        """What the host needs from the compiled step: here class ids."""
        import jax.numpy as jnp
        return jnp.argmax(outputs, axis=-1).astype(jnp.int32)

    # ---- host side ---------------------------------------------------------------
    def gold(self, examples: Sequence[Example]) -> list:
        return [e.label for e in examples]

    def decode(self, tuner, split: str, feats, outputs: list) -> list:
        """The step's outputs (one per row) → one prediction per example."""
        return [self.decode_row(tuner, feats, i, p) for i, p in enumerate(outputs)]

    def decode_row(self, tuner, feats, i: int, pred):
        return tuner.data.label_names[int(pred)]

    def prediction_row(self, ex: Example, pred) -> dict:
        return {"gold": ex.label, "pred": pred}

    # ---- metrics -----------------------------------------------------------------
    def metrics(self, gold: Sequence, pred: Sequence, label_names: Sequence[str] = (),
                sts_threshold: float = 3.0) -> dict:
        # Macro F1 over the classes in gold or pred, as KLUE (sklearn's default) scores it.
        return {"accuracy": M.accuracy(gold, pred), "macro_f1": M.macro_f1(list(gold), list(pred))}

    def baseline(self, train_gold: Sequence, eval_gold: Sequence) -> list:
        """The no-model baseline's predictions: here the training majority class."""
        majority = collections.Counter(train_gold).most_common(1)[0][0]
        return [majority] * len(eval_gold)


class PairTask(Task):
    """Two sentences, one class (NLI): [CLS] a [SEP] b [SEP]."""
    primary = "accuracy"

    def check(self, ex: Example) -> None:
        if ex.text_b is None:
            raise KjaxError(f"{ex.where}: --task {self.name} needs a second sentence "
                            f"({', '.join(TEXT_B_KEYS)})")


class NoLabelNames(Task):
    """Tasks whose labels are not class names (scores, choice numbers)."""

    def check(self, ex: Example) -> None:
        pass

    def label_names(self, splits) -> list[str]:
        return []
