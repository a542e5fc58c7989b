"""MLM and NSP losses and their accuracies (METHODS §4), in fp32.

MLM logits exist only at the gathered masked positions ([b, p, V]); padded
prediction slots have weight 0 and count nowhere.

The train and eval steps sum the objectives of kjax/objectives (the one
composition of the pretraining loss); these are the pieces they call.
"""
from __future__ import annotations

import jax.numpy as jnp
import optax

from kjax.losses.multihot import get_multihot_loss, multihot_accuracy


def weighted_ce(logits, labels, weights):
    """Mean softmax cross-entropy over rows with weight > 0, and accuracy."""
    losses = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
    total = jnp.maximum(weights.sum(), 1e-8)
    correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
    return (losses * weights).sum() / total, (correct * weights).sum() / total


def multihot_mlm(logits, batch, name: str):
    """Masked morphemes with several target tokens each (METHODS §2.4)."""
    v = logits.shape[-1]
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
    args = (flat(logits).reshape(-1, v), flat(batch["mlm_target_ids"]),
            flat(batch["mlm_target_mask"]), flat(batch["mlm_weights"]))
    loss, _ = get_multihot_loss(name)(*args)
    accuracy, correct = multihot_accuracy(*args)
    return loss, accuracy
