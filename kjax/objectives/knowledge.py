"""UKnowBERT's knowledge objectives (METHODS §2.5): hypernym (Eq. 10), sense
vector (Eq. 11), verb relation (Eq. 12). Each is on when its weight
(knowledge.*_weight) is > 0, and then the model has its head; they need
morpheme positions (an input mode with `knowledge_positions`), whose
targets the mode's loader transform builds (kjax/inputs/knowledge.py)."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from kjax.errors import KjaxError
from kjax.losses.knowledge import hypernym_loss, sense_loss, verb_loss
from kjax.objectives.base import Objective

POSITION_KEYS = ("hyp_positions", "sense_positions")


class KnowledgeObjective(Objective):
    output = ""          # the model output the loss reads
    loss_fn = None

    def weight(self, config) -> float:
        return config.knowledge[f"{self.name}_weight"]

    def enabled(self, config) -> bool:
        return self.weight(config) > 0

    def check(self, config, mode) -> None:
        if self.enabled(config) and not mode.knowledge_positions:
            raise KjaxError(f"knowledge.{self.name}_weight={self.weight(config)} needs morpheme "
                            f"positions, which model.input_mode={mode.name!r} does not have: set "
                            f"model.input_mode='multihot' (and tokenizer.scheme='multihot')")

    def inputs(self, batch: dict) -> dict:
        if "hyp_positions" not in batch:
            return {}
        return {"knowledge_positions": {k: batch[k] for k in POSITION_KEYS}}

    def dummy_inputs(self, config, batch_size: int) -> dict:
        g = config.knowledge
        return {"knowledge_positions": {
            "hyp_positions": np.zeros((batch_size, g.max_hypernym), np.int32),
            "sense_positions": np.zeros((batch_size, g.max_sense), np.int32)}}

    def loss(self, outputs, batch, config):
        loss, metrics = type(self).loss_fn(outputs[self.output], batch)
        return loss, {f"{self.name}_loss": loss, **metrics}


class Hypernym(KnowledgeObjective):
    name, output, metrics = "hypernym", "hyp_logits", ("hypernym_top1", "hypernym_top5")
    loss_fn = hypernym_loss

    def slots(self, batch):
        return batch["hyp_mask"].astype(jnp.float32).sum()


class Sense(KnowledgeObjective):
    name, output, metrics = "sense", "sense_pred", ("sense_cosine",)
    loss_fn = sense_loss

    def slots(self, batch):
        return batch["sense_mask"].astype(jnp.float32).sum()


class Verb(KnowledgeObjective):
    name, output, metrics = "verb", "verb_logits", ("verb_accuracy",)
    loss_fn = verb_loss

    def slots(self, batch):
        return (batch["verb_targets"] >= 0).astype(jnp.float32).sum()


HYPERNYM, SENSE, VERB = Hypernym(), Sense(), Verb()
