"""Train state, optimizer and the sharded initialisation.

The state is a plain dict pytree — {step, params, opt_state, rng} — so
orbax saves and restores it as is. Shardings come from the logical axis
names on the parameters (see kjax.parallel.mesh), found by tracing the
initialiser abstractly: nothing is materialised before it is placed.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from kjax.model.config import EncoderConfig
from kjax.model.encoder import BertForPreTraining
from kjax.parallel.mesh import LOGICAL_RULES, logical_sharding


def learning_rate_schedule(train_cfg) -> optax.Schedule:
    """BERT: linear warmup to the peak, then linear decay to 0 at num_steps."""
    peak, warmup = train_cfg.learning_rate, train_cfg.warmup_steps
    return optax.join_schedules(
        [optax.linear_schedule(0.0, peak, max(1, warmup)),
         optax.linear_schedule(peak, 0.0, max(1, train_cfg.num_steps - warmup))], [warmup])


# Multiplicative gates: parameters initialised at 1 that scale other vectors
# (E_inpos, METHODS Eq. 3). Decay would pull them to 0, i.e. switch the
# morpheme's tokens off, not towards "no effect" (1). Chosen by name, not by
# rank: E_inpos is a [tokens per morpheme, hidden] table, shaped like the
# embedding tables that should decay.
NO_DECAY_MODULES = ("inpos_embeddings",)


def decay_mask(params):
    """Weight decay on matrices only: not on LayerNorm scales, biases or the
    multiplicative gates of NO_DECAY_MODULES."""
    def decays(path, _):
        names = [getattr(p, "key", None) for p in path]
        return names[-1] in ("kernel", "embedding") and not set(names) & set(NO_DECAY_MODULES)
    return jax.tree_util.tree_map_with_path(decays, params)


def make_optimizer(train_cfg) -> optax.GradientTransformation:
    return optax.chain(
        optax.clip_by_global_norm(train_cfg.grad_clip_norm),
        optax.adamw(learning_rate_schedule(train_cfg), b1=train_cfg.b1, b2=train_cfg.b2,
                    eps=train_cfg.eps, weight_decay=train_cfg.weight_decay, mask=decay_mask))


def make_model(config, deterministic: bool, return_analysis: bool = False):
    return BertForPreTraining(EncoderConfig.from_config(config.model, config.knowledge),
                              deterministic=deterministic, return_analysis=return_analysis)


def dummy_inputs(config, batch_size: int = 1):
    """(positional args, keyword args) that trace every parameter at init."""
    s, p = config.data.max_seq_len, config.data.max_predictions_per_seq
    ids = jnp.zeros((batch_size, s), jnp.int32)
    kwargs = {}
    if config.model.input_mode in ("multihot", "merged"):
        kwargs["multihot"] = {"token_ids": ids, "token_position": ids, "token_inpos": ids,
                              "position_tags": ids}
    g = config.knowledge
    kwargs["knowledge_positions"] = {
        "hyp_positions": jnp.zeros((batch_size, g.max_hypernym), jnp.int32),
        "sense_positions": jnp.zeros((batch_size, g.max_sense), jnp.int32)}
    return (ids, ids, jnp.ones_like(ids), jnp.zeros((batch_size, p), jnp.int32)), kwargs


def _init_fn(config, model, tx):
    def init(rng):
        params_rng, dropout_rng = jax.random.split(rng)
        args, kwargs = dummy_inputs(config)
        params = model.init(params_rng, *args, **kwargs)["params"]
        return {"step": jnp.zeros((), jnp.int32), "params": params,
                "opt_state": tx.init(params), "rng": jax.random.key_data(dropout_rng)}
    return init


def state_shardings(config, mesh, model, tx):
    """NamedShardings for every leaf of the state, from the logical axis names."""
    abstract = jax.eval_shape(_init_fn(config, model, tx), jax.random.key(0))
    with nn.logical_axis_rules(LOGICAL_RULES):
        return logical_sharding(mesh, nn.get_partition_spec(abstract))


def init_state(config, mesh, model, tx):
    shardings = state_shardings(config, mesh, model, tx)
    init = _init_fn(config, model, tx)
    with jax.set_mesh(mesh), nn.logical_axis_rules(LOGICAL_RULES):
        state = jax.jit(lambda r: nn.meta.unbox(init(r)), out_shardings=shardings)(
            jax.random.key(config.train.seed))
    return state, shardings


def abstract_state(config, mesh, model, tx):
    """ShapeDtypeStructs with shardings: the restore target for orbax."""
    shardings = state_shardings(config, mesh, model, tx)
    shapes = jax.eval_shape(lambda r: nn.meta.unbox(_init_fn(config, model, tx)(r)),
                            jax.random.key(0))
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                        shapes, shardings), shardings


def restore_params(config, workdir: str, step: int | None = None) -> tuple[dict, int]:
    """(params as numpy arrays on the host, step) of WORKDIR/checkpoints for the
    tools that need only them (`kjax export`, `kjax analyze`): the given step
    or the newest that verifies (kjax/checkpoint/recovery.py)."""
    import numpy as np

    from kjax import paths

    from kjax.checkpoint.manager import ConfigMismatch
    from kjax.checkpoint.restore import restore_read_only
    from kjax.parallel.mesh import make_mesh
    directory = paths.join(workdir, "checkpoints")
    target, _ = abstract_state(config, make_mesh(config), make_model(config, True),
                               make_optimizer(config.train))
    try:
        state, _, step = restore_read_only(directory, target, step, hint=(
            f"train first (`kjax train --workdir {workdir}`) or pass the --workdir that "
            f"holds them"))
    except ConfigMismatch as e:
        saved = paths.join(workdir, "kjax_config.py")
        hint = f" (recorded in {saved}: leave --config out to use it)" if paths.isfile(saved) else ""
        raise ConfigMismatch(f"{e}; pass the --config and --config.* overrides the run was "
                             f"trained with{hint} (model sizes, model.input_mode, knowledge "
                             f"weights)") from None
    return jax.tree.map(np.asarray, jax.device_get(state["params"])), step
