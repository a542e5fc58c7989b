"""Replaced-token detection (METHODS §6, ELECTRA): on with an architecture
that has its head (kjax/model/arch: model.arch='electra'), weighted by
λ = train.rtd_weight (the paper's 50). The generator's MLM is the
`mlm` objective on the generator's logits, so the training loss is
L_MLM(θ_G) + λ · L_Disc(θ_D), each term a mean over its own slots (masked
positions, real tokens): gradient accumulation weighs each by its share.

Metrics (all over real tokens): rtd_loss, rtd_accuracy, replaced_share, the
flagged and caught shares, and rtd_precision / rtd_recall (on replaced
tokens) formed from them after the step's microbatches or an evaluation's
batches are combined (`ratios`), so they are the whole batch's counts'.
"""
from __future__ import annotations

import jax.numpy as jnp

from kjax.errors import KjaxError
from kjax.losses.replaced import rtd_loss
from kjax.model.arch import architecture
from kjax.model.config import EncoderConfig
from kjax.model.electra import generator_config
from kjax.objectives.base import Objective


class ReplacedTokenDetection(Objective):
    name = "rtd"
    label = "RTD"
    metrics = ("rtd_accuracy", "replaced_share", "rtd_flagged_share", "rtd_caught_share")
    ratios = {"rtd_precision": ("rtd_caught_share", "rtd_flagged_share"),
              "rtd_recall": ("rtd_caught_share", "replaced_share")}
    head_params = ("discriminator_predictions",)

    def enabled(self, config) -> bool:
        return architecture(config).has_rtd_head

    def weight(self, config) -> float:
        return config.train.rtd_weight if self.enabled(config) else 0.0

    def check(self, config, mode) -> None:
        if not self.enabled(config):
            return
        m = config.model
        if not mode.positions_are_tokens or mode.embedding != "tokens":
            raise KjaxError(f"model.arch='electra' with model.input_mode={mode.name!r}: the "
                            f"generator samples one token per position, which this mode's "
                            f"positions are not; use model.input_mode='onehot'")
        g = config.knowledge
        if g.hypernym_weight > 0 or g.sense_weight > 0 or g.verb_weight > 0:
            raise KjaxError("model.arch='electra' has no knowledge heads; set the knowledge "
                            "weights to 0")
        if config.train.mlm_loss != "ce":
            raise KjaxError(f"model.arch='electra' with train.mlm_loss="
                            f"{config.train.mlm_loss!r}: the generator samples one token per "
                            f"position; set train.mlm_loss='ce'")
        gen = generator_config(EncoderConfig.from_config(m))
        if gen.hidden_size % gen.num_heads:
            raise KjaxError(f"the generator's width {gen.hidden_size} is not divisible by its "
                            f"{gen.num_heads} heads; set model.generator_num_heads to a divisor "
                            f"(or model.generator_hidden_size)")

    def loss(self, outputs, batch, config):
        return rtd_loss(outputs["rtd_logits"], outputs["rtd_input_ids"], batch)

    def slots(self, batch):
        return batch["attention_mask"].astype(jnp.float32).sum()


OBJECTIVE = ReplacedTokenDetection()
