"""ELECTRA's replaced-token detection (METHODS §6), in fp32: a sigmoid
cross-entropy per real token (attention_mask) on whether the discriminator's
input differs from the original text there. A generator sample equal to the
original token counts as original.

Every figure is a mean over the real tokens, so microbatches combine exactly
under kjax/train/accumulation.py's share weighting; precision and recall are
ratios of two such means (`rtd_caught_share` / `rtd_flagged_share`, / the
replaced share), formed after they are combined (kjax.objectives.with_ratios).
"""
from __future__ import annotations

import jax.numpy as jnp
import optax


def original_ids(batch: dict):
    """int32 [b, s]: the text before masking, the MLM targets written back at
    the real prediction slots (weight > 0)."""
    ids, positions = jnp.asarray(batch["input_ids"]), jnp.asarray(batch["mlm_positions"])
    rows = jnp.arange(ids.shape[0])[:, None]
    targets = jnp.where(batch["mlm_weights"] > 0, batch["mlm_ids"], ids[rows, positions])
    return ids.at[rows, positions].set(targets.astype(ids.dtype))


def rtd_loss(logits, seen_ids, batch: dict) -> tuple[jnp.ndarray, dict]:
    """(mean sigmoid CE over real tokens, metrics), `logits` [b, s] > 0 meaning
    replaced, `seen_ids` [b, s] the tokens the discriminator read."""
    weights = batch["attention_mask"].astype(jnp.float32)
    replaced = (seen_ids != original_ids(batch)).astype(jnp.float32)
    flagged = (logits > 0).astype(jnp.float32)
    total = jnp.maximum(weights.sum(), 1e-8)
    mean = lambda x: (x * weights).sum() / total  # noqa: E731
    loss = mean(optax.sigmoid_binary_cross_entropy(logits.astype(jnp.float32), replaced))
    return loss, {"rtd_loss": loss, "rtd_accuracy": mean(flagged == replaced),
                  "replaced_share": mean(replaced), "rtd_flagged_share": mean(flagged),
                  "rtd_caught_share": mean(flagged * replaced)}
