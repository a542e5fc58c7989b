"""Optimizers (train.optimizer) and learning-rate schedules (train.schedule):
values against hand formulas, LAMB against optax.lamb, StableAdamW's
per-tensor clipping, Adafactor's small state, training and resuming the tiny
model with each, and a resume that changes either is refused."""
import json
import math
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from ml_collections import ConfigDict

from conftest import DEMO_CONFIG, tiny_config
from kjax.config import defaults, load_config
from kjax.config.schema import OPTIMIZERS, SCHEDULES
from kjax.errors import KjaxError
from kjax.train import optimizers, schedules
from kjax.train.metrics import read_metrics
from kjax.train.state import decay_mask, learning_rate_schedule, make_optimizer


def train_cfg(**values):
    c = defaults()
    c.train.update(values)
    return c.train


def params_tree(seed=0):
    """A dense layer and a LayerNorm: a decayed kernel, an undecayed bias and scale."""
    k = jax.random.split(jax.random.key(seed), 3)
    return {"dense": {"kernel": jax.random.normal(k[0], (4, 3)),
                      "bias": 0.1 * jax.random.normal(k[1], (3,))},
            "layer_norm": {"scale": 1.0 + 0.1 * jax.random.normal(k[2], (3,))}}


def run(tx, params, grads):
    """The updates of each step for a list of gradient trees."""
    state, out = tx.init(params), []
    for g in grads:
        u, state = tx.update(g, state, params)
        params = optax.apply_updates(params, u)
        out.append(u)
    return out


def grad_trees(n, scale=1.0, seed=1):
    return [jax.tree.map(lambda p, i=i: scale * jax.random.normal(
        jax.random.fold_in(jax.random.key(seed), i), p.shape), params_tree()) for i in range(n)]


def test_the_registries_are_the_schema_choices():
    assert tuple(optimizers.OPTIMIZERS) == OPTIMIZERS
    assert tuple(schedules.SCHEDULES) == SCHEDULES


def old_schedule(t):
    """The schedule before train.schedule existed (BERT's), written out again."""
    peak, warmup = t.learning_rate, t.warmup_steps
    return optax.join_schedules(
        [optax.linear_schedule(0.0, peak, max(1, warmup)),
         optax.linear_schedule(peak, 0.0, max(1, t.num_steps - warmup))], [warmup])


def test_the_default_is_the_old_schedule_and_chain_op_for_op():
    t = train_cfg(num_steps=50, warmup_steps=10, learning_rate=1e-3)
    new, old = learning_rate_schedule(t), old_schedule(t)
    assert all(float(new(s)) == float(old(s)) for s in range(0, 52))
    assert str(jax.make_jaxpr(new)(3)) == str(jax.make_jaxpr(old)(3))
    old_tx = optax.chain(optax.clip_by_global_norm(t.grad_clip_norm),
                         optax.adamw(old, b1=t.b1, b2=t.b2, eps=t.eps,
                                     weight_decay=t.weight_decay, mask=decay_mask))
    params, (g,) = params_tree(), grad_trees(1)

    def program(tx):
        return str(jax.make_jaxpr(lambda g, p: tx.update(g, tx.init(p), p))(g, params))
    assert program(make_optimizer(t)) == program(old_tx)
    # fine-tuning's optimizer dict has no optimizer or schedule keys: the same program
    bare = ConfigDict({k: t[k] for k in ("learning_rate", "warmup_steps", "num_steps", "b1",
                                         "b2", "eps", "weight_decay", "grad_clip_norm")})
    assert program(make_optimizer(bare)) == program(old_tx)


PEAK, WARMUP, STEPS, FINAL = 1e-3, 10, 110, 0.1


def hand(schedule: str, t: int, shape: str = "sqrt", decay_fraction: float = 0.2) -> float:
    if t < WARMUP:
        return PEAK * t / WARMUP
    final, progress = FINAL * PEAK, (t - WARMUP) / (STEPS - WARMUP)
    if schedule == "linear":
        return PEAK + (final - PEAK) * progress
    if schedule == "cosine":
        return final + (PEAK - final) * 0.5 * (1 + math.cos(math.pi * progress))
    if schedule == "constant":
        return PEAK
    decay = round(decay_fraction * STEPS)
    if t < STEPS - decay:
        return PEAK
    x = (t - (STEPS - decay)) / decay
    return final + (PEAK - final) * (1 - (math.sqrt(x) if shape == "sqrt" else x))


@pytest.mark.parametrize("schedule, shape", [("linear", ""), ("cosine", ""), ("constant", ""),
                                             ("wsd", "sqrt"), ("wsd", "linear")])
