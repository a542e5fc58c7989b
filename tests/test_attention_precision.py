"""The explicit attention path with its [b, h, q, k] arrays in the compute dtype
(what training runs, kjax/model/attention.py) against the fp32 reference path
(what the analysis reads): outputs and gradients within bf16 tolerance, the
custom backward equal to autodiff's, and the residuals kept for the backward
pass free of fp32 [b, h, q, k] arrays (why the compute dtype)."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import print_saved_residuals

from kjax.model import dropout_hash
from kjax.model.attention import explicit_attention, low_precision_attention
from kjax.model.attention_core import dense_shake, logits_mask
from test_attention_kernels import CASES, S, inputs, live_rows


def case_inputs(case):
    layout, bf, use_seg, window = CASES[case]
    q, k, v, valid, segments, pairs = inputs()
    shake = {"dense": dense_shake(pairs, S), "pairs": pairs, None: None}[layout]
    masks = dict(segment_ids=segments if use_seg else None, local_window=window)
    return (q, k, v), valid, masks, shake, jnp.float32(bf), live_rows(valid, masks["segment_ids"],
                                                                      window)


def attend(qkv, valid, masks, shake, bf, logits_dtype, weights):
    def loss(q, k, v):
        out, _ = explicit_attention(q, k, v, valid, **masks, shake=shake, bf=bf,
                                    logits_dtype=logits_dtype)
        return jnp.sum(out.astype(jnp.float32) * weights), out
    grads, out = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(*qkv)
    return [np.asarray(x, np.float32) for x in (out, *grads)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_bf16_logits_match_the_fp32_reference(case):
    """Same bf16-rounded q, k, v on both sides: the difference is the path's
    own rounding (logits, α and its gradient held in bf16), not the inputs'."""
    qkv, valid, masks, shake, bf, live = case_inputs(case)
    qkv16 = [x.astype(jnp.bfloat16) for x in qkv]
    # Undefined rows (no key to attend to; kjax never reads one) get no gradient.
    weights = jnp.asarray(np.random.default_rng(1).normal(size=qkv[0].shape)
                          * live[:, :, None, None], jnp.float32)
    ref = attend([x.astype(jnp.float32) for x in qkv16], valid, masks, shake, bf,
                 jnp.float32, weights)
    low = attend(qkv16, valid, masks, shake, bf, jnp.bfloat16, weights)
    rows = live[:, :, None, None]
    for name, r, lo in zip(("context", "dq", "dk", "dv"), ref, low):
        if name == "context":   # undefined rows are never read
            r, lo = np.where(rows, r, 0), np.where(rows, lo, 0)
        scale = np.abs(r).max()
        assert scale > 0.1, name
        # measured 0.3-0.6 % of the largest entry (CPU, 2026-11-26): 3x headroom
        assert np.abs(lo - r).max() <= 0.015 * scale, (name, np.abs(lo - r).max(), scale)
    assert low[0].dtype == np.float32 and not np.array_equal(low[0], ref[0])   # really bf16


@pytest.mark.parametrize("case,rate", [("plain", 0.0), ("dense_bf+_segments", 0.1),
                                       ("pairs_bf-_window", 0.1)])
def test_custom_backward_equals_autodiff(case, rate):
    """In fp32 the custom VJP of low_precision_attention is autodiff's gradient
    of the reference path to rounding: FlashAttention-2's row term Σ_d dO ⊙ O
    in place of Σ_k g ⊙ α, through attention dropout, Eq. 1 (its sign(s)
    factor) and every mask; and the forward is the reference's."""
    (q, k, v), valid, masks, shake, bf, live = case_inputs(case)
    dense = None if shake is None else dense_shake(shake, S)
    mask = logits_mask(valid, masks["segment_ids"], masks["local_window"])
    drop = None if rate == 0 else (
        lambda p: dropout_hash.dropout(p, dropout_hash.key_words(jax.random.key(3)), rate))
    weights = jnp.asarray(np.random.default_rng(4).normal(size=q.shape)
                          * live[:, :, None, None], jnp.float32)

    def reference(q, k, v):
        return jnp.sum(explicit_attention(q, k, v, valid, **masks, shake=shake, bf=bf,
                                          dropout=drop)[0] * weights)

    def custom(q, k, v):
        return jnp.sum(low_precision_attention(q, k, v, mask, dense, bf, drop) * weights)

    np.testing.assert_allclose(custom(q, k, v), reference(q, k, v), rtol=1e-6)
    for name, got, want in zip("qkv", jax.grad(custom, (0, 1, 2))(q, k, v),
                               jax.grad(reference, (0, 1, 2))(q, k, v)):
        assert np.abs(want).max() > 0.1, name
        np.testing.assert_allclose(got, want, atol=2e-6, err_msg=f"d{name}")


def residual_bytes(logits_dtype, capsys, shaken):
    """Bytes per [b, h, q, k] entry that autodiff keeps for the backward pass,
    and the fp32 arrays of that shape among them."""
    b, s, h, d = 2, 64, 4, 8
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(b, s, h, d)), jnp.bfloat16) for _ in range(3))
    valid = jnp.ones((b, s), jnp.int32)
    shake = jnp.asarray(rng.random((b, s, s)) < 0.05, jnp.float32) if shaken else None

    def dropout(p):   # flax's nn.Dropout, as the model applies it to α
        keep = jax.random.bernoulli(jax.random.key(0), 0.9, p.shape)
        return jnp.where(keep, p / jnp.asarray(0.9, p.dtype), jnp.zeros_like(p))

    def loss(q, k, v):
        out, _ = explicit_attention(q, k, v, valid, shake=shake, bf=0.5, dropout=dropout,
                                    logits_dtype=logits_dtype)
        return jnp.sum(out.astype(jnp.float32) ** 2)
    capsys.readouterr()
    print_saved_residuals(loss, q, k, v)
    shapes = re.findall(rf"(\w+)\[{b},{h},{s},{s}\]", capsys.readouterr().out)
    size = {"f32": 4, "bf16": 2, "bool": 1}
    return sum(size[t] for t in shapes), shapes.count("f32")


@pytest.mark.parametrize("shaken", [False, True])
def test_compute_dtype_keeps_no_fp32_logits_for_the_backward(capsys, shaken):
    """The reference keeps fp32 logits/α (4 bytes each) alive between forward
    and backward; the compute-dtype path keeps none, under half the bytes."""
    ref_bytes, ref_f32 = residual_bytes(jnp.float32, capsys, shaken)
    low_bytes, low_f32 = residual_bytes(jnp.bfloat16, capsys, shaken)
    assert ref_f32 >= 2 and low_f32 == 0
    assert low_bytes <= 0.6 * ref_bytes, (low_bytes, ref_bytes)
