"""Masked LM (METHODS §4): one target per position (`ce`), or several — a
multi-hot morpheme, a merged position — with the Eq. 7–9 loss (`eq9`) or the
Table 14 ablations (`bce`, `summed_ce`). Which ones an input mode allows is
the mode's `mlm_losses`."""
from __future__ import annotations

from kjax.errors import KjaxError
from kjax.losses.multihot import LOSSES
from kjax.losses.pretraining import multihot_mlm, weighted_ce
from kjax.objectives.base import Objective

ONE_TARGET = "ce"


class MaskedLM(Objective):
    name = "mlm"
    label = "MLM"
    metrics = ("mlm_accuracy",)
    head_params = ("mlm_transform", "mlm_layer_norm", "mlm_bias")

    def check(self, config, mode) -> None:
        loss = config.train.mlm_loss
        known = (ONE_TARGET, *LOSSES)
        if loss not in known:
            raise KjaxError(f"train.mlm_loss={loss!r}; choose one of {', '.join(known)}")

    def inputs(self, batch: dict) -> dict:
        return {"mlm_positions": batch["mlm_positions"]}

    def dummy_inputs(self, config, batch_size: int) -> dict:
        import numpy as np
        return {"mlm_positions": np.zeros((batch_size, config.data.max_predictions_per_seq),
                                          np.int32)}

    def loss(self, outputs, batch, config):
        name = config.train.mlm_loss
        if name == ONE_TARGET:
            loss, accuracy = weighted_ce(outputs["mlm_logits"], batch["mlm_ids"],
                                         batch["mlm_weights"])
        else:
            loss, accuracy = multihot_mlm(outputs["mlm_logits"], batch, name)
        return loss, {"mlm_loss": loss, "mlm_accuracy": accuracy}

    def slots(self, batch):
        return batch["mlm_weights"].sum()


OBJECTIVE = MaskedLM()