def test_each_schedule_follows_its_formula(schedule, shape):
    t = train_cfg(schedule=schedule, learning_rate=PEAK, warmup_steps=WARMUP, num_steps=STEPS,
                  final_lr_fraction=FINAL, decay_fraction=0.2, decay_shape=shape or "sqrt")
    lr = learning_rate_schedule(t)
    for step in (0, 5, 10, 30, 60, 87, 88, 91, 100, 109, 110):
        assert float(lr(step)) == pytest.approx(hand(schedule, step, shape or "sqrt"),
                                                rel=1e-5, abs=1e-12), (schedule, step)
    if schedule == "wsd":   # the decay takes the last 22 steps, from step 88
        assert float(lr(87)) == np.float32(PEAK) > float(lr(89))


def test_a_wsd_decay_that_overlaps_the_warmup_is_refused():
    base = ["--config.train.schedule=wsd", "--config.train.num_steps=100",
            "--config.train.warmup_steps=20"]
    load_config(DEMO_CONFIG, base + ["--config.train.decay_fraction=0.8"])   # 20 + 80 fits
    with pytest.raises(KjaxError, match=r"warmup_steps=20 \+ 81 decay steps "
                                        r"\(train.decay_fraction=0.81 .* lower warmup_steps"):
        load_config(DEMO_CONFIG, base + ["--config.train.decay_fraction=0.81"])
    with pytest.raises(KjaxError, match=r"train.decay_fraction=1.5 is not allowed.*\[0, 1\]"):
        load_config(DEMO_CONFIG, base + ["--config.train.decay_fraction=1.5"])
    with pytest.raises(KjaxError, match="train.optimizer='sgd'; choose adamw, lamb"):
        load_config(DEMO_CONFIG, ["--config.train.optimizer=sgd"])


