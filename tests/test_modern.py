"""The modern recipe (model.arch=modern, kjax/model/modern.py): transformers'
ModernBERT as the hand reference, RoPE's relative positions, shaking on its
logits, NSP refused, the presets and the demo's overrides, and export →
transformers → import through the command line."""
import dataclasses
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DEMO_CONFIG, ROOT, tiny_config, tiny_overrides

from kjax.cli import demo_overrides, main
from kjax.config import load_config
from kjax.errors import KjaxError
from kjax.export import modernbert_export as me
from kjax.model.config import EncoderConfig
from kjax.model.modern import ModernBertForPreTraining
from kjax.objectives import check_config

TINY = EncoderConfig(arch="modern", vocab_size=100, hidden_size=32, num_layers=4, num_heads=4,
                     intermediate_size=48, dtype="float32", dropout_rate=0.0,
                     attention_dropout_rate=0.0, local_attention=8, layer_norm_eps=1e-5,
                     rope_theta=1000.0, local_rope_theta=50.0)


def random_params(enc, seq=24, seed=0):
    """Initialised params plus noise, so norms and scales are not the trivial 1."""
    rng = np.random.default_rng(seed)
    ids = jnp.ones((1, seq), jnp.int32)
    params = nn.meta.unbox(ModernBertForPreTraining(enc).init(
        jax.random.key(seed), ids, jnp.zeros_like(ids), jnp.ones_like(ids))["params"])
    return jax.tree.map(lambda x: np.asarray(x) + rng.normal(0, 0.1, x.shape).astype(np.float32),
                        params)


def test_modern_matches_transformers_modernbert_and_round_trips():
    """Pre-LN, RoPE (two θ), GeGLU, bias-free, local (|q−k| ≤ 4) / global layers,
    padding: the MLM logits of transformers' ModernBertForMaskedLM ≤ 1e-5."""
    params = random_params(TINY)
    rng = np.random.default_rng(1)
    ids = rng.integers(1, 100, (2, 24))
    mask = np.ones((2, 24), np.int64)
    mask[1, 17:] = 0
    model = me.torch_model(params, TINY)
    assert [layer.attention_type for layer in model.model.layers] == [
        "full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    assert me.max_logit_diff(params, TINY, model, ids, mask) <= 1e-5
    back = me.state_dict_to_params(me.params_to_state_dict(params, TINY), TINY)
    assert jax.tree.structure(back) == jax.tree.structure(params)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(back),
                                                    jax.tree.leaves(params)))
    # the local window matters: with every layer global kjax and transformers both change
    wide = dataclasses.replace(TINY, local_attention=0)
    assert np.abs(me.jax_mlm_logits(params, wide, ids, mask) -
                  me.jax_mlm_logits(params, TINY, ids, mask)).max() > 1e-3


def test_rope_sees_only_relative_positions_and_packed_documents_restart_them():
    enc = dataclasses.replace(TINY, local_attention=0)
    params = random_params(enc, seq=12)
    model = ModernBertForPreTraining(enc)
    ids = jnp.asarray(np.random.default_rng(2).integers(1, 100, (1, 12)))
    zeros, ones = jnp.zeros_like(ids), jnp.ones_like(ids)
    pos = jnp.arange(12)[None]
    base = model.apply({"params": params}, ids, zeros, ones, position_ids=pos)["mlm_logits"]
    shifted = model.apply({"params": params}, ids, zeros, ones,
                          position_ids=pos + 37)["mlm_logits"]
    np.testing.assert_allclose(shifted, base, atol=2e-4)
    reversed_ = model.apply({"params": params}, ids, zeros, ones,
                            position_ids=pos[:, ::-1])["mlm_logits"]
    assert np.abs(reversed_ - base).max() > 1e-2     # absolute order still matters


