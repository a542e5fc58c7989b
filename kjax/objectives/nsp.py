"""Next-sentence prediction (METHODS §4): on with the BERT recipe when its
weight train.nsp_weight is > 0; at 0 (MLM-only pretraining, as RoBERTa and
SHAKE) it is off, so neither computed nor reported (eval lines,
metrics.jsonl, TensorBoard, `kjax eval`, the model card): a figure of an
objective that did not train is no result, and `kjax export` writes
neither its head nor the pooler (BertForMaskedLM). The loss is bit-identical either
way (0 · nsp adds exact zeros). An architecture without an NSP head
(kjax/model/arch: modern, electra) leaves it off and refuses a weight > 0."""
from __future__ import annotations

from kjax.errors import KjaxError
from kjax.losses.pretraining import weighted_ce
from kjax.model.arch import architecture
from kjax.objectives.base import Objective


class NextSentence(Objective):
    name = "nsp"
    label = "NSP"
    metrics = ("nsp_accuracy",)
    head_params = ("pooler", "nsp")   # the pooled [CLS] feeds nothing else in pretraining

    def weight(self, config) -> float:
        return config.train.nsp_weight if self.enabled(config) else 0.0

    def enabled(self, config) -> bool:
        return (architecture(config).has_nsp_head and not config.train.packing
                and config.train.nsp_weight > 0)

    def check(self, config, mode) -> None:
        if config.train.packing and config.train.nsp_weight > 0:
            raise KjaxError(f"train.nsp_weight={config.train.nsp_weight:g} with "
                            f"train.packing=True: a packed row holds several examples, NSP "
                            f"needs one pair per row; set --config.train.nsp_weight=0")
        if not architecture(config).has_nsp_head and config.train.nsp_weight > 0:
            raise KjaxError(f"train.nsp_weight={config.train.nsp_weight:g}: model.arch="
                            f"{config.model.arch} has no NSP head (it pretrains without NSP); "
                            f"set --config.train.nsp_weight=0 (tpu_configs/modern_*.py and "
                            f"electra_*.py do)")

    def loss(self, outputs, batch, config):
        loss, accuracy = weighted_ce(outputs["nsp_logits"], batch["nsp_labels"],
                                     batch["nsp_weights"])
        return loss, {"nsp_loss": loss, "nsp_accuracy": accuracy}

    def slots(self, batch):
        return batch["nsp_weights"].sum()


OBJECTIVE = NextSentence()
