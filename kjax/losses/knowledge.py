"""Losses and metrics of the knowledge heads (METHODS §2.5).

hypernym  several hypernyms per noun → the Eq. 7–9 multi-target loss; top-1 and
          top-5 accuracy (any hypernym among the top k)
sense     mean squared error against the sense vector; cosine similarity
verb      softmax cross-entropy over sequence positions at every predicate;
          pointer accuracy
Empty slots (masks 0) count nowhere; with no slot at all a loss is 0.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from kjax.losses.multihot import multihot_softmax_ce


def _mean(values, weights):
    total = weights.sum()
    return jnp.where(total > 0, (values * weights).sum() / jnp.maximum(total, 1e-12), 0.0)


def hypernym_loss(logits, batch):
    v = logits.shape[-1]
    ids, mask = batch["hyp_targets"], batch["hyp_target_mask"]
    weights = batch["hyp_mask"].astype(jnp.float32)
    loss, _ = multihot_softmax_ce(logits.reshape(-1, v), ids.reshape(-1, ids.shape[-1]),
                                  mask.reshape(-1, mask.shape[-1]), weights.reshape(-1))
    top5 = jax.lax.top_k(logits, 5)[1]                                   # [b, n, 5]
    hit = (top5[..., :, None] == ids[..., None, :]) & mask[..., None, :]  # [b, n, 5, K]
    top1 = _mean(hit[..., 0, :].any(-1).astype(jnp.float32), weights)
    top5_acc = _mean(hit.any((-1, -2)).astype(jnp.float32), weights)
    return loss, {"hypernym_top1": top1, "hypernym_top5": top5_acc}


def sense_loss(pred, batch):
    weights = batch["sense_mask"].astype(jnp.float32)
    target = batch["sense_vectors"]
    mse = _mean(((pred - target) ** 2).mean(-1), weights)
    cos = (pred * target).sum(-1) / jnp.maximum(
        jnp.linalg.norm(pred, axis=-1) * jnp.linalg.norm(target, axis=-1), 1e-8)
    return mse, {"sense_cosine": _mean(cos, weights)}


def verb_loss(logits, batch):
    targets = batch["verb_targets"]
    weights = (targets >= 0).astype(jnp.float32)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.maximum(targets, 0))
    correct = (jnp.argmax(logits, -1) == targets).astype(jnp.float32)
    return _mean(ce, weights), {"verb_accuracy": _mean(correct, weights)}