def test_shaking_applies_eq1_to_the_modern_logits():
    """bf·|s⊙B| enters the modern model's attention as BERT's (SelfAttention):
    B = 0 is bit-identical to no shaking, B ≠ 0 changes the logits, and the
    fused path agrees with the explicit one (flash ≡ xla with Eq. 1 and windows:
    tests/test_attention_kernels.py)."""
    shaking = dataclasses.replace(TINY, shake_factor=(0.5,) * 4, attention_impl="xla")
    params = random_params(TINY, seq=16)
    ids = jnp.asarray(np.random.default_rng(3).integers(1, 100, (2, 16)))
    args = (ids, jnp.zeros_like(ids), jnp.ones_like(ids))
    run = lambda enc, b: ModernBertForPreTraining(enc).apply(  # noqa: E731
        {"params": params}, *args, shake=b)["mlm_logits"]
    plain = run(TINY, None)
    zero_b = jnp.zeros((2, 16, 16))
    b = zero_b.at[:, 3, 4].set(1.0).at[:, 9, 8].set(0.5)
    assert np.array_equal(run(shaking, zero_b), plain)
    shaken = run(shaking, b)
    assert np.abs(shaken - plain).max() > 1e-3
    dot = run(dataclasses.replace(TINY, attention_impl="dot_product"), None)
    np.testing.assert_allclose(dot, plain, atol=1e-5)


def test_modern_refuses_nsp_and_the_presets_load(tmp_path):
    config = tiny_config(tmp_path, **{"model.arch": "modern"})
    with pytest.raises(KjaxError, match="nsp_weight=1: model.arch=modern has no NSP head"):
        check_config(config)
    for name in ("modern_small", "modern_base"):
        c = load_config(os.path.join(ROOT, "tpu_configs", f"{name}.py"))
        check_config(c)
        assert (c.model.arch, c.train.nsp_weight, c.data.masked_lm_prob) == ("modern", 0, 0.3)
        assert c.model.max_position_embeddings >= 8192 and c.model.local_attention == 128
    demo = load_config(DEMO_CONFIG, demo_overrides("multihot", False, arch="modern"))
    check_config(demo)
    assert (demo.model.arch, demo.model.input_mode, demo.train.nsp_weight) == (
        "modern", "multihot", 0.0)
    assert "modern" in demo.data.dir


@pytest.mark.parametrize("mode", ["multihot", "merged", "shared_position"])
def test_modern_trains_a_step_in_every_input_mode(tmp_path, mode):
    from kjax.train.state import dummy_inputs, make_model
    extra = {"model.arch": "modern", "train.nsp_weight": 0.0, "model.input_mode": mode,
             "model.num_layers": 2, "model.local_attention": 8}
    if mode == "multihot":
        extra.update({"tokenizer.scheme": "multihot", "train.mlm_loss": "eq9",
                      "data.mask_unit": "morpheme"})
    if mode == "merged":
        extra.update({"tokenizer.scheme": "morph-sp", "train.mlm_loss": "eq9"})
    if mode == "shared_position":
        extra.update({"tokenizer.scheme": "morph-sp"})
    config = tiny_config(tmp_path, **extra)
    check_config(config)
    model = make_model(config, deterministic=True)
    args, kwargs = dummy_inputs(config, batch_size=2)
    params = model.init(jax.random.key(0), *args, **kwargs)["params"]
    grads = jax.grad(lambda p: model.apply({"params": p}, *args, **kwargs)["mlm_logits"].sum())(
        params)
    assert isinstance(model, ModernBertForPreTraining)
    assert all(np.isfinite(g).all() for g in jax.tree.leaves(grads))


