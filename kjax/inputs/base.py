"""What an input mode is: everything that depends on how an example's tokens
become model positions, in one object (one module per mode in kjax/inputs/,
registered in kjax/inputs/__init__.py). Consumers ask the mode; none of them
branches on mode names.

    check(config)                 one-line errors for combinations it cannot run
    mask_positions(example)       per token, the position it feeds (masking units
                                  hold whole positions), None: positions are tokens
    loader_resources(config)      what its loader transform needs (opened once)
    example_inputs(...)           one example → fixed-shape arrays, and the
                                  per-position view B is built over
    position_ids(positions, cfg)  position ids when they are not 0..s-1
    model_inputs(batch)           the model's keyword arguments from a batch
    maskable_positions(batch)     per row, the positions masking may choose
    dummy_inputs(config, b)       the same at init (zeros of the right shapes)
    positions(example)            per-position arrays + which tokens make each
                                  position (analysis, inspect)
    embedding                     the model's embedding path (kjax/model/encoder.py
                                  EMBEDDINGS), a small closed set
    finetune_check / finetune_inputs / finetune_b_view   fine-tuning (kjax/finetune):
                                  token rows → the model's arrays, and which
                                  position each token feeds (labels follow it)
    export_format, export_check   how `kjax export` writes it (kjax/export)

Objectives that need particular positions ask `knowledge_positions` (the
knowledge heads work on morphemes) and `mlm_losses` (a position with several
target tokens needs a multi-target loss).
"""
from __future__ import annotations

import numpy as np

from kjax.config.schema import TOKENIZER_SCHEMES
from kjax.errors import KjaxError
from kjax.examples.masking import mask_tokens
from kjax.shake.matrix import build_b, shake_from_batch
from kjax.tokens.sentencepiece import CLS, PAD, SEP

TOKEN_INPUTS = ("input_ids", "token_type_ids", "attention_mask")
POSITION_KEYS = ("input_ids", "word_ids", "morph_ids", "tags", "token_type_ids")


