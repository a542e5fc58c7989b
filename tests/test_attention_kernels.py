"""The attention implementations (kjax/model/attention_core.py) against the
explicit path: the Pallas flash kernel with Eq. 1 (METHODS §1.2) in interpret
mode, jax.nn.dot_product_attention, B's pairs layout against dense B, and a
train step with each implementation."""
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from kjax.model.attention import explicit_attention
from kjax.model.attention_core import dense_shake, fused_attention, logits_mask
from kjax.model.flash.attention import flash_attention

B, S, H, D = 2, 32, 2, 8
BLOCK = 8                      # 4 × 4 tiles: the online softmax crosses blocks


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (jnp.asarray(rng.normal(size=(B, S, H, D)), jnp.float32) for _ in range(3))
    q = q / np.sqrt(D)                                   # the model scales q first
    valid = jnp.asarray(np.arange(S)[None] < np.asarray([[25], [S]]), jnp.int32)
    segments = jnp.asarray(np.repeat(np.asarray([[1, 2, 3, 0], [1, 1, 2, 2]]), S // 4, axis=1))
    # Pairs: each query boosts at most one key run; weights float8 holds exactly.
    start = rng.integers(0, S - 3, (B, S))
    pairs = {"key_start": jnp.asarray(start, jnp.int32),
             "key_end": jnp.asarray(start + rng.integers(1, 4, (B, S)), jnp.int32),
             "weight": jnp.asarray(rng.choice([0.0, 0.0, 1.0, 1.5, 2.0], (B, S)), jnp.float32)}
    pairs["key_end"] = pairs["key_end"].at[0, 20:].set(S)   # runs onto example 0's padded keys
    return q, k, v, valid, segments, pairs


def live_rows(valid, segments, window):
    """[b, q]: queries with at least one key to attend to (the rest are undefined)."""
    mask = jnp.broadcast_to(logits_mask(valid, segments, window), (B, 1, S, S))
    return np.asarray(mask.any(-1))[:, 0]


CASES = {   # shake layout, bf, segments?, local window
    "plain": (None, 0.0, False, None),
    "dense_bf+_segments": ("dense", 0.7, True, None),
    "pairs_bf-_window": ("pairs", -0.4, False, 12),
    "pairs_bf+_segments_window": ("pairs", 0.5, True, 12),
    "dense_bf-_segments_window": ("dense", -0.3, True, 20),
}


def case_inputs(case):
    """(q, k, v, valid, live rows, cotangent, masks) of one of CASES: the
    cotangent is zero on rows no key reaches (a padded query's output is
    never read); masks are the keyword arguments both paths take."""
    layout, bf, use_segments, window = CASES[case]
    q, k, v, valid, segments, pairs = inputs()
    segments = segments if use_segments else None
    shake = {"dense": dense_shake(pairs, S), "pairs": pairs, None: None}[layout]
    live = live_rows(valid, segments, window)
    cot = jnp.asarray(np.random.default_rng(1).normal(size=(B, S, H, D)), jnp.float32)
    masks = dict(segment_ids=segments, local_window=window, shake=shake, bf=bf)
    return q, k, v, valid, live, cot * live[:, :, None, None], masks


@pytest.mark.parametrize("case", sorted(CASES))
def test_flash_kernel_matches_explicit_path_fp32(case):
    q, k, v, valid, live, cot, masks = case_inputs(case)

    def flash(q, k, v):
        return flash_attention(q, k, v, valid, **masks, block_q=BLOCK, block_k=BLOCK,
                               interpret=True)

    def explicit(q, k, v):
        return explicit_attention(q, k, v, valid, **masks)[0]

    got, want = flash(q, k, v), explicit(q, k, v)
    np.testing.assert_allclose(np.asarray(got)[live], np.asarray(want)[live], atol=1e-5, rtol=0)
    assert not np.asarray(got)[~live].any()               # undefined rows come back as zeros
    grads = [jax.grad(lambda *a: (f(*a) * cot).sum(), (0, 1, 2))(q, k, v) for f in (flash, explicit)]
    for name, g, w in zip("qkv", *grads):
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=0, err_msg=f"d{name}")


def test_flash_kernel_eq1_really_moves_the_output():
    """A guard on the test above: with bf ≠ 0 the shaken and plain outputs differ
    where B is non-zero, so matching the explicit path is not vacuous."""
    q, k, v, valid, _, pairs = inputs()
    run = lambda bf: flash_attention(q, k, v, valid, shake=pairs, bf=bf,  # noqa: E731
                                     block_q=BLOCK, block_k=BLOCK, interpret=True)
    moved = np.abs(np.asarray(run(0.7) - run(0.0))).max(axis=(2, 3))[1]   # example 1: no padding
    boosted = np.asarray(pairs["weight"])[1] > 0
    assert (moved[boosted] > 1e-4).all() and (moved[~boosted] == 0).all()


def test_flash_kernel_gives_b_and_bf_no_gradient():
    q, k, v, valid, _, pairs = inputs()
    dense = dense_shake(pairs, S)
    g_b, g_bf = jax.grad(lambda b, bf: flash_attention(
        q, k, v, valid, shake=b, bf=bf, block_q=BLOCK, block_k=BLOCK, interpret=True).sum(),
        (0, 1))(dense, 0.5)
    assert not np.asarray(g_b).any() and float(g_bf) == 0.0


@pytest.mark.parametrize("segments_on,window", [(False, None), (True, None), (False, 12),
                                                (True, 20)])
def test_dot_product_attention_matches_explicit_path(segments_on, window):
    q, k, v, valid, segments, _ = inputs(2)
    segments = segments if segments_on else None
    live = live_rows(valid, segments, window)
    masks = dict(segment_ids=segments, local_window=window)
    got = fused_attention("dot_product", q, k, v, valid, **masks)
    want = explicit_attention(q, k, v, valid, **masks)[0]
    np.testing.assert_allclose(np.asarray(got)[live], np.asarray(want)[live], atol=1e-6, rtol=0)
    cot = jnp.ones_like(q) * live[:, :, None, None]
    g = jax.grad(lambda q, k, v: (fused_attention("dot_product", q, k, v, valid, **masks)
                                  * cot).sum(), (0, 1, 2))(q, k, v)
    w = jax.grad(lambda q, k, v: (explicit_attention(q, k, v, valid, **masks)[0]
                                  * cot).sum(), (0, 1, 2))(q, k, v)
    for a, b in zip(g, w):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)