def test_a_task_model_of_the_modern_arch_holds_its_pretraining_params():
    """Fine-tuning builds the encoder of model.arch: every array of the task
    model's `bert` subtree is in a modern pretraining tree with its shape (what
    --init restores; the MLM transform is not used), and
    the classification head has its own pooler (the recipe pretrains none)."""
    from kjax.finetune.heads import TaskModel
    ids = jnp.ones((2, 12), jnp.int32)
    pretrained = random_params(TINY, seq=12)
    for task, shape in (("classify", (2, 3)), ("qa", (2, 12, 2))):
        model = TaskModel(TINY, task, 2 if task == "qa" else 3)
        params = nn.meta.unbox(model.init(jax.random.key(0), ids, jnp.zeros_like(ids),
                                          jnp.ones_like(ids))["params"])
        flat = dict(jax.tree_util.tree_flatten_with_path(pretrained)[0])
        used = jax.tree_util.tree_flatten_with_path(params["bert"])[0]
        assert {path: x.shape for path, x in used} == {p: flat[p].shape for p, _ in used}
        assert len(used) >= len(flat) - 3 and ("fresh_pooler" in params) == (task == "classify")
        bert = jax.tree.map(lambda x: flat[x], jax.tree_util.tree_map_with_path(
            lambda p, _: p, params["bert"]), is_leaf=lambda x: isinstance(x, tuple))
        out = model.apply({"params": {**params, "bert": bert}}, ids, jnp.zeros_like(ids),
                          jnp.ones_like(ids))
        assert out.shape == shape and np.isfinite(np.asarray(out)).all()


@pytest.mark.slow
def test_cli_trains_exports_to_modernbert_and_imports_back(prepared, tmp_path):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from kjax.checkpoint.restore import restore_params
    from kjax.pretrain.trainer import train
    extra = {"model.arch": "modern", "train.nsp_weight": 0.0, "model.local_attention": 8,
             "model.dropout_rate": 0.0, "model.attention_dropout_rate": 0.0}
    overrides = tiny_overrides(str(prepared), **extra)
    config = tiny_config(prepared, **extra)
    workdir, out = str(tmp_path / "run"), str(tmp_path / "hf")
    result = train(config, workdir, progress=False)
    assert np.isfinite(result["final_loss"]) if "final_loss" in result else True
    assert main(["export", "--config", DEMO_CONFIG, *overrides, "--workdir", workdir,
                 "--out", out]) == 0
    model = AutoModelForMaskedLM.from_pretrained(out, attn_implementation="eager").eval()
    assert type(model).__name__ == "ModernBertForMaskedLM"
    tokenizer = AutoTokenizer.from_pretrained(out)
    batch = tokenizer(["대한민국은 민주공화국이다. 대한민국의 주권은 국민에게 있고, 모든 권력은 "
                       "국민으로부터 나온다.", "국회는 법률을 만든다."], padding=True,
                      return_tensors="np")
    params, step = restore_params(config, workdir)
    enc = EncoderConfig.from_config(config.model)
    assert step == 6 and batch["attention_mask"].min() == 0
    assert batch["input_ids"].shape[1] > 8     # longer than the local window
    assert me.max_logit_diff(params, enc, model, batch["input_ids"],
                             batch["attention_mask"]) <= 1e-5
    assert main(["import", "--hf", out, "--out", str(tmp_path / "back"), *overrides]) == 0
    back_config = load_config(str(tmp_path / "back" / "kjax_config.py"))
    assert back_config.model.arch == "modern"
    back, _ = restore_params(back_config, str(tmp_path / "back"))
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(back),
                                                    jax.tree.leaves(params)))
    texts = tmp_path / "cls.jsonl"   # and it fine-tunes from its checkpoint
    texts.write_text("".join(f'{{"text": "그리고 {w} {w} 및 {w} 등", "label": "{y}"}}\n'
                             for w, y in (("국민", "a"), ("정부", "b")) * 8), encoding="utf-8")
    assert main(["finetune", "--init", workdir, "--task", "classify",
                 "--train", str(texts), "--dev", str(texts), "--out", str(tmp_path / "ft"),
                 "--config.finetune.epochs=1", "--config.finetune.batch_size=8",
                 "--config.finetune.max_seq_len=16"]) == 0
    assert (tmp_path / "ft" / "summary.json").exists()
