"""Bidirectional multi-head self-attention with the SHAKE logit modifier.

    q, k = rope(q), rope(k)                      (modern recipe only: kjax/model/rope.py)
    score = q·kᵀ / sqrt(d)                       (scaled logits)
    score += |score ⊙ B| · bf                    (METHODS §1.2, Eq. 1)
    α = softmax(score where the mask attends)
    y_i = Σ_j α_ij f(x_j) + b_O,  f(x) = (x W_V + b_V) W_O     (METHODS §3)

B arrives per example ([batch, q, k], broadcast over heads, or its pairs
layout: kjax/shake/matrix.py); bf is this layer's boost factor. When the
model does not shake, the Eq. 1 line is not even traced, so plain attention
costs nothing extra and is bit-identical. With `return_analysis` the layer
also returns α and f(x) per head, which the norm-based analysis
(‖α_ij f(x_j)‖) needs.

The lines above run as written on the explicit ("xla") path, the reference
(in a bf16 model its [b, h, q, k] arrays are held in bf16 and the softmax
sums in fp32: `explicit_attention`);
`model.attention_impl` may send a call to a fused implementation instead
(jax.nn.dot_product_attention, or the Pallas kernel with Eq. 1 inside):
kjax/model/attention_core.py says which runs when.
"""
from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.extend
import jax.numpy as jnp

from kjax.model import dropout_hash
from kjax.model.attention_core import (MASK_VALUE, choose_impl, dense_shake, fused_attention,
                                       logits_mask)
from kjax.model.config import EncoderConfig
from kjax.model.layers import kernel_init, zeros_init
from kjax.model.rope import apply_rope


def shake_scores(scores: jax.Array, shake: jax.Array, bf: jax.Array) -> jax.Array:
    """Eq. 1 on scaled logits [b, h, q, k] with B [b, q, k] (same for every head)."""
    b = shake.astype(scores.dtype)[:, None, :, :]
    return scores + jnp.abs(scores * b) * bf


def explicit_attention(q, k, v, attention_mask, *, segment_ids=None, local_window=None,
                       shake=None, bf=None, dropout=None, logits_dtype=jnp.float32):
    """The module doc's lines as written: (context [b, s, h, d], α [b, h, q, k]).
    q is already scaled; `dropout` (α → α) is applied to α before α·V.

    `logits_dtype` is the dtype the [b, h, q, k] arrays are held in: float32
    (the reference; α for the analysis) or q's dtype (training in bf16), where
    Eq. 1, the mask and the softmax still compute in fp32 inside one function
    with its own backward (`low_precision_attention`), only bf16 logits are
    stored, and α is not returned (None)."""
    mask = logits_mask(attention_mask, segment_ids, local_window)
    shake = None if shake is None else dense_shake(shake, k.shape[1])
    if jnp.dtype(logits_dtype) == jnp.float32:
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
        if shake is not None:
            scores = shake_scores(scores, shake, bf)
        probs = jax.nn.softmax(jnp.where(mask, scores, MASK_VALUE), axis=-1)
    else:
        return low_precision_attention(q.astype(logits_dtype), k.astype(logits_dtype),
                                       v.astype(logits_dtype), mask, shake, bf, dropout), None
    dropped = probs if dropout is None else dropout(probs)
    return jnp.einsum("bhqk,bkhd->bqhd", dropped.astype(q.dtype), v), probs