def test_segments_never_leak_and_window_is_two_sided():
    """Changing keys of another segment (or outside the window) changes nothing."""
    q, k, v, valid, segments, _ = inputs(3)
    for impl in ("dot_product", "flash"):
        run = lambda v: fused_attention(impl, q, k, v, valid, segment_ids=segments,  # noqa
                                        local_window=8)
        other = v.at[0, 8:].add(5.0)                      # segments 2, 3, 0 of example 0
        far = v.at[0, 5:].add(5.0)
        base = np.asarray(run(v))
        np.testing.assert_array_equal(np.asarray(run(other))[0, :8], base[0, :8])
        np.testing.assert_array_equal(np.asarray(run(far))[0, :1], base[0, :1])  # |q−k| > 4
        assert np.abs(np.asarray(run(far))[0, 1] - base[0, 1]).max() > 0        # key 5 is in


def test_flash_kernel_for_tpu_v3_widens_its_products_to_the_same_numbers():
    """v2/v3's Mosaic takes no bf16 matmul operand: lowered for a "TPU v3" every
    product in the kernels takes fp32 operands (for a v4, bf16), and since a
    bf16 value is exact in fp32 the outputs and gradients are the same bits."""
    from kjax.config.platform import lowering_for
    q, k, v, valid, live, cot, masks = case_inputs("pairs_bf+_segments_window")
    q, k, v = (x.astype(jnp.bfloat16) for x in (q, k, v))

    def run(kind):
        def loss(q, k, v):
            out = flash_attention(q, k, v, valid, **masks, dropout_rate=0.1,
                                  dropout_words=jnp.asarray([3, 4], jnp.int32),
                                  block_q=BLOCK, block_k=BLOCK, backend="tpu", interpret=True)
            return jnp.sum(out.astype(jnp.float32) * cot), out
        with lowering_for("tpu", kind):
            jaxpr = jax.make_jaxpr(jax.grad(loss, (0, 1, 2), has_aux=True))(q, k, v)
            grads, out = jax.grad(loss, (0, 1, 2), has_aux=True)(q, k, v)
        return jaxpr, [np.asarray(x, np.float32) for x in (out, *grads)]

    def operand_dtypes(jaxpr):
        found = set()
        for eqn in jaxpr.eqns:
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                found |= operand_dtypes(sub)
            if eqn.primitive.name == "dot_general":
                found |= {str(x.aval.dtype) for x in eqn.invars}
        return found
    (v3_jaxpr, v3), (v4_jaxpr, v4) = run("TPU v3"), run("TPU v4")
    assert operand_dtypes(v3_jaxpr.jaxpr) == {"float32"}
    assert "bfloat16" in operand_dtypes(v4_jaxpr.jaxpr)
    for name, a, b in zip(("out", "dq", "dk", "dv"), v3, v4):
        np.testing.assert_array_equal(a, b, err_msg=name)
