"""Multi-hot MLM losses (METHODS §2.4, Eq. 7–9) and the Table 14 ablations.

A masked morpheme made of n tokens has n correct answers; the hypernym head
(§2.5 item 1) reuses the same loss for nouns with several hypernyms. All
functions share one signature and work at fixed shapes (jit-able):

    logits      [N, V]  scores at N prediction slots (any float dtype; fp32 inside)
    target_ids  [N, K]  up to K target token ids per slot (padding: any id)
    target_mask [N, K]  bool, True for a valid target
    weights     [N]     slot weight; 0 for padded slots

and return `(loss, per_position)`: the weighted mean over slots (Σw = 0 → 0)
and the per-slot loss [N] for metrics.

Decisions the spec leaves open:
- A token listed twice in one slot is ONE target (y_i ∈ {0,1}); n counts
  distinct valid ids. Duplicates are found in [N, K, K] (K is small), so no
  dense [N, V] multi-hot array is ever built.
- Eq. 8's selection is a constant (a comparison has no gradient).
- A slot with Σ ny = 0 (every target already at ≥ 1/n, or no targets) has loss
  0 and still counts in the weighted mean's denominator: it was predicted and
  is satisfied. Its gradient is exactly 0, without NaN.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

LossFn = Callable[..., tuple[jax.Array, jax.Array]]


def distinct_targets(target_ids, target_mask):
    """[N, K] bool: True at the first valid occurrence of each id in its slot."""
    ids = target_ids.astype(jnp.int32)
    mask = target_mask.astype(bool)
    k = ids.shape[-1]
    same = ids[:, :, None] == ids[:, None, :]                         # [N, K(k), K(j)]
    earlier = jnp.arange(k)[None, :] < jnp.arange(k)[:, None]         # [k, j]: j < k
    repeated = jnp.any(same & mask[:, None, :] & earlier[None], axis=-1)
    return mask & ~repeated


def _gather(values, target_ids):
    """values[n, target_ids[n, k]] with ids clipped into range (padding is safe)."""
    ids = jnp.clip(target_ids.astype(jnp.int32), 0, values.shape[-1] - 1)
    return jnp.take_along_axis(values, ids, axis=-1)


def _weighted_mean(per_position, weights):
    weights = weights.astype(jnp.float32)
    total = weights.sum()
    return jnp.where(total > 0, (per_position * weights).sum() / jnp.maximum(total, 1e-12), 0.0)


def multihot_softmax_ce(logits, target_ids, target_mask, weights):
    """The target-probability-adjusted loss, METHODS Eq. 7–9."""
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    y = distinct_targets(target_ids, target_mask)
    n = y.sum(-1, keepdims=True).astype(jnp.float32)
    # Eq. 7: l_i = log S(O)_i − log(y_i / n) = log S(O)_i + log n for targets.
    # The where() keeps non-targets (−∞·0 in the paper) out of both passes.
    l = jnp.where(y, _gather(log_probs, target_ids) + jnp.log(jnp.maximum(n, 1.0)), 0.0)
    # Eq. 8: targets already at their share 1/n drop out.
    ny = jax.lax.stop_gradient((y & (l < 0)).astype(jnp.float32))
    count = ny.sum(-1)
    # Eq. 9, with Σ ny = 0 → 0 (safe denominator so the gradient stays finite).
    per_position = jnp.where(count > 0, -(l * ny).sum(-1) / jnp.maximum(count, 1.0), 0.0)
    return _weighted_mean(per_position, weights), per_position


def multihot_bce(logits, target_ids, target_mask, weights):
    """Sigmoid binary cross-entropy against the multi-hot target (Table 14's
    failing ablation), averaged over the vocabulary per slot (the Keras /
    TF convention). Uses BCE(x, y) = softplus(x) − x·y, so
    Σ_v BCE = Σ_v softplus(x_v) − Σ_targets x_t without a dense target."""
    x = logits.astype(jnp.float32)
    y = distinct_targets(target_ids, target_mask)
    on_targets = jnp.where(y, _gather(x, target_ids), 0.0).sum(-1)
    per_position = (jax.nn.softplus(x).sum(-1) - on_targets) / x.shape[-1]
    return _weighted_mean(per_position, weights), per_position


def multihot_summed_ce(logits, target_ids, target_mask, weights):
    """Plain softmax cross-entropy summed over the distinct targets of a slot
    (Table 14's middle ablation): −Σ_i y_i log S(O)_i, no Eq. 8 drop-out."""
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    y = distinct_targets(target_ids, target_mask)
    per_position = -jnp.where(y, _gather(log_probs, target_ids), 0.0).sum(-1)
    return _weighted_mean(per_position, weights), per_position


LOSSES: dict[str, LossFn] = {
    "eq9": multihot_softmax_ce,
    "bce": multihot_bce,
    "summed_ce": multihot_summed_ce,
}


def get_multihot_loss(name: str) -> LossFn:
    """'eq9' (METHODS Eq. 7–9) | 'bce' | 'summed_ce' (Table 14 ablations)."""
    try:
        return LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown multi-hot loss {name!r}; choose one of "
                         f"{', '.join(sorted(LOSSES))}") from None


def multihot_accuracy(logits, target_ids, target_mask, weights):
    """Masked-morpheme accuracy: a slot with n distinct targets is correct iff
    its n highest-scoring tokens are exactly the target set (ties broken by
    `lax.top_k`, lower id first). Slots without targets are left out.

    Returns (accuracy over slots with weight > 0 and n > 0, correct [N] bool).
    """
    y = distinct_targets(target_ids, target_mask)
    n = y.sum(-1)
    k = min(target_ids.shape[-1], logits.shape[-1])
    _, top = jax.lax.top_k(logits.astype(jnp.float32), k)              # [N, k]
    top_is_target = jnp.any((top[:, :, None] == target_ids[:, None, :]) & y[:, None, :], -1)
    # n distinct top-n tokens all in an n-element set ⇔ the sets are equal.
    needed = jnp.arange(k)[None, :] < n[:, None]
    correct = jnp.all(top_is_target | ~needed, -1) & (n > 0)
    counted = weights.astype(jnp.float32) * (n > 0)
    return _weighted_mean(correct.astype(jnp.float32), counted), correct
