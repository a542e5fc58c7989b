"""The pure, jit-compiled train and eval steps.

    train_step(state, batch) -> (state, metrics)     state donated
    eval_step(params, batch) -> metric sums

Dropout randomness is `fold_in(rng, step)`: a function of the step alone,
which is what makes a resumed run bit-identical to an uninterrupted one;
the bits hash that key with each row's global example index and position
(kjax/model/dropout_hash.py), so `train.microbatches` (gradient
accumulation, kjax/train/accumulation.py) does not change them.
`train.dropout_rng` picks the generator that key seeds (`dropout_key`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from kjax import objectives
from kjax.config.platform_defaults import require_resolved
from kjax.inputs import input_mode
from kjax.model.arch import architecture
from kjax.objectives import METRIC_OBJECTIVE, objective_weights  # noqa: F401 (re-exported)
from kjax.parallel.mesh import batch_sharding, on_mesh, replicated
from kjax.train import accumulation, ema
from kjax.train.state import learning_rate_schedule


def _forward(model, params, batch, rngs=None, example_ids=None):
    """The model on a batch: the input mode's arguments (kjax/inputs: tokens or
    segment sums, position ids, B) and the objectives' (MLM positions,
    knowledge positions); `example_ids`: a microbatch's rows in the batch."""
    kwargs = {**input_mode(model.config.input_mode).model_inputs(batch),
              **objectives.model_inputs(batch)}
    if example_ids is not None:
        kwargs["example_ids"] = example_ids
    return model.apply({"params": params}, rngs=rngs, **kwargs)


def dropout_key(state_rng, step, generator: str = "threefry"):
    """The dropout key of one step: a pure function of the state's seed key and
    the step, for either generator, so resume stays bit-exact.

    threefry: fold_in(seed key, step), as ever. rbg: four words drawn from that
    same threefry key seed an RBG key (XLA's RngBitGenerator makes the mask
    bits; split and fold_in stay threefry). The state keeps its threefry key
    data either way: checkpoints do not change layout."""
    key = jax.random.fold_in(jax.random.wrap_key_data(state_rng), step)
    if generator == "threefry":
        return key
    if generator != "rbg":
        raise ValueError(f"train.dropout_rng={generator!r}; choose threefry or rbg")
    return jax.random.wrap_key_data(jax.random.bits(key, (4,), jnp.uint32), dtype="rbg")


def make_train_step(config, mesh, train_model, tx, shardings):
    schedule = learning_rate_schedule(config.train)
    generator = require_resolved("train.dropout_rng", config.train.dropout_rng)

    def loss_fn(params, batch, rng, shares=None, example_ids=None):
        outputs = _forward(train_model, params, batch, {"dropout": rng}, example_ids)
        return objectives.pretraining_loss(outputs, batch, config, shares)

    def train_step(state, batch):
        rng = dropout_key(state["rng"], state["step"], generator)
        # one reduction of the microbatches' summed gradients, laid out as the
        # parameters are (each device's slice under mesh.shard_update; accumulation.py)
        grads, metrics = accumulation.gradients(loss_fn, state["params"], batch, rng, config,
                                                mesh, shardings["params"])
        metrics = objectives.with_ratios(metrics)   # of the whole batch's means
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        metrics["grad_norm"] = optax.tree.norm(grads)
        # real tokens / slots: what padding wastes, or what train.packing wins back
        metrics["token_fill"] = batch["attention_mask"].mean(dtype=jnp.float32)
        metrics["learning_rate"] = schedule(state["step"])
        new_state = {**state, "step": state["step"] + 1, "params": params,
                     "opt_state": opt_state}
        if ema.KEY in state:   # train.ema_decay > 0 (kjax/train/ema.py)
            new_state[ema.KEY] = ema.update(state[ema.KEY], params, state["step"],
                                            config.train.ema_decay)
        return new_state, metrics

    jitted = jax.jit(train_step, in_shardings=(shardings, batch_sharding(mesh)),
                     out_shardings=(shardings, replicated(mesh)), donate_argnums=(0,))

    def run(state, batch):
        with on_mesh(mesh, config):
            return jitted(state, batch)
    run.jitted = jitted
    return run


def real_rows(batch: dict):
    """How many rows of `batch` hold an example (a packed row counts once):
    every real row attends from its first position, an eval batch's filler
    rows (kjax/batches/loader.py) from none."""
    return batch["attention_mask"][:, 0].astype(jnp.float32).sum()


def make_eval_step(config, mesh, eval_model, param_shardings):
    """Returns weighted sums of every metric (and `<objective>_weight`, the
    slot counts) so batches of any fill combine exactly on the host."""
    def eval_step(params, batch):
        outputs = _forward(eval_model, params, batch)
        _, m = objectives.pretraining_loss(outputs, batch, config)
        slots = objectives.slots(batch, config)
        sums = {k: v * slots[METRIC_OBJECTIVE[k]] for k, v in m.items() if k in METRIC_OBJECTIVE}
        used = {METRIC_OBJECTIVE[k] for k in sums}
        return {**sums, **{f"{o}_weight": slots[o] for o in used},
                "examples": real_rows(batch)}

    jitted = jax.jit(eval_step, in_shardings=(param_shardings, batch_sharding(mesh)),
                     out_shardings=replicated(mesh))

    def run(params, batch):
        with on_mesh(mesh, config):
            return jitted(params, batch)
    run.jitted = jitted
    return run


def summarize_eval(sums: list[dict], weights: dict[str, float] | None = None) -> dict:
    """Every metric averaged over the eval set's slots, and "loss": Σ over the
    objectives of weight · loss (`objective_weights(config)`: as in training;
    None: every weight 1)."""
    total = {k: sum(float(s[k]) for s in sums) for k in sums[0]}
    out = {k: total[k] / max(total[f"{o}_weight"], 1e-8)
           for k, o in METRIC_OBJECTIVE.items() if k in total}
    out["loss"] = sum((weights or {}).get(o, 1.0) * out[f"{o}_loss"]
                      for o in dict.fromkeys(METRIC_OBJECTIVE.values()) if f"{o}_loss" in out)
    out["examples"] = total["examples"]
    return objectives.with_ratios(out)


def flops_per_example(model_cfg, seq_len: int, predictions: int) -> float:
    """Training FLOPs (forward + backward = 3× forward) per example, counting
    *bidirectional* attention: every query sees all seq_len keys; the
    architecture counts its own (kjax/model/arch)."""
    return architecture(model_cfg).flops_per_example(model_cfg, seq_len, predictions)