def low_precision_attention(q, k, v, mask, shake, bf, dropout=None):
    """α·V with α = softmax(Eq. 1(q·kᵀ) where mask), dropout on α, its [b, h, q, k]
    arrays held in q's dtype and computed in fp32 (`explicit_attention`'s
    compute-dtype branch); → context [b, s, h, d] in q's dtype.

    Why a custom VJP over the whole call, not autodiff: autodiff keeps the fp32
    softmax [b, h, q, k] for the backward (4 bytes an entry, written and read
    back), and its gradient of the softmax, dx = α ⊙ (g − Σ_k g ⊙ α), needs a
    pass over g before dx exists, so XLA stores g and recomputes α ⊙ (g − ·)
    from the logits inside both the dq and the dk products (each reads two
    [b, h, q, k] arrays). FlashAttention-2's identity Σ_k g ⊙ α = Σ_d dO ⊙ O
    (dropout included: O = dropout(α)·V) gives that row sum from two [b, s, h, d]
    arrays, so the product dO·Vᵀ writes dx in one pass and dq, dk each read it
    once. Kept for the backward: the bf16 logits and the softmax' row max and
    sum (fp32 [b, h, q, 1]); α is recomputed from them to the same bits."""
    drop, consts = None, ()
    if dropout is not None:
        # The dropout's closed-over arrays (its key words, example ids) become
        # arguments: a custom VJP's function may not close over traced values.
        closed = jax.make_jaxpr(dropout)(jax.ShapeDtypeStruct(
            (q.shape[0], q.shape[2], q.shape[1], k.shape[1]), q.dtype))
        consts, jaxpr = tuple(closed.consts), closed.jaxpr
        drop = lambda p, *c: jax.extend.core.jaxpr_as_fun(  # noqa: E731
            jax.extend.core.ClosedJaxpr(jaxpr, c))(p)[0]
    return _lp_attention(drop, q, k, v, mask, shake, bf, *consts)


def _probs(scores, mask, shake, bf):
    """(α in the scores' dtype, row max, row sum): softmax as jax.nn.softmax
    computes it, in fp32 (its bits are the same in the forward and backward)."""
    x = scores.astype(jnp.float32)
    if shake is not None:
        x = shake_scores(x, shake, bf)
    x = jnp.where(mask, x, MASK_VALUE)
    top = jnp.max(x, axis=-1, keepdims=True)
    e = jnp.exp(x - top)
    total = jnp.sum(e, axis=-1, keepdims=True)
    return (e / total).astype(scores.dtype), top, total


def _recomputed(scores, top, total, mask, shake, bf):
    x = scores.astype(jnp.float32)
    if shake is not None:
        x = shake_scores(x, shake, bf)
    return (jnp.exp(jnp.where(mask, x, MASK_VALUE) - top) / total).astype(scores.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _lp_attention(drop, q, k, v, mask, shake, bf, *consts):
    return _lp_attention_fwd(drop, q, k, v, mask, shake, bf, *consts)[0]


def _lp_attention_fwd(drop, q, k, v, mask, shake, bf, *consts):
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=q.dtype)
    probs, top, total = _probs(scores, mask, shake, bf)
    dropped = probs if drop is None else drop(probs, *consts)
    out = jnp.einsum("bhqk,bkhd->bqhd", dropped, v)
    return out, (q, k, v, scores, top, total, out, mask, shake, bf, consts)


def _lp_attention_bwd(drop, residuals, g):
    q, k, v, scores, top, total, out, mask, shake, bf, consts = residuals
    probs = _recomputed(scores, top, total, mask, shake, bf)
    if drop is None:
        dropped, drop_vjp = probs, lambda x: (x,)
    else:
        dropped, drop_vjp = jax.vjp(lambda p: drop(p, *consts), probs)
    dv = jnp.einsum("bhqk,bqhd->bkhd", dropped, g)
    dprobs = drop_vjp(jnp.einsum("bqhd,bkhd->bhqk", g, v))[0]
    # Σ_k g_k α_k = Σ_d dO_d O_d, per (b, h, q): FlashAttention-2's row term
    rows = jnp.einsum("bqhd,bqhd->bhq", g.astype(jnp.float32),
                      out.astype(jnp.float32))[..., None]
    dx = jnp.where(mask, probs.astype(jnp.float32) * (dprobs.astype(jnp.float32) - rows), 0.0)
    if shake is not None:   # d|s·B|/ds = B·sign(s) for B ≥ 0, jnp.abs's sign(0) = +1
        b = shake.astype(jnp.float32)[:, None, :, :]
        dx = dx * (1.0 + bf * b * jnp.where(scores >= 0, 1.0, -1.0))
    ds = dx.astype(scores.dtype)
    dq = jnp.einsum("bhqk,bkhd->bqhd", ds, k)
    dk = jnp.einsum("bhqk,bqhd->bkhd", ds, q)
    return (dq, dk, dv, None, None, None) + tuple(None for _ in consts)


_lp_attention.defvjp(_lp_attention_fwd, _lp_attention_bwd)


