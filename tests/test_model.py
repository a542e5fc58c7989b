"""The encoder against a straightforward numpy BERT, and its switches
(scan, remat, gather-only MLM, Eq. 1 hook) against each other."""
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kjax.model.config import EncoderConfig
from kjax.model.encoder import BertForPreTraining

CFG = dict(vocab_size=50, hidden_size=16, num_layers=2, num_heads=4, intermediate_size=32,
           max_position_embeddings=12, dtype="float32", layer_norm_eps=1e-12)


def inputs(batch=2, seq=10, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 50, (batch, seq)).astype(np.int32)
    types = (np.arange(seq) >= seq // 2).astype(np.int32)[None].repeat(batch, 0)
    mask = np.ones((batch, seq), np.int32)
    mask[1, -3:] = 0  # padding in the second example
    positions = np.array([[1, 3, 4], [0, 2, 6]], np.int32)
    return ids, types, mask, positions


def init(cfg, *args):
    model = BertForPreTraining(cfg)
    return model, nn.meta.unbox(model.init(jax.random.key(0), *args)["params"])


# ---- numpy reference: BERT as written in the paper -------------------------------------------
def np_layer_norm(x, p, eps=1e-12):
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def np_gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def np_bert(p, ids, types, mask, positions, cfg):
    p = jax.tree.map(np.asarray, p)
    e = p["embeddings"]
    seq = ids.shape[1]
    x = (e["word_embeddings"]["embedding"][ids] + e["position_embeddings"]["embedding"][:seq]
         + e["token_type_embeddings"]["embedding"][types])
    x = np_layer_norm(x, e["layer_norm"])
    H, Dh = cfg.num_heads, cfg.head_dim
    for i in range(cfg.num_layers):
        lp = p["encoder"][f"layer_{i}"]
        a = lp["attention"]
        proj = {n: np.einsum("bsd,dhk->bshk", x, a[n]["kernel"]) + a[n]["bias"]
                for n in ("query", "key", "value")}
        out = np.zeros_like(x)
        for h in range(H):
            q, k, v = (proj[n][:, :, h] for n in ("query", "key", "value"))
            s = q @ k.transpose(0, 2, 1) / math.sqrt(Dh)
            s = np.where(mask[:, None, :] > 0, s, -1e30)
            w = np.exp(s - s.max(-1, keepdims=True))
            w /= w.sum(-1, keepdims=True)
            out += (w @ v) @ a["out"]["kernel"][h]
        x = np_layer_norm(x + out + a["out"]["bias"], lp["attention_layer_norm"])
        hdn = np_gelu(x @ lp["mlp_in"]["kernel"] + lp["mlp_in"]["bias"])
        x = np_layer_norm(x + hdn @ lp["mlp_out"]["kernel"] + lp["mlp_out"]["bias"],
                          lp["mlp_layer_norm"])
    pooled = np.tanh(x[:, 0] @ p["pooler"]["kernel"] + p["pooler"]["bias"])
    nsp = pooled @ p["nsp"]["kernel"] + p["nsp"]["bias"]
    picked = np.take_along_axis(x, positions[..., None], 1)
    t = np_gelu(picked @ p["mlm_transform"]["kernel"] + p["mlm_transform"]["bias"])
    t = np_layer_norm(t, p["mlm_layer_norm"])
    mlm = t @ e["word_embeddings"]["embedding"].T + p["mlm_bias"]
    return x, mlm, nsp


def test_encoder_matches_numpy_reference():
    cfg = EncoderConfig(scan_layers=False, **CFG)
    args = inputs()
    model, params = init(cfg, *args)
    out = model.apply({"params": params}, *args)
    hidden, mlm, nsp = np_bert(params, *args, cfg)
    np.testing.assert_allclose(out["hidden"], hidden, atol=2e-5)
    np.testing.assert_allclose(out["mlm_logits"], mlm, atol=5e-5)
    np.testing.assert_allclose(out["nsp_logits"], nsp, atol=2e-5)


def test_mlm_head_gathers_only_masked_positions():
    cfg = EncoderConfig(scan_layers=False, **CFG)
    ids, types, mask, positions = inputs()
    model, params = init(cfg, ids, types, mask, positions)
    gathered = model.apply({"params": params}, ids, types, mask, positions)["mlm_logits"]
    everywhere = model.apply({"params": params}, ids, types, mask, None)["mlm_logits"]
    assert gathered.shape == (2, 3, cfg.vocab_size)
    assert everywhere.shape == (2, 10, cfg.vocab_size)
    np.testing.assert_allclose(gathered, np.take_along_axis(
        np.asarray(everywhere), positions[..., None], 1), atol=1e-6)


def stack_layers(params, n):
    layers = [params["encoder"].pop(f"layer_{i}") for i in range(n)]
    params["encoder"]["layers"] = jax.tree.map(lambda *a: jnp.stack(a), *layers)
    return params


@pytest.mark.parametrize("remat", ["none", "full", "dots_with_no_batch_dims_saveable"])
def test_scan_and_remat_compute_the_same_function(remat):
    args = inputs()
    loop = EncoderConfig(scan_layers=False, **CFG)
    _, params = init(loop, *args)
    scanned = EncoderConfig(scan_layers=True, remat_policy=remat, **CFG)
    want = BertForPreTraining(loop).apply({"params": params}, *args)
    stacked = stack_layers(jax.tree.map(lambda x: x, params), loop.num_layers)
    got = BertForPreTraining(scanned).apply({"params": stacked}, *args)
    np.testing.assert_allclose(got["hidden"], want["hidden"], atol=1e-5)
    # Gradients agree too (remat only changes what is recomputed).
    def loss(p, cfg):
        return BertForPreTraining(cfg).apply({"params": p}, *args)["mlm_logits"].sum()
    g_want = jax.grad(loss)(params, loop)
    g_got = jax.grad(loss)(stacked, scanned)
    np.testing.assert_allclose(g_got["encoder"]["layers"]["mlp_in"]["kernel"][1],
                               g_want["encoder"]["layer_1"]["mlp_in"]["kernel"], atol=1e-5)


def test_zero_shake_factor_is_bit_identical_and_nonzero_changes_logits():
    args = inputs()
    plain = EncoderConfig(**CFG)
    _, params = init(plain, *args)
    b = np.zeros((2, 10, 10), np.float32)
    b[:, 2, 1] = 1.0  # one (query, key) pair per example
    base = BertForPreTraining(plain).apply({"params": params}, *args)["hidden"]
    zero = EncoderConfig(shake_factor=(0.0, 0.0), **CFG)
    same = BertForPreTraining(zero).apply({"params": params}, *args, shake=b)["hidden"]
    assert np.array_equal(np.asarray(base), np.asarray(same))
    boosted = EncoderConfig(shake_factor=(0.5, 0.5), **CFG)
    moved = BertForPreTraining(boosted).apply({"params": params}, *args, shake=b)["hidden"]
    assert not np.allclose(np.asarray(base), np.asarray(moved))


def test_analysis_outputs_are_attention_weights_and_transformed_values():
    cfg = EncoderConfig(scan_layers=True, **CFG)
    args = inputs()
    _, params = init(cfg, *args)
    out = BertForPreTraining(cfg, return_analysis=True).apply({"params": params}, *args)
    alpha, fx = out["analysis"]["alpha"], out["analysis"]["fx"]
    assert alpha.shape == (2, 2, 4, 10, 10) and fx.shape == (2, 2, 4, 10, 16)
    np.testing.assert_allclose(alpha.sum(-1), 1.0, atol=1e-5)
    # [layer, batch, head, q, k]: the padded keys of example 1 get no weight.
    assert float(alpha[:, 1, :, :, -3:].max()) < 1e-6
    assert float(alpha[:, 0, :, :, -3:].min()) > 0


def test_bf16_compute_keeps_fp32_params():
    cfg = EncoderConfig(**{**CFG, "dtype": "bfloat16"})
    args = inputs()
    model, params = init(cfg, *args)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(params))
    out = model.apply({"params": params}, *args)
    assert out["hidden"].dtype == jnp.bfloat16
    assert out["mlm_logits"].dtype == jnp.float32


