"""The pure, jit-compiled train and eval steps.

    train_step(state, batch) -> (state, metrics)     state donated
    eval_step(params, batch) -> metric sums

Dropout randomness is `fold_in(rng, step)`: a function of the step alone,
which is what makes a resumed run bit-identical to an uninterrupted one.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from kjax.losses.pretraining import pretraining_loss
from kjax.model.attention_core import shake_from_batch
from kjax.parallel.mesh import LOGICAL_RULES, batch_sharding, replicated
from kjax.train.state import learning_rate_schedule

MODEL_KEYS = ("input_ids", "token_type_ids", "attention_mask", "mlm_positions")


MULTIHOT_KEYS = ("token_ids", "token_position", "token_inpos", "position_tags")


def _forward(model, params, batch, rngs=None):
    # Optional arrays (SHAKE's B, dense or pairs, its position ids) pass through when present.
    extra = {k: batch[k] for k in ("position_ids",) if k in batch}
    if (shake := shake_from_batch(batch)) is not None:
        extra["shake"] = shake
    if "token_ids" in batch:  # multi-hot input: positions are morphemes
        extra["multihot"] = {k: batch[k] for k in MULTIHOT_KEYS}
    if "hyp_positions" in batch:
        extra["knowledge_positions"] = {k: batch[k] for k in ("hyp_positions", "sense_positions")}
    return model.apply({"params": params}, batch.get("input_ids"),
                       *(batch[k] for k in MODEL_KEYS[1:]), rngs=rngs, **extra)


def loss_weights(config) -> dict[str, float]:
    g = config.knowledge
    return {"hypernym": g.hypernym_weight, "sense": g.sense_weight, "verb": g.verb_weight}


def objective_weights(config) -> dict[str, float]:
    """Each objective's factor in the training loss (MLM 1, NSP train.nsp_weight,
    knowledge.*_weight): `kjax eval`'s "loss" sums them the same way."""
    return {"mlm": 1.0, "nsp": config.train.nsp_weight, **loss_weights(config)}


# Every metric and the objective whose slots weigh it: a batch's mean times
# the batch's slot count sums exactly across batches of any fill.
METRIC_OBJECTIVE = {"mlm_loss": "mlm", "mlm_accuracy": "mlm", "nsp_loss": "nsp",
                    "nsp_accuracy": "nsp", "hypernym_loss": "hypernym",
                    "hypernym_top1": "hypernym", "hypernym_top5": "hypernym",
                    "sense_loss": "sense", "sense_cosine": "sense",
                    "verb_loss": "verb", "verb_accuracy": "verb"}


def objective_slots(batch) -> dict:
    """Per objective, how many slots of the batch count (its metrics' weight)."""
    slots = {"mlm": batch["mlm_weights"].sum(), "nsp": batch["nsp_weights"].sum()}
    if "hyp_mask" in batch:
        slots["hypernym"] = batch["hyp_mask"].astype(jnp.float32).sum()
        slots["sense"] = batch["sense_mask"].astype(jnp.float32).sum()
        slots["verb"] = (batch["verb_targets"] >= 0).astype(jnp.float32).sum()
    return slots


def make_train_step(config, mesh, train_model, tx, shardings):
    schedule = learning_rate_schedule(config.train)
    nsp_weight, mlm_loss = config.train.nsp_weight, config.train.mlm_loss
    knowledge_weights = loss_weights(config)

    def train_step(state, batch):
        rng = jax.random.fold_in(jax.random.wrap_key_data(state["rng"]), state["step"])

        def loss_fn(params):
            outputs = _forward(train_model, params, batch, rngs={"dropout": rng})
            return pretraining_loss(outputs, batch, nsp_weight, mlm_loss, knowledge_weights)

        (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        metrics["grad_norm"] = optax.tree.norm(grads)
        metrics["learning_rate"] = schedule(state["step"])
        new_state = {**state, "step": state["step"] + 1, "params": params,
                     "opt_state": opt_state}
        return new_state, metrics

    jitted = jax.jit(train_step, in_shardings=(shardings, batch_sharding(mesh)),
                     out_shardings=(shardings, replicated(mesh)), donate_argnums=(0,))

    def run(state, batch):
        with jax.set_mesh(mesh), nn.logical_axis_rules(LOGICAL_RULES):
            return jitted(state, batch)
    run.jitted = jitted
    return run


def make_eval_step(config, mesh, eval_model, param_shardings):
    """Returns weighted sums of every metric (and `<objective>_weight`, the
    slot counts) so batches of any fill combine exactly on the host."""
    nsp_weight, mlm_loss = config.train.nsp_weight, config.train.mlm_loss
    knowledge_weights = loss_weights(config)

    def eval_step(params, batch):
        outputs = _forward(eval_model, params, batch)
        _, m = pretraining_loss(outputs, batch, nsp_weight, mlm_loss, knowledge_weights)
        slots = objective_slots(batch)
        sums = {k: v * slots[METRIC_OBJECTIVE[k]] for k, v in m.items() if k in METRIC_OBJECTIVE}
        used = {METRIC_OBJECTIVE[k] for k in sums}
        return {**sums, **{f"{o}_weight": slots[o] for o in used}}

    jitted = jax.jit(eval_step, in_shardings=(param_shardings, batch_sharding(mesh)),
                     out_shardings=replicated(mesh))

    def run(params, batch):
        with jax.set_mesh(mesh), nn.logical_axis_rules(LOGICAL_RULES):
            return jitted(params, batch)
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
    out["examples"] = total["nsp_weight"]
    return out


def flops_per_example(model_cfg, seq_len: int, predictions: int) -> float:
    """Training FLOPs (forward + backward = 3× forward) per example, counting
    *bidirectional* attention: every query sees all seq_len keys."""
    h, i, v, L = (model_cfg.hidden_size, model_cfg.intermediate_size, model_cfg.vocab_size,
                  model_cfg.num_layers)
    per_token_layer = 2 * (4 * h * h + 2 * h * i) + 2 * 2 * seq_len * h  # proj+FFN, QKᵀ and αV
    encoder = L * seq_len * per_token_layer
    heads = predictions * 2 * (h * h + h * v) + 2 * (h * h + 2 * h)  # MLM at p rows, pooler+NSP
    return 3.0 * (encoder + heads)
