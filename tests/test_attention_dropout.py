"""Attention dropout from the counter-based hash (kjax/model/dropout_hash.py):
the flash kernel (interpret mode) against the explicit path with the same
keep bits, the bits' statistics (rate, independence across examples, heads,
rows and steps), their independence of the mesh, and HF's broadcast mask."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from kjax.config.schema import LOGICAL_RULES
from kjax.model import dropout_hash
from kjax.model.attention import explicit_attention
from kjax.model.attention_core import choose_impl, fused_attention
from kjax.model.flash.attention import flash_attention
from kjax.model.flash.tiles import TRITON_TILES, Tiles, kernel_tiles
from test_attention_kernels import BLOCK, case_inputs

RATE = 0.1
WORDS = dropout_hash.key_words(jax.random.key(7))


# padding everywhere; segments, a local window, dense and pairs B among them
@pytest.mark.parametrize("case,broadcast", [("plain", False), ("dense_bf+_segments", False),
                                            ("pairs_bf+_segments_window", False),
                                            ("pairs_bf-_window", True)])
def test_flash_dropout_matches_explicit_path(case, broadcast):
    """Outputs and dq, dk, dv equal to rounding (fp32) at attention dropout 0.1,
    for padding, segments, local windows and Eq. 1 dense and pairs."""
    q, k, v, valid, live, cot, masks = case_inputs(case)

    def flash(q, k, v, rate=RATE):
        return flash_attention(q, k, v, valid, **masks, dropout_rate=rate, dropout_words=WORDS,
                               dropout_broadcast=broadcast, block_q=BLOCK, block_k=BLOCK,
                               interpret=True)

    def explicit(q, k, v):
        drop = lambda p: dropout_hash.dropout(p, WORDS, RATE, broadcast)  # noqa: E731
        return explicit_attention(q, k, v, valid, **masks, dropout=drop)[0]

    got, want = np.asarray(flash(q, k, v)), np.asarray(explicit(q, k, v))
    np.testing.assert_allclose(got[live], want[live], atol=1e-5, rtol=0)
    assert np.abs(got - np.asarray(flash(q, k, v, 0.0)))[live].max() > 1e-2   # not vacuous
    grads = [jax.grad(lambda *a: (f(*a) * cot).sum(), (0, 1, 2))(q, k, v)
             for f in (flash, explicit)]
    for name, g, w in zip("qkv", *grads):
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=0, err_msg=f"d{name}")


# each kernel its own blocks, as on GPU (forward 16 × 8, dq 8 × 16, dk/dv 16 × 8, over
# 32 positions: the loops cross 2–4 blocks); the transposed dk/dv kernel (keys × queries)
# with pairs and with dense B; and the TPU layout [b, h, s, d]
@pytest.mark.parametrize("tiling,backend,case", [
    ("per_kernel", None, "pairs_bf+_segments_window"),
    ("transposed_dkv", None, "pairs_bf+_segments_window"),
    ("transposed_dkv", None, "dense_bf-_segments_window"),
    ("tpu_layout", "tpu", "pairs_bf+_segments_window")])
def test_flash_kernel_tilings_and_layouts_give_the_same_attention(tiling, backend, case):
    q, k, v, valid, live, cot, masks = case_inputs(case)
    tiles = {"per_kernel": (Tiles(16, 8), Tiles(8, 16), Tiles(16, 8)),
             "transposed_dkv": (Tiles(16, 8), Tiles(8, 16), Tiles(16, 8, transposed=1)),
             "tpu_layout": None}[tiling]

    def flash(q, k, v):
        return flash_attention(q, k, v, valid, **masks, dropout_rate=RATE, dropout_words=WORDS,
                               tiles=tiles, block_q=None if tiles else BLOCK,
                               block_k=None if tiles else BLOCK, backend=backend, interpret=True)

    def explicit(q, k, v):
        drop = lambda p: dropout_hash.dropout(p, WORDS, RATE)  # noqa: E731
        return explicit_attention(q, k, v, valid, **masks, dropout=drop)[0]

    np.testing.assert_allclose(np.asarray(flash(q, k, v))[live],
                               np.asarray(explicit(q, k, v))[live], atol=1e-5, rtol=0)
    grads = [jax.grad(lambda *a: (f(*a) * cot).sum(), (0, 1, 2))(q, k, v)
             for f in (flash, explicit)]
    for name, g, w in zip("qkv", *grads):
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=0, err_msg=f"d{name}")


def test_kernel_tiles_fit_the_sequence_and_name_a_bad_block():
    """GPU tiles shrink to divide the sequence; TPU and given blocks are one
    block for every kernel; a block that does not divide seq is refused by name."""
    fwd, dq, dkv = kernel_tiles(96, triton=True)
    assert all(96 % t.outer == 0 and 96 % t.inner == 0 for t in (fwd, dq, dkv))
    # heads of 128 get smaller backward tiles (ptxas: no spills); larger heads the same
    assert kernel_tiles(512, True, head_dim=128) == TRITON_TILES[128] != TRITON_TILES[64]
    assert kernel_tiles(512, True, head_dim=256) == TRITON_TILES[128]
    assert kernel_tiles(512, True, head_dim=32) == kernel_tiles(512, True) == TRITON_TILES[64]
    assert kernel_tiles(512, triton=False) == (Tiles(128, 128),) * 3
    assert kernel_tiles(512, triton=True, block_q=32, block_k=64) == (
        Tiles(32, 64), Tiles(32, 64), Tiles(64, 32))
    q, k, v, valid, *_ = case_inputs("plain")
    with pytest.raises(ValueError, match=r"sequence length 32 is not a multiple of the "
                                         r"kernels' blocks \[\(16, 8\), \(8, 12\)"):
        flash_attention(q, k, v, valid, tiles=(Tiles(16, 8), Tiles(8, 12), Tiles(16, 8)),
                        interpret=True)


def corr(a, b):
    return float(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1])


def test_keep_bits_rate_and_independence():
    """Keep fraction 1 − rate; no correlation between examples, heads, rows,
    neighbouring keys, steps or layers beyond sampling noise (|r| of n
    Bernoulli pairs has std 1/sqrt(n): bounds at ~5 std)."""
    b, h, s = 4, 4, 128
    step0 = jax.random.fold_in(jax.random.key(0), 0)
    layers = jax.random.split(step0, 2)                  # nn.scan's per-layer keys
    m = np.asarray(dropout_hash.keep_mask(dropout_hash.key_words(layers[0]), (b, h, s, s), RATE))
    n = b * h * s * s
    assert abs(m.mean() - (1 - RATE)) < 5 * np.sqrt(RATE * (1 - RATE) / n)
    plane = s * s
    bound = 5 / np.sqrt(plane)
    assert abs(corr(m[0, 0], m[0, 1])) < bound and abs(corr(m[0, 0], m[1, 0])) < bound
    assert abs(corr(m[:, :, :-1], m[:, :, 1:])) < 5 / np.sqrt(n)      # rows q, q + 1
    assert abs(corr(m[..., :-1], m[..., 1:])) < 5 / np.sqrt(n)        # keys k, k + 1
    # every pair of planes: the mean |r| is that of independent planes
    flat = m.reshape(b * h, -1).astype(np.float64)
    r = np.corrcoef(flat)[np.triu_indices(b * h, 1)]
    assert np.abs(r).mean() < 1.5 * np.sqrt(2 / np.pi) / np.sqrt(plane)
    for other in (layers[1], jax.random.split(jax.random.fold_in(jax.random.key(0), 1), 2)[0]):
        m2 = dropout_hash.keep_mask(dropout_hash.key_words(other), (b, h, s, s), RATE)
        assert abs(corr(m, m2)) < 5 / np.sqrt(n)                          # layer 1; step 1
    # an rbg key (train.dropout_rng=rbg) gives its own bits at the same rate
    rbg = jax.random.wrap_key_data(jnp.arange(4, dtype=jnp.uint32), impl="rbg")
    m3 = np.asarray(dropout_hash.keep_mask(dropout_hash.key_words(rbg), (b, h, s, s), RATE))
    assert abs(m3.mean() - (1 - RATE)) < 5 * np.sqrt(RATE * (1 - RATE) / n)
    assert abs(corr(m, m3)) < 5 / np.sqrt(n)


def test_broadcast_mask_is_shared_by_examples_and_heads():
    m = np.asarray(dropout_hash.keep_mask(WORDS, (3, 2, 32, 32), RATE, broadcast=True))
    assert (m == m[:1, :1]).all() and 0.8 < m.mean() < 0.97
    per = np.asarray(dropout_hash.keep_mask(WORDS, (3, 2, 32, 32), RATE))
    assert not (per == per[:1, :1]).all()


def test_flash_dropout_mask_does_not_depend_on_the_mesh():
    """Under shard_map each shard hashes the global example and head: the
    kernel on a data × fsdp × tensor = 2 × 2 × 2 mesh gives the 1-device result."""
    rng = np.random.default_rng(3)
    b, s, h, d = 4, 16, 2, 8
    q, k, v = (jnp.asarray(rng.normal(size=(b, s, h, d)) / 3, jnp.float32) for _ in range(3))
    valid = jnp.ones((b, s), jnp.int32)
    drop = dict(rate=RATE, words=WORDS, broadcast=False)
    run = lambda q, k, v: fused_attention("flash", q, k, v, valid, dropout=drop)  # noqa: E731
    single = np.asarray(jax.jit(run)(q, k, v))
    mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "tensor"), axis_types=(AxisType.Auto,) * 3)
    heads = NamedSharding(mesh, P(("data", "fsdp"), None, "tensor", None))
    with jax.set_mesh(mesh), nn.logical_axis_rules(LOGICAL_RULES):
        sharded = np.asarray(jax.jit(run)(*(jax.device_put(x, heads) for x in (q, k, v))))
    np.testing.assert_allclose(sharded, single, atol=1e-6, rtol=0)
    plain = np.asarray(fused_attention("flash", q, k, v, valid))
    assert np.abs(single - plain).max() > 1e-2


def test_auto_follows_the_gpu_figures(monkeypatch):
    """auto: cuDNN for plain calls on GPU; the kernel for dropout or B only where
    GPU_FLASH_FASTER says a GPU measured it faster, for every feature the call has."""
    from kjax.model import attention_core
    pick = lambda **kw: choose_impl("auto", explicit=False, dtype=jnp.bfloat16,  # noqa: E731
                                    **{"shaking": False, **kw})
    monkeypatch.setattr(attention_core, "GPU_FLASH_FASTER",
                        {"dropout": True, "shake": False, "local": False})
    assert pick(dropping=True) == "xla" and pick() == "xla"                 # CPU
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert pick() == "dot_product"
    assert pick(dropping=True) == "flash"
    assert pick(shaking=True) == "xla" and pick(shaking=True, dropping=True) == "xla"
    monkeypatch.setattr(attention_core, "GPU_FLASH_FASTER",
                        {"dropout": False, "shake": True, "local": False})
    assert pick(dropping=True) == "xla" and pick(shaking=True) == "flash"
    # a local window (the modern recipe's local layers): the kernel where measured faster
    monkeypatch.setattr(attention_core, "GPU_FLASH_FASTER",
                        {"dropout": False, "shake": False, "local": True})
    assert pick(windowed=True) == "flash" and pick(windowed=True, dropping=True) == "xla"
    monkeypatch.setattr(attention_core, "GPU_FLASH_FASTER",
                        {"dropout": False, "shake": False, "local": False})
    assert pick(windowed=True) == "dot_product"
    assert choose_impl("dot_product", shaking=False, explicit=False, dropping=True) == "xla"
    assert choose_impl("flash", shaking=False, explicit=True, dropping=True) == "xla"


def test_model_draws_the_same_masks_on_either_path():
    """The model end to end (train mode, attention dropout, hidden dropout
    off, layers under nn.scan: each its own key): flash and the explicit path
    give the same output for the same key, and another step's key other masks."""
    from kjax.model.config import EncoderConfig
    from kjax.model.encoder import BertForPreTraining
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(5, 50, (2, 16)), jnp.int32)
    mask = jnp.asarray(np.arange(16)[None] < np.asarray([[12], [16]]), jnp.int32)
    out = {}
    for impl in ("xla", "flash"):
        cfg = EncoderConfig(vocab_size=50, hidden_size=16, num_layers=2, num_heads=2,
                            intermediate_size=32, max_position_embeddings=16, dtype="float32",
                            initializer_range=0.3, dropout_rate=0.0, attention_dropout_rate=0.3,
                            attention_impl=impl)
        params = jax.jit(BertForPreTraining(cfg).init)(jax.random.key(0), ids, 0 * ids,
                                                       mask)["params"]
        model = BertForPreTraining(cfg, deterministic=False)
        run = jax.jit(lambda step: model.apply(  # noqa: E731
            {"params": nn.meta.unbox(params)}, ids, 0 * ids, mask,
            rngs={"dropout": jax.random.fold_in(jax.random.key(1), step)})["mlm_logits"])
        out[impl] = [np.asarray(run(step)) for step in (0, 0, 1)]
    live = np.asarray(mask, bool)
    np.testing.assert_allclose(out["flash"][0][live], out["xla"][0][live], atol=1e-5, rtol=0)
    np.testing.assert_array_equal(out["flash"][0], out["flash"][1])       # (seed, step) alone
    assert np.abs(out["xla"][2] - out["xla"][0])[live].max() > 1e-3