class HeadProjection(nn.Module):
    """x [b, s, d] → [b, s, heads, head_dim] (query/key/value), or with
    `merge`, [b, s, heads, head_dim] → [b, s, d] (the output projection W_O).
    Kernels keep the head axes explicit so they shard by head."""
    config: EncoderConfig
    merge: bool = False

    @nn.compact
    def __call__(self, x):
        cfg = self.config
        heads, head_dim, d = cfg.num_heads, cfg.head_dim, cfg.hidden_size
        if self.merge:
            shape, axes, bias_shape, bias_axes = (heads, head_dim, d), ("heads", "kv", "embed"), \
                (d,), ("embed",)
        else:
            shape, axes, bias_shape, bias_axes = (d, heads, head_dim), ("embed", "heads", "kv"), \
                (heads, head_dim), ("heads", "kv")
        kernel = self.param("kernel", kernel_init(cfg, axes), shape, cfg.weight_dtype)
        spec = "bshd,hdD->bsD" if self.merge else "bsD,Dhd->bshd"
        y = jnp.einsum(spec, x.astype(cfg.compute_dtype), kernel.astype(cfg.compute_dtype))
        if not cfg.use_bias:   # the modern recipe is bias-free
            return y
        bias = self.param("bias", zeros_init(bias_axes), bias_shape, cfg.weight_dtype)
        return y + bias.astype(cfg.compute_dtype)


class SelfAttention(nn.Module):
    """`attention_mask` [b, k] (1 attends); optional `segment_ids` [b, s]
    (packed documents never attend across) and `local_window` w (a query
    sees keys within w // 2 positions; None: global attention); optional
    `rope` (cos, sin) [b, s, head_dim] rotates q and k (the modern recipe)."""
    config: EncoderConfig
    deterministic: bool = True
    return_analysis: bool = False
    local_window: int | None = None

    @nn.compact
    def __call__(self, x, attention_mask, shake=None, bf=None, segment_ids=None, rope=None,
                 example_ids=None):
        cfg = self.config
        head_dim = cfg.head_dim
        q, k, v = (HeadProjection(cfg, name=n)(x) for n in ("query", "key", "value"))
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        q = q * jnp.asarray(1.0 / math.sqrt(head_dim), q.dtype)
        shake = shake if cfg.shakes else None
        drop = None
        if cfg.attention_dropout_rate > 0 and not self.deterministic:
            # The layer's key (per layer under nn.scan's split, per step from the
            # step's key) → the keep bits of kjax/model/dropout_hash.py, on any path.
            drop = dict(rate=cfg.attention_dropout_rate, broadcast=cfg.attention_dropout_broadcast,
                        words=dropout_hash.key_words(self.make_rng("dropout")),
                        examples=example_ids)
        impl = choose_impl(cfg.attention_impl, shaking=shake is not None,
                           explicit=self.return_analysis, dropping=drop is not None,
                           dtype=q.dtype, windowed=self.local_window is not None)
        masks = dict(segment_ids=segment_ids, local_window=self.local_window)
        if impl != "xla":
            context, probs = fused_attention(impl, q, k, v, attention_mask, **masks,
                                             shake=shake, bf=bf, dropout=drop,
                                             tiles=cfg.attention_tiles), None
        else:
            dropout = None if drop is None else (
                lambda p: dropout_hash.dropout(p, drop["words"], drop["rate"], drop["broadcast"],
                                               drop["examples"]))
            # α for the analysis stays fp32 (norms of α·f(x)); training holds q's dtype.
            context, probs = explicit_attention(
                q, k, v, attention_mask, **masks, shake=shake, bf=bf, dropout=dropout,
                logits_dtype=jnp.float32 if self.return_analysis else q.dtype)
        out_proj = HeadProjection(cfg, merge=True, name="out")
        y = out_proj(context)
        if not self.return_analysis:
            return y, None
        # f(x_j) per head: the value vector mapped through that head's slice of W_O.
        w_o = nn.meta.unbox(out_proj.variables["params"]["kernel"]).astype(jnp.float32)
        fx = jnp.einsum("bkhd,hdD->bhkD", v.astype(jnp.float32), w_o)
        return y, {"alpha": probs, "fx": fx}
