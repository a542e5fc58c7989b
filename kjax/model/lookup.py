"""Embedding lookups and row gathers whose gradients accumulate in fp32 and
never contend.

`nn.Embed(dtype=bf16)` casts its table before the lookup, so every table's
gradient would be a bf16 scatter-add: updates that collide on a few rows
serialise on a GPU's atomics and round to bf16 at every add. Here the forward
values are the same (a gather from the fp32 table, cast after: the same bits
as cast-then-gather) and the backward is chosen per table:

    rows < SMALL_TABLE_ROWS   one_hot(ids)ᵀ · g in one matrix product with fp32
                              accumulation (token types, E_inpos, E_postag, and
                              positions that are not 0..s-1): no scatter at all;
    otherwise                 an fp32 scatter-add (the word table: 32k+ rows,
                              few updates per row, no contention to speak of).

Positions 0..s-1 (every unpacked BERT row) are a slice of the table broadcast
over the batch (`Table.leading_rows`); its gradient, the sum over the batch,
is taken as the lookup of 0..s-1, not as a reduce over the batch axis, whose
layout XLA:GPU spreads to the residual stream. Gathers of rows of an
activation (the MLM head's and the knowledge heads' positions, which may
repeat) scatter their gradient in fp32 too (`gather_rows`).

SMALL_TABLE_ROWS bounds the one-hot product's cost: 2·rows·d flops per
looked-up token against one scatter update, well under a millisecond of
tensor-core time for BERT-base's tokens at 1,024 rows. docs/PERFORMANCE.md,
"What decides speed: embedding gradients" has the measurements.
"""
from __future__ import annotations

from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp

SMALL_TABLE_ROWS = 1024


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def lookup(table: jax.Array, ids: jax.Array, dtype) -> jax.Array:
    """table[ids] in `dtype`; the table's gradient comes back in its own dtype,
    accumulated in fp32 (one-hot product for small tables, else fp32 scatter)."""
    return jnp.take(table, ids, axis=0).astype(dtype)


def _lookup_fwd(table, ids, dtype):
    return lookup(table, ids, dtype), (ids, jnp.zeros((0,) + table.shape, table.dtype))


def _lookup_bwd(dtype, residuals, g):
    ids, like = residuals
    rows, width = like.shape[1:]
    return table_gradient(ids, g, rows, width).astype(like.dtype), None


lookup.defvjp(_lookup_fwd, _lookup_bwd)


def table_gradient(ids: jax.Array, g: jax.Array, rows: int, width: int) -> jax.Array:
    """Σ over every looked-up position of g into its row: [rows, width] fp32."""
    g = g.reshape(-1, width)
    ids = ids.reshape(-1)
    if rows < SMALL_TABLE_ROWS:
        # One nonzero product per term: exact in any dtype; the sum in fp32.
        one_hot = jax.nn.one_hot(ids, rows, dtype=g.dtype)
        return jnp.einsum("tr,td->rd", one_hot, g, preferred_element_type=jnp.float32,
                          precision=jax.lax.Precision.HIGHEST)
    return jnp.zeros((rows, width), jnp.float32).at[ids].add(g.astype(jnp.float32))


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def leading_rows(table: jax.Array, like: jax.Array, dtype) -> jax.Array:
    """table[0..s-1] broadcast to like's [b, s] in `dtype` (positions 0..s-1)."""
    return jnp.broadcast_to(table[:like.shape[-1]], like.shape + table.shape[1:]).astype(dtype)


def _rows_fwd(table, like, dtype):
    return leading_rows(table, like, dtype), jnp.zeros((0,) + table.shape, table.dtype)


def _rows_bwd(dtype, empty, g):
    g = g.reshape(-1, *g.shape[-2:])                                   # [b, s, d]
    # Row p's gradient, the sum over the batch of g[:, p], as the lookup of
    # positions 0..s-1: XLA:GPU lays a reduce over the batch axis out with that
    # axis minor and spreads the layout to the residual stream (module doc).
    ids = jnp.broadcast_to(jnp.arange(g.shape[1]), g.shape[:2])
    return table_gradient(ids, g, empty.shape[1], empty.shape[2]).astype(empty.dtype), None


leading_rows.defvjp(_rows_fwd, _rows_bwd)


@jax.custom_vjp
def gather_rows(x: jax.Array, positions: jax.Array) -> jax.Array:
    """x [b, s, d] at positions [b, p] → [b, p, d]; the gradient (positions may
    repeat) is scattered in fp32, then cast to x's dtype."""
    return jnp.take_along_axis(x, positions[..., None], axis=1)


def _gather_fwd(x, positions):
    return gather_rows(x, positions), (positions, jnp.zeros((0,) + x.shape, x.dtype))


def _gather_bwd(residuals, g):
    positions, like = residuals
    b, s, d = like.shape[1:]
    rows = jnp.arange(b)[:, None]
    grad = jnp.zeros((b, s, d), jnp.float32).at[rows, positions].add(g.astype(jnp.float32))
    return grad.astype(like.dtype), None


gather_rows.defvjp(_gather_fwd, _gather_bwd)


class Table(nn.Embed):
    """nn.Embed with the same parameter (`embedding`, same init and axes: the
    same checkpoints) whose lookups go through `lookup`."""

    def __call__(self, ids: jax.Array) -> jax.Array:
        if self.num_embeddings == 1:   # as nn.Embed: a one-row table broadcasts
            ids = jnp.zeros_like(ids)
        return lookup(self.embedding, ids, self.dtype or self.embedding.dtype)

    def leading_rows(self, like: jax.Array) -> jax.Array:
        """Rows 0..s-1 broadcast over like's [b, s] (unpacked BERT positions)."""
        return leading_rows(self.embedding, like, self.dtype or self.embedding.dtype)
