"""Task models: the pretraining model as the `bert` submodule (so its
parameter subtree is exactly a kjax pretraining checkpoint's `params`) plus
one dense head. `pooler` is BERT's pretrained one; a model.arch without one
(modern) gets a freshly initialised dense layer in its place. The task
(kjax/finetune/registry.py) says what the head reads and how many outputs:

    sentence tasks   tanh(pooler(h_[CLS])) → dropout → dense(outputs)
    per_position     h_t → dropout → dense(outputs) for every position (ner, qa)
    target words     [tanh(pooler(h_CLS)); mean h over the target word in a;
                     the same in b] when the batch has `target_mask` (wic)
    scalar_output    one output per row, its last axis dropped (regress, choice)

SHAKE's bf lives in `EncoderConfig.shake_factor` (static), so fine-tuning
and inference use two instances of the same module with different bf and
one parameter tree (METHODS §1.4: both set independently).
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax.numpy as jnp

from kjax.finetune.registry import finetune_task
from kjax.model.arch import architecture
from kjax.model.config import EncoderConfig
from kjax.model.encoder import dense

MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")
OPTIONAL_INPUTS = ("position_ids", "shake")   # the input mode's position ids; SHAKE's B


def model_inputs(batch: dict, mode=None) -> dict:
    """The model's keyword arguments from a fine-tuning batch: the input mode
    (kjax/inputs) says which (segment modes nest their token stream in
    `multihot`); without one, the token inputs the batch holds."""
    task_inputs = {k: batch[k] for k in ("target_mask",) if k in batch}
    if mode is not None:
        return {**mode.model_inputs(batch), **task_inputs}
    return {k: batch[k] for k in MODEL_INPUTS + OPTIONAL_INPUTS if k in batch} | task_inputs


class TaskModel(nn.Module):
    config: EncoderConfig
    task: str                    # a registered task's name
    num_outputs: int
    classifier_dropout: float = 0.1
    deterministic: bool = True

    def setup(self):
        # The pretrained encoder of model.arch; the subtree keeps the name "bert"
        # for every arch, so --init restores it the same way.
        arch = architecture(self.config)
        self.bert = arch.build(self.config, self.deterministic)
        cfg = arch.encoder_config(self.config)   # the heads as the recipe's layers (biases)
        # BERT pretrains a pooler (it feeds NSP); an arch without one gets a fresh one here.
        self.fresh_pooler = (dense(cfg, cfg.hidden_size, ("embed", "mlp"), "fresh_pooler")
                             if not arch.has_nsp_head else None)
        self.dropout = nn.Dropout(self.classifier_dropout)
        self.classifier = dense(cfg, self.num_outputs, ("embed", None), "classifier")

    def __call__(self, input_ids, token_type_ids, attention_mask, position_ids=None, shake=None,
                 multihot=None, target_mask=None):
        hidden, _ = self.bert.encode(input_ids, token_type_ids, attention_mask, position_ids,
                                     shake=shake, multihot=multihot)
        pooler = self.bert.pooler if self.fresh_pooler is None else self.fresh_pooler
        task = finetune_task(self.task)
        x = hidden if task.per_position else jnp.tanh(pooler(hidden[:, 0]))
        if target_mask is not None:   # wic: the target word's mean vector in each sentence
            m = target_mask.astype(hidden.dtype)
            words = jnp.einsum("bks,bsh->bkh", m, hidden) / \
                jnp.maximum(m.sum(-1, keepdims=True), 1.0)
            x = jnp.concatenate([x, words.reshape(x.shape[0], -1)], axis=-1)
        logits = self.classifier(self.dropout(x, deterministic=self.deterministic))
        logits = logits.astype(jnp.float32)
        return logits[..., 0] if task.scalar_output else logits


def make_task_model(config, task: str, num_labels: int, bf: float, deterministic: bool,
                    classifier_dropout: float) -> TaskModel:
    """`config` is the kjax ConfigDict; bf applies equally in every layer."""
    enc = EncoderConfig.from_config(config.model)
    enc = dataclasses.replace(enc, shake_factor=(float(bf),) * enc.num_layers)
    outputs = finetune_task(task).num_outputs(num_labels)
    return TaskModel(enc, finetune_task(task).name, outputs, classifier_dropout, deterministic)

