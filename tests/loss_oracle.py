"""The pretraining loss written out by hand, term by term: the oracle the
tests hold kjax.objectives' composition to (tests/test_inputs.py,
tests/test_knowledge_heads.py). kjax composes the loss once, in
kjax/objectives; this file is the tests' own."""
from __future__ import annotations

import jax

from kjax.losses.knowledge import hypernym_loss, sense_loss, verb_loss
from kjax.losses.pretraining import multihot_mlm, weighted_ce


KNOWLEDGE_HEADS = (("hypernym", "hyp_logits", hypernym_loss), ("sense", "sense_pred", sense_loss),
                   ("verb", "verb_logits", verb_loss))


def knowledge_losses(outputs: dict, batch: dict, weights) -> tuple[jax.Array, dict]:
    """Σ weight · loss over the heads present; metrics per head."""
    total, metrics = 0.0, {}
    for name, key, fn in (("hypernym", "hyp_logits", hypernym_loss),
                          ("sense", "sense_pred", sense_loss),
                          ("verb", "verb_logits", verb_loss)):
        if key in outputs:
            loss, m = fn(outputs[key], batch)
            total = total + weights[name] * loss
            metrics.update({f"{name}_loss": loss, **m})
    return total, metrics


def pretraining_loss(outputs: dict, batch: dict, nsp_weight: float = 1.0, mlm: str = "ce",
                     knowledge_weights: dict | None = None):
    """MLM + nsp_weight·NSP (+ Σ weight·knowledge loss, METHODS §2.5), written out
    by hand: the reference for kjax.objectives.pretraining_loss."""
    if mlm == "ce":
        mlm_loss, mlm_acc = weighted_ce(outputs["mlm_logits"], batch["mlm_ids"],
                                        batch["mlm_weights"])
    else:
        mlm_loss, mlm_acc = multihot_mlm(outputs["mlm_logits"], batch, mlm)
    nsp_loss, nsp_acc = weighted_ce(outputs["nsp_logits"], batch["nsp_labels"],
                                    batch["nsp_weights"])
    loss = mlm_loss + nsp_weight * nsp_loss
    metrics = {"mlm_loss": mlm_loss, "mlm_accuracy": mlm_acc,
               "nsp_loss": nsp_loss, "nsp_accuracy": nsp_acc}
    for name, key, fn in KNOWLEDGE_HEADS if knowledge_weights else ():
        if key in outputs:   # added one by one, in the registry's order
            head_loss, m = fn(outputs[key], batch)
            loss = loss + knowledge_weights[name] * head_loss
            metrics.update({f"{name}_loss": head_loss, **m})
    return loss, {"loss": loss, **metrics}
