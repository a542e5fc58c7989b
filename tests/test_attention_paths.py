"""The attention implementations end to end: B's pairs layout from the loader
against dense B, a sharded train step with every `model.attention_impl`, the
flash kernel's lowering for TPU and GPU, and the config's errors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_config
from kjax.batches.loader import train_dataset
from kjax.config import load_config
from kjax.errors import KjaxError
from kjax.model.flash.attention import flash_attention
from kjax.parallel.mesh import make_mesh, put_batch
from kjax.shake.matrix import build_shake_matrix, build_shake_pairs, pairs_to_dense
from kjax.train.state import init_state, make_model, make_optimizer
from kjax.train.step import make_train_step

SHAKEN = {"shake.variant": "random", "shake.p": 0.3, "model.shake_factor": 0.5,
          "model.attention_dropout_rate": 0.0}


def test_pairs_layout_is_dense_b_for_pos_pairs():
    """The Korean POS pairs of METHODS §1.3 (compound nouns: multi-key runs)."""
    from ml_collections import ConfigDict
    from test_shake import example_from
    from kjax.morph.analyzer import KoreanAnalyzer
    cfg = ConfigDict(dict(variant="pos", boost_prem=2.0, group3=True, tag_weights={"JKB": 0.5},
                          p=0.08, position_variant="none"))
    ex, _ = example_from(KoreanAnalyzer(), "한국어 형태소 분석기가 학생들에게 새 책을 주었다",
                         "나는 서울대학교에서 공부했다")
    dense = np.asarray(build_shake_matrix(ex, 40, cfg), np.float32)
    pairs = build_shake_pairs(ex, 40, cfg)
    assert pairs["shake_weight"].dtype.itemsize == 1 and pairs["shake_key_start"].shape == (40,)
    assert len(set(np.unique(dense))) >= 3                  # 0, 1 (or 0.5) and 2
    np.testing.assert_array_equal(pairs_to_dense(pairs), dense)


def first_batch(prepared, **extra):
    return next(iter(train_dataset(tiny_config(prepared, **{**SHAKEN, **extra}))))


def test_loader_pairs_layout_equals_dense_b(prepared):
    """Same records, same random draws: the pairs batch stands for the dense B."""
    dense, pairs = first_batch(prepared), first_batch(prepared, **{"shake.layout": "pairs"})
    assert "shake" not in pairs and "shake_weight" not in dense
    b = np.asarray(dense["shake"], np.float32)
    assert b.shape == (16, 64, 64) and b.sum() > 16          # pairs were drawn
    np.testing.assert_array_equal(pairs_to_dense(pairs), b)
    assert pairs["shake_weight"].nbytes + pairs["shake_key_start"].nbytes * 2 == 16 * 64 * 9
    for key in dense:
        if key != "shake":
            np.testing.assert_array_equal(dense[key], pairs[key])


def losses(prepared, steps=2, **extra):
    """Losses of `steps` train steps on a data×fsdp×tensor = 2×2×2 mesh."""
    config = tiny_config(prepared, **{**SHAKEN, "mesh.data": 2, "mesh.fsdp": 2,
                                      "mesh.tensor": 2, **extra})
    mesh = make_mesh(config)
    model, tx = make_model(config, deterministic=False), make_optimizer(config.train)
    state, shardings = init_state(config, mesh, model, tx)
    step = make_train_step(config, mesh, model, tx, shardings)
    batches = iter(train_dataset(config))
    out = []
    for _ in range(steps):
        state, metrics = step(state, put_batch(next(batches), mesh))
        out.append(float(metrics["loss"]))
    return np.asarray(out)


@pytest.mark.slow
def test_train_step_loss_is_the_same_for_every_impl(prepared):
    """fp32, two steps (the second sees the first's gradients), heads split over
    the tensor axis (the flash kernel runs per device in a shard_map). Weights
    drawn wide enough (0.2) that Eq. 1 moves the loss far beyond the tolerance.
    Shaken, with attention dropout 0.1: the kernel's shards hash global
    examples and heads, the explicit path's SPMD arrays the same bits."""
    wide = {"model.initializer_range": 0.2, "model.attention_dropout_rate": 0.1}
    shaken = losses(prepared, **wide, **{"model.attention_impl": "xla"})
    flash = losses(prepared, **wide, **{"model.attention_impl": "flash",
                                        "shake.layout": "pairs"})
    np.testing.assert_allclose(flash, shaken, atol=1e-5, rtol=0)
    wide["model.attention_dropout_rate"] = 0.0       # dot_product has none
    plain = losses(prepared, **wide, **{"model.shake_factor": 0.0, "model.attention_impl": "xla"})
    fused = losses(prepared, **wide, **{"model.shake_factor": 0.0,
                                        "model.attention_impl": "dot_product"})
    np.testing.assert_allclose(fused, plain, atol=1e-5, rtol=0)
    assert np.abs(shaken - plain).min() > 1e-3


@pytest.mark.parametrize("impl", ["xla", "flash"])
def test_model_output_is_identical_for_dense_and_pairs_b(impl):
    import flax.linen as nn
    from kjax.model.config import EncoderConfig
    from kjax.model.encoder import BertForPreTraining
    cfg = EncoderConfig(vocab_size=50, hidden_size=16, num_layers=2, num_heads=2,
                        intermediate_size=32, max_position_embeddings=16, dtype="float32",
                        initializer_range=0.3, shake_factor=(0.5, -0.25), attention_impl=impl,
                        attention_dropout_rate=0.0)
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(5, 50, (2, 16)), jnp.int32)
    mask = jnp.asarray(np.arange(16)[None] < np.asarray([[12], [16]]), jnp.int32)
    start = rng.integers(0, 14, (2, 16))
    pairs = {"key_start": jnp.asarray(start, jnp.int32),
             "key_end": jnp.asarray(start + rng.integers(1, 3, (2, 16)), jnp.int32),
             "weight": jnp.asarray(rng.choice([0.0, 1.0, 2.0], (2, 16)), jnp.float8_e4m3fn)}
    dense = jnp.asarray(pairs_to_dense({f"shake_{k}": np.asarray(v) for k, v in pairs.items()}
                                       ), jnp.float8_e4m3fn)
    model = BertForPreTraining(cfg)
    params = nn.meta.unbox(model.init(jax.random.key(0), ids, 0 * ids, mask)["params"])
    run = lambda b: model.apply({"params": params}, ids, 0 * ids, mask, shake=b)  # noqa: E731
    got, want, plain = run(pairs), run(dense), run(None)
    np.testing.assert_array_equal(got["mlm_logits"], want["mlm_logits"])
    assert np.abs(np.asarray(got["mlm_logits"] - plain["mlm_logits"])).max() > 1e-3