class InputMode:
    name = ""
    embedding = "tokens"                 # kjax.model.encoder.EMBEDDINGS
    positions_are_tokens = True          # False: a position sums several tokens
    positions_are_morphemes = False      # one morpheme per position (fill-mask: [MASK] is one)
    schemes: tuple = TOKENIZER_SCHEMES   # tokenizer.scheme values it works with
    why_schemes = ""                     # ... and why, for the error
    mlm_losses: tuple = ("ce",)          # train.mlm_loss values (kjax/objectives/mlm.py)
    knowledge_positions = False          # the knowledge heads (METHODS §2.5) can run on it
    export_format = "bert"               # "bert" | "kjax_multihot" | None (refused)
    finetune_supported = True
    packable = False                     # train.packing can pack its rows (kjax/batches/packing.py)

    # ---- the config ----------------------------------------------------------------
    def check(self, config) -> None:
        scheme = config.tokenizer.scheme
        if scheme not in self.schemes:
            raise KjaxError(f"model.input_mode={self.name!r} needs tokenizer.scheme "
                            f"{' or '.join(map(repr, self.schemes))}, not {scheme!r}"
                            + (f" ({self.why_schemes})" if self.why_schemes else ""))
        loss = config.train.mlm_loss
        if loss not in self.mlm_losses:
            raise KjaxError(f"train.mlm_loss={loss!r} with model.input_mode={self.name!r}; "
                            f"choose one of {self.mlm_losses}")
        if config.train.packing:
            self.check_packing(config)

    def check_packing(self, config) -> None:
        """Packing moves whole one-hot rows; what indexes positions across a row
        (B, knowledge positions, a mode's own arrays) is not carried yet."""
        k = config.knowledge
        why = (f"model.input_mode={self.name!r} (one-hot modes only)" if not self.packable
               else "shaking (B of Eq. 1)" if config.model.shake_factor or
               config.model.shake_factor_per_layer else
               "the knowledge heads" if k.hypernym_weight or k.sense_weight or k.verb_weight
               else None)
        if why:
            raise KjaxError(f"train.packing=True cannot pack rows with {why}; set "
                            f"--config.train.packing=False")

    # ---- examples → fixed-shape arrays (prepare's static masks, the loader) ---------
    def mask_positions(self, example: dict) -> np.ndarray | None:
        return None

    def mask(self, example: dict, config, rng: np.random.Generator) -> dict:
        """`example` with masks over whole positions of this mode."""
        return mask_tokens(example, config, rng, self.mask_positions(example))

    def loader_resources(self, config) -> dict:
        return {}

    def example_inputs(self, example: dict, config, rng, dynamic: bool,
                       resources: dict) -> tuple[dict, dict]:
        """(fixed-shape arrays, per-position arrays for B) of one example; draws
        the dynamic masks first when `dynamic`."""
        if dynamic:
            example = self.mask(example, config, rng)
        d = config.data
        return pad_example(example, d.max_seq_len, d.max_predictions_per_seq), example

    def position_ids(self, positions: dict, config, seq_len: int | None = None):
        """Position ids [seq_len] of one example's per-position arrays; None: 0..s-1."""
        return None

    def to_model_inputs(self, example: dict, config, rng, dynamic: bool, resources: dict,
                        builds_b: bool) -> dict:
        """The loader transform of one example: the mode's arrays, then B over
        its positions (when shaking), then its position ids (if not 0..s-1)."""
        out, positions = self.example_inputs(example, config, rng, dynamic, resources)
        seq = config.data.max_seq_len
        if builds_b:
            out.update(build_b(positions, seq, config.shake, rng))
        ids = self.position_ids(positions, config)
        if ids is not None:
            out["position_ids"] = ids
        return out

    # ---- batches → the model -------------------------------------------------------
    def model_inputs(self, batch: dict) -> dict:
        kwargs = {k: batch[k] for k in TOKEN_INPUTS}
        kwargs.update({k: batch[k] for k in ("position_ids", "segment_ids") if k in batch})
        if (shake := shake_from_batch(batch)) is not None:   # dense B or its pairs layout
            kwargs["shake"] = shake
        return kwargs

    token_ids_key = "input_ids"          # the batch's token ids ([CLS], [SEP] among them)

    def maskable_positions(self, batch: dict):
        """Per row, the positions masking may choose (real ones but [CLS] and
        [SEP]): the denominator of the realised masked share. numpy or jax."""
        ids = batch[self.token_ids_key]
        return batch["attention_mask"].sum(-1) - ((ids == CLS) | (ids == SEP)).sum(-1)

    def dummy_inputs(self, config, batch_size: int) -> dict:
        ids = np.zeros((batch_size, config.data.max_seq_len), np.int32)
        return {"input_ids": ids, "token_type_ids": ids, "attention_mask": np.ones_like(ids)}

    # ---- per-position views (analysis, inspect) ------------------------------------
    def positions(self, example: dict) -> tuple[dict, list[np.ndarray]]:
        """(per-position arrays: POSITION_KEYS, the token indices of each position)."""
        n = len(example["input_ids"])
        return ({k: np.asarray(example[k])[:n] for k in POSITION_KEYS},
                [np.asarray([i]) for i in range(n)])

    def position_batch(self, example: dict, seq_len: int) -> dict:
        """Unmasked model inputs of one assembled example, padded to seq_len
        (the keyword arguments of BertForPreTraining.encode)."""
        n = len(example["input_ids"])
        pad = lambda x: np.pad(np.asarray(x, np.int32), (0, seq_len - len(x)))  # noqa: E731
        return {"input_ids": pad(example["input_ids"]),
                "token_type_ids": pad(example["token_type_ids"]),
                "attention_mask": pad(np.ones(n))}

    # ---- fine-tuning and export ----------------------------------------------------
    def finetune_check(self, config) -> None:
        if not self.finetune_supported:
            raise KjaxError(f"model.input_mode={self.name!r}: `kjax finetune` cannot run this "
                            f"input mode yet (its task labels would have to follow "
                            f"{self.name} positions); fine-tune a model of another "
                            f"input mode")

    def finetune_position_ids(self, units: dict, lengths, seq_len: int, config):
        """Position ids of fine-tuning rows ([n, seq]), None: 0..s-1."""
        return None

    def finetune_inputs(self, rows: dict, lengths, seq_len: int, config) -> tuple[dict, np.ndarray]:
        """Fine-tuning token rows ([n, seq]: input_ids, token_type_ids,
        attention_mask and the units word_ids, morph_ids, tags, inpos) →
        (the model's arrays per row, the position each token feeds [n, seq],
        -1 for padding). Token labels (NER tags, answer spans) move to
        positions by that map, and predictions come back by it."""
        out = {k: rows[k] for k in TOKEN_INPUTS}
        ids = self.finetune_position_ids(rows, lengths, seq_len, config)
        if ids is not None:
            out["position_ids"] = ids
        steps = np.arange(seq_len)
        return out, np.where(steps < np.asarray(lengths)[:, None], steps, -1).astype(np.int32)

    def finetune_b_view(self, example: dict) -> dict:
        """The per-position arrays B is built over for one fine-tuning row."""
        return example

    def export_check(self, config) -> None:
        if self.export_format is None:
            raise KjaxError(f"model.input_mode={self.name!r}: `kjax export` cannot write this "
                            f"input mode yet (transformers would run it with other "
                            f"positions); nothing was written")


def pad_example(example: dict, max_seq_len: int, max_predictions: int) -> dict:
    """Variable-length example → fixed shapes (what jit needs)."""
    n, p = len(example["input_ids"]), len(example["mlm_positions"])
    if n > max_seq_len or p > max_predictions:
        raise ValueError(f"example of {n} tokens / {p} predictions exceeds max_seq_len="
                         f"{max_seq_len} / max_predictions_per_seq={max_predictions}; "
                         f"prepare the data again with the current config")

    def pad(x, size, value=0):
        return np.pad(np.asarray(x, np.int32), (0, size - len(x)), constant_values=value)

    return {
        "input_ids": pad(example["input_ids"], max_seq_len, PAD),
        "token_type_ids": pad(example["token_type_ids"], max_seq_len),
        "attention_mask": pad(np.ones(n, np.int32), max_seq_len),
        "mlm_positions": pad(example["mlm_positions"], max_predictions),
        "mlm_ids": pad(example["mlm_ids"], max_predictions),
        "mlm_weights": pad(np.ones(p, np.float32), max_predictions).astype(np.float32),
        "nsp_labels": np.asarray(example["nsp_label"], np.int32),
        "nsp_weights": np.asarray(1.0, np.float32),
    }
