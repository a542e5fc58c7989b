"""Next-sentence prediction (METHODS §4): always computed and reported; its
weight in the loss is train.nsp_weight (0: MLM-only pretraining, as
RoBERTa and SHAKE)."""
from __future__ import annotations

from kjax.losses.pretraining import weighted_ce
from kjax.objectives.base import Objective


class NextSentence(Objective):
    name = "nsp"
    metrics = ("nsp_accuracy",)

    def weight(self, config) -> float:
        return config.train.nsp_weight

    def loss(self, outputs, batch, config):
        loss, accuracy = weighted_ce(outputs["nsp_logits"], batch["nsp_labels"],
                                     batch["nsp_weights"])
        return loss, {"nsp_loss": loss, "nsp_accuracy": accuracy}

    def slots(self, batch):
        return batch["nsp_weights"].sum()


OBJECTIVE = NextSentence()