def test_scan_unroll_keeps_layout_numbers_and_dropout_masks():
    """model.scan_unroll changes how the scanned stack compiles, nothing else:
    the same stacked parameter tree (checkpoints restore across values), the
    same outputs, and — training — the same per-layer dropout masks."""
    args = inputs()
    base = EncoderConfig(**{**CFG, "num_layers": 3})
    _, params = init(base, *args)
    for unroll in (0,):
        cfg = EncoderConfig(**{**CFG, "num_layers": 3}, scan_unroll=unroll)
        _, other = init(cfg, *args)
        assert jax.tree.map(np.shape, other) == jax.tree.map(np.shape, params)
        for deterministic in (True, False):
            a, b = (jax.jit(lambda p, c=c: BertForPreTraining(c, deterministic=deterministic)
                            .apply({"params": p}, *args, rngs={"dropout": jax.random.key(5)})
                            ["hidden"])(params) for c in (base, cfg))
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_gelu_matches_erf_reference_in_value_and_slope_and_keeps_one_tensor():
    """kjax's GELU (kjax/model/layers.py) against float64 x·Φ(x) and its
    derivative Φ(x) + x·φ(x), in f32 and bf16; and the backward keeps one
    [n] tensor where jax.nn.gelu's erfc form keeps three."""
    from kjax.model.layers import gelu
    xs = np.linspace(-9.0, 9.0, 3601)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(xs / math.sqrt(2)))
    ref, slope = xs * cdf, cdf + xs * np.exp(-xs * xs / 2) / math.sqrt(2 * math.pi)
    x32 = jnp.asarray(xs, jnp.float32)
    y, vjp = jax.vjp(gelu, x32)
    np.testing.assert_allclose(y, ref, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(vjp(jnp.ones_like(x32))[0], slope, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(jax.vmap(jax.grad(gelu))(x32), slope, rtol=2e-6, atol=2e-6)
    xb = x32.astype(jnp.bfloat16)
    yb, vjpb = jax.vjp(gelu, xb)
    assert yb.dtype == jnp.bfloat16 and vjpb(jnp.ones_like(xb))[0].dtype == jnp.bfloat16
    exact = np.asarray(gelu(xb.astype(jnp.float32)), np.float64)   # same inputs, f32 math
    np.testing.assert_allclose(np.asarray(yb, np.float64), exact, rtol=8e-3, atol=1e-6)

    def residuals(f):
        _, f_vjp = jax.vjp(f, jnp.ones((4, 8), jnp.bfloat16))
        return [r for r in jax.tree.leaves(f_vjp) if getattr(r, "shape", ()) == (4, 8)]
    assert len(residuals(gelu)) == 1
    assert len(residuals(lambda x: jax.nn.gelu(x, approximate=False))) >= 2
