"""Rotary position embeddings (RoFormer; ModernBERT's form): each head vector
is rotated pair-wise by angles that grow with its position, so q·k depends
only on the positions' difference.

    inv_freq_j = θ^(−2j/d),  j = 0 .. d/2 − 1
    angle[p, j] = p · inv_freq_j,  cos/sin over [angle, angle] (d values)
    rope(x) = x · cos + rotate_half(x) · sin,  rotate_half([x1, x2]) = [−x2, x1]

The "rotate half" pairing (dimension j with j + d/2) is the one transformers'
ModernBERT uses, so exported weights need no permutation. Positions come from
the batch: packed rows restart them per document, shared positions (SHAKE
variant 5) repeat them.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def rope_tables(position_ids: jax.Array, head_dim: int, theta: float):
    """(cos, sin) [b, s, head_dim] in fp32 for integer positions [b, s]."""
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    angles = position_ids.astype(jnp.float32)[..., None] * inv_freq
    angles = jnp.concatenate([angles, angles], axis=-1)
    return jnp.cos(angles), jnp.sin(angles)


def rotate_half(x: jax.Array) -> jax.Array:
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([-x2, x1], axis=-1)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """x [b, s, heads, d] rotated in fp32, returned in its dtype."""
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    xf = x.astype(jnp.float32)
    return (xf * cos + rotate_half(xf) * sin).astype(x.dtype)