@pytest.mark.parametrize("platform", ["tpu", "cuda"])
def test_flash_kernel_lowers_for_accelerators(platform):
    """No accelerator here, but Pallas lowers to Mosaic (TPU) and Triton (GPU)
    on CPU: block shapes, dtypes and ops the backends refuse fail here."""
    b, s, h, d = 2, 256, 4, 64
    q = jax.ShapeDtypeStruct((b, s, h, d), jnp.bfloat16)
    ints = jax.ShapeDtypeStruct((b, s), jnp.int32)
    pairs = {"key_start": ints, "key_end": ints,
             "weight": jax.ShapeDtypeStruct((b, s), jnp.float8_e4m3fn)}
    dense = jax.ShapeDtypeStruct((b, s, s), jnp.float8_e4m3fn)
    backend = "gpu" if platform == "cuda" else platform
    words = jnp.asarray([3, -5], jnp.int32)      # attention dropout's key words (dropout_hash)
    for shake, segments, window, rate in ((dense, None, None, 0.0), (pairs, ints, 128, 0.1)):
        def loss(q, k, v, valid, seg, shake):
            return flash_attention(q, k, v, valid, segment_ids=seg, local_window=window,
                                   shake=shake, bf=0.3, dropout_rate=rate, dropout_words=words,
                                   backend=backend).astype(jnp.float32).sum()
        grad = jax.jit(jax.grad(loss, (0, 1, 2)))
        text = grad.trace(q, q, q, ints, segments, shake).lower(
            lowering_platforms=(platform,)).as_text()
        assert text.count("custom_call") >= 3                # forward, dq, dk/dv kernels


@pytest.mark.parametrize("override,message", [
    ("model.attention_impl=fast", "model.attention_impl='fast'; choose auto, xla, dot_product or flash"),
    ("model.attention_impl=dot_product", "has no attention dropout"),
    ("shake.layout=sparse", "shake.layout='sparse'; choose dense or pairs"),
])
def test_attention_config_errors_are_one_line(override, message):
    from conftest import DEMO_CONFIG
    with pytest.raises(KjaxError, match=message) as e:
        load_config(DEMO_CONFIG, [f"--config.{override}",
                                  "--config.model.attention_dropout_rate=0.1"])
    assert "\n" not in str(e.value)