def test_config_show_prints_the_curve_before_training(capsys):
    from kjax.cli import main
    common = ["--config.train.num_steps=100", "--config.train.warmup_steps=10",
              "--config.train.learning_rate=0.001"]
    assert main(["config", "show", "--schedule", *common, "--config.train.schedule=wsd",
                 "--config.train.decay_fraction=0.2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("train.schedule='wsd': peak 0.001, warmup 10, 100 steps")
    assert out[1:] == ["  step   0  lr 0.0000e+00  start",
                       "  step  10  lr 1.0000e-03  warmup ends",
                       "  step  25  lr 1.0000e-03", "  step  50  lr 1.0000e-03",
                       "  step  75  lr 1.0000e-03",
                       "  step  80  lr 1.0000e-03  decay starts",
                       "  step 100  lr 0.0000e+00  last step"]
    assert main(["config", "show", "--schedule", "--json", *common,
                 "--config.train.schedule=cosine"]) == 0
    points = {p["step"]: p["learning_rate"] for p in json.loads(capsys.readouterr().out)}
    assert sorted(points) == [0, 10, 25, 50, 75, 100]
    assert points[50] == pytest.approx(0.5e-3 * (1 + math.cos(math.pi * 40 / 90)), rel=1e-5)
    assert main(["config", "show", "--schedule", *common, "--config.train.schedule=wsd",
                 "--config.train.decay_fraction=0.95"]) == 2
    assert "train.decay_fraction=0.95" in capsys.readouterr().err


def test_lamb_is_optax_lamb_except_biases_and_layer_norm():
    """Kernels: optax.lamb's update. Bias and LayerNorm scale: Adam's step
    times the learning rate, with no trust ratio and no decay."""
    t = train_cfg(optimizer="lamb", learning_rate=1e-2, warmup_steps=0, num_steps=100,
                  weight_decay=0.1, grad_clip_norm=1e9)
    params, grads = params_tree(), grad_trees(3)
    ours = run(make_optimizer(t), params, grads)
    lr = learning_rate_schedule(t)
    kernel = run(optax.lamb(lr, b1=t.b1, b2=t.b2, eps=t.eps, weight_decay=t.weight_decay),
                 params["dense"]["kernel"], [g["dense"]["kernel"] for g in grads])
    adam = run(optax.adam(lr, b1=t.b1, b2=t.b2, eps=t.eps), params, grads)
    unmasked = run(optax.lamb(lr, b1=t.b1, b2=t.b2, eps=t.eps, weight_decay=t.weight_decay),
                   params, grads)
    for step in range(3):
        np.testing.assert_allclose(ours[step]["dense"]["kernel"], kernel[step], rtol=1e-5)
        for leaf in (("dense", "bias"), ("layer_norm", "scale")):
            mine = ours[step][leaf[0]][leaf[1]]
            np.testing.assert_allclose(mine, adam[step][leaf[0]][leaf[1]], rtol=1e-5)
            assert not np.allclose(mine, unmasked[step][leaf[0]][leaf[1]], rtol=1e-2)


def test_stable_adamw_divides_a_tensors_step_by_its_gradient_rms():
    """Five small gradients, then a huge one: the step of each tensor is
    AdamW's divided by max(1, sqrt(mean(g² / max(v̂, eps²)))), here > 2."""
    b1, b2, eps, wd, lr = 0.9, 0.98, 1e-6, 0.1, 1e-3
    t = train_cfg(optimizer="stable_adamw", learning_rate=lr, warmup_steps=0, num_steps=10 ** 6,
                  b1=b1, b2=b2, eps=eps, weight_decay=wd, grad_clip_norm=1e9)
    params = params_tree()
    grads = grad_trees(5, scale=1e-3) + grad_trees(1, scale=1e3, seed=7)
    ours = run(make_optimizer(t), params, grads)[-1]
    # by hand, in float64: Adam's moments, bias correction, the RMS of the last step
    mask = decay_mask(params)
    for path in (("dense", "kernel"), ("dense", "bias"), ("layer_norm", "scale")):
        m = v = 0.0
        p = np.asarray(params[path[0]][path[1]], np.float64)
        for step, g in enumerate(grads, start=1):
            g = np.asarray(g[path[0]][path[1]], np.float64)
            m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
            m_hat, v_hat = m / (1 - b1 ** step), v / (1 - b2 ** step)
            rms = np.sqrt(np.mean(g * g / np.maximum(v_hat, eps ** 2)))
            decayed = wd * p if mask[path[0]][path[1]] else 0.0
            want = -lr * (m_hat / (np.sqrt(v_hat) + eps) + decayed) / max(1.0, rms)
            p = p + want   # what the test's run applied
        assert rms > 2   # the huge step is clipped ...
        np.testing.assert_allclose(ours[path[0]][path[1]], want, rtol=1e-4)
        # ... and every element moves less than lr · (1 + decay) / RMS
        assert np.abs(ours[path[0]][path[1]]).max() <= lr * (1 + wd * np.abs(p).max()) / rms * 1.01


def test_adafactor_keeps_a_row_and_a_column_for_a_kernel():
    params = {"dense": {"kernel": jnp.ones((512, 1024)), "bias": jnp.zeros(1024)}}
    size = {name: sum(x.size for x in jax.tree.leaves(make_optimizer(
        train_cfg(optimizer=name)).init(params))) for name in ("adamw", "adafactor")}
    assert size["adamw"] >= 2 * (512 * 1024 + 1024)          # m and v, each a copy of the params
    assert size["adafactor"] < (512 + 1024 + 1024) * 2 < size["adamw"] / 100


def test_adafactor_decays_weights_by_the_learning_rate_times_weight_decay():
    """With no gradient only the decay moves a weight: −lr·wd·w on kernels, 0 on biases."""
    t = train_cfg(optimizer="adafactor", learning_rate=1e-2, warmup_steps=0, num_steps=100,
                  weight_decay=0.5)
    params = params_tree()
    update = run(make_optimizer(t), params, [jax.tree.map(jnp.zeros_like, params)])[0]
    lr = float(learning_rate_schedule(t)(0))
    np.testing.assert_allclose(update["dense"]["kernel"], -lr * 0.5 * params["dense"]["kernel"],
                               rtol=1e-6)
    assert not np.any(update["dense"]["bias"]) and not np.any(update["layer_norm"]["scale"])


def test_a_resume_with_another_optimizer_or_schedule_is_refused(prepared, trained_run, tmp_path):
    """Refused before anything compiles, naming the keys and the ways out
    (kjax/pretrain/resume_policy.py); nothing is written."""
    from kjax.pretrain.trainer import train
    workdir = str(tmp_path / "run")
    shutil.copytree(trained_run, workdir)
    with pytest.raises(KjaxError, match=r"trained to step 6 with another config \(train.optimizer: "
                                        r"'adamw' → 'lamb'\).*--init-from"):
        train(tiny_config(prepared, **{"train.optimizer": "lamb"}), workdir, progress=False)
    with pytest.raises(KjaxError, match=r"train.schedule: 'linear' → 'cosine'"):
        train(tiny_config(prepared, **{"train.schedule": "cosine"}), workdir, progress=False)
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["3", "6"]


RECIPES = {"adamw": {"train.schedule": "cosine"},
           "lamb": {"train.schedule": "wsd", "train.decay_shape": "linear",
                    "train.learning_rate": 1e-2, "train.weight_decay": 0.01},
           "adafactor": {"train.schedule": "constant"},
           "stable_adamw": {"train.schedule": "wsd", "train.b2": 0.98,
                            "train.weight_decay": 1e-5}}


@pytest.mark.parametrize("name", list(RECIPES))
def test_each_optimizer_trains_the_tiny_model(prepared, tmp_path, name):
    """The loss falls, and metrics.jsonl's learning_rate is the schedule's
    value at each step (row `s` ran with the rate of step s − 1)."""
    from kjax.pretrain.trainer import train
    config = tiny_config(prepared, **{"train.optimizer": name, "train.num_steps": 12,
                                      "train.learning_rate": 3e-3, "train.checkpoint_every": 12,
                                      "train.final_lr_fraction": 0.1,
                                      "train.decay_fraction": 0.5, **RECIPES[name]})
    train(config, str(tmp_path / "run"), progress=False)
    rows = [r for r in read_metrics(str(tmp_path / "run")) if r["split"] == "train"]
    assert [r["step"] for r in rows] == list(range(1, 13))
    losses = [r["loss"] for r in rows]
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) - 0.1, losses
    lr = learning_rate_schedule(config.train)
    for r in rows:
        assert r["learning_rate"] == pytest.approx(float(lr(r["step"] - 1)), rel=1e-6)


@pytest.mark.slow   # two runs of the tiny model: 12-25 s on 2 cores
def test_stable_adamw_resumes_bit_exactly(prepared, tmp_path):
    """stop_at=3 then the rest equals the straight run, in every array of the
    state (its Adam moments included); in between, a resume that changes the
    optimizer is refused."""
    from kjax.pretrain.trainer import train
    from test_train import final_params, metrics_without_timing
    config = tiny_config(prepared, **{"train.optimizer": "stable_adamw",
                                      "train.schedule": "wsd", "train.decay_fraction": 0.5})
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    train(config, straight, progress=False)
    assert train(config, resumed, progress=False, stop_at=3)["final_step"] == 3
    with pytest.raises(KjaxError, match="train.optimizer: .stable_adamw. → .adamw."):
        train(tiny_config(prepared), resumed, progress=False)
    train(config, resumed, progress=False)
    (s_state, s_data), (r_state, r_data) = final_params(config, straight), final_params(config,
                                                                                        resumed)
    assert int(r_state["step"]) == 6 and s_data == r_data
    for a, b in zip(jax.tree.leaves(s_state), jax.tree.leaves(r_state), strict=True):
        assert np.array_equal(a, b)
    s_rows, r_rows = metrics_without_timing(straight), metrics_without_timing(resumed)
    for step in range(1, 7):
        assert s_rows[(step, "train")] == r_rows[(step, "train")]
    shutil.rmtree(straight)


def test_adafactor_state_is_placed_on_an_fsdp_mesh(tmp_path):
    """Kernels wide enough to factor (128 × 256): their rows and columns do
    not take their kernel's axes (replicated but for mesh.shard_update's
    slices over the data axis), the full second moments of the biases keep
    their parameter's sharding, and the state initialises on a data × fsdp mesh."""
    from kjax.parallel.mesh import make_mesh
    from kjax.train.state import init_state, make_model
    config = tiny_config(tmp_path, **{"train.optimizer": "adafactor", "model.hidden_size": 128,
                                      "model.intermediate_size": 256, "mesh.data": 4,
                                      "mesh.fsdp": 2})
    model, tx = make_model(config, deterministic=False), make_optimizer(config.train)
    state, shardings = init_state(config, make_mesh(config), model, tx)
    factored = state["opt_state"][1][0]
    assert isinstance(factored, optax.FactoredState)
    kernel = state["params"]["encoder"]["layers"]["mlp_in"]["kernel"]   # [layers, 128, 256]
    row = factored.v_row["encoder"]["layers"]["mlp_in"]["kernel"]
    col = factored.v_col["encoder"]["layers"]["mlp_in"]["kernel"]
    assert kernel.shape == (2, 128, 256) and row.shape == (2, 128) and col.shape == (2, 256)
    assert "fsdp" in str(kernel.sharding.spec)
    assert row.sharding.spec == col.sharding.spec == jax.sharding.PartitionSpec(None, "data")
    bias_v = factored.v["encoder"]["layers"]["mlp_in"]["bias"]
    assert bias_v.shape == (2, 256)
    assert bias_v.sharding == state["params"]["encoder"]["layers"]["mlp_in"]["bias"].sharding
