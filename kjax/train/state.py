"""Train state, optimizer and the sharded initialisation.

The state is a plain dict pytree — {step, params, opt_state, rng}, and
`ema` when `train.ema_decay` > 0 (kjax/train/ema.py) — so orbax saves and
restores it as is. Shardings come from the logical axis
names on the parameters (see kjax.parallel.mesh), found by tracing the
initialiser abstractly: nothing is materialised before it is placed.
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from kjax import objectives
from kjax.config.platform import platform
from kjax.inputs import input_mode
from kjax.model.arch import architecture
from kjax.model.config import EncoderConfig
from kjax.parallel.mesh import data_sharded, logical_rules, logical_sharding, on_mesh
from kjax.train import ema
# The optimizer and schedule registries; imported from here by the trainers and tests.
from kjax.train.optimizers import NO_DECAY_MODULES, decay_mask, make_optimizer  # noqa: F401
from kjax.train.schedules import learning_rate_schedule  # noqa: F401


def make_model(config, deterministic: bool, return_analysis: bool = False):
    """The pretraining model of `model.arch` (kjax/model/arch)."""
    enc = EncoderConfig.from_config(config.model, config.knowledge)
    return architecture(enc).build(enc, deterministic, return_analysis)


MODEL_ARGS = ("input_ids", "token_type_ids", "attention_mask", "mlm_positions")


def dummy_inputs(config, batch_size: int = 1):
    """(positional args, keyword args) that trace every parameter at init: the
    input mode's inputs and every objective's (kjax/inputs, kjax/objectives)."""
    kwargs = {**input_mode(config).dummy_inputs(config, batch_size),
              **objectives.dummy_inputs(config, batch_size)}
    return tuple(kwargs.pop(k) for k in MODEL_ARGS), kwargs


def _init_fn(config, model, tx):
    if getattr(model.config, "scan_unroll", 1) != 1:
        # The same parameters from the rolled loop (nn.scan splits the layers'
        # rngs alike), and a program XLA compiles in a fraction of the time
        # of the unrolled one (GPU default: scan_unroll=0).
        model = model.clone(config=dataclasses.replace(model.config, scan_unroll=1))

    def init(rng):
        params_rng, dropout_rng = jax.random.split(rng)
        args, kwargs = dummy_inputs(config)
        params = model.init(params_rng, *args, **kwargs)["params"]
        return ema.with_ema(config.train, {   # its EMA (boxed as the params), if kept
            "step": jnp.zeros((), jnp.int32), "params": params,
            "opt_state": tx.init(params), "rng": jax.random.key_data(dropout_rng)})
    return init


def _boxed_shapes(config, model, tx):
    """The state's shapes, its parameters still boxed with their logical axis
    names: one trace of the init gives both the shapes and the shardings."""
    return jax.eval_shape(_init_fn(config, model, tx), jax.random.key(0))


def _shardings_of(config, mesh, boxed):
    """The state's shardings from its boxes' logical names; with
    mesh.shard_update, the parameters', the optimizer state's and the EMA's
    sliced over mesh.data too (ZeRO, kjax/parallel/mesh.py data_sharded; the
    EMA is made from the sliced parameters, so it is laid out as they are):
    orbax restores a checkpoint onto either layout, so a resume may switch it."""
    rules = logical_rules(config)
    with nn.logical_axis_rules(rules):
        shardings = logical_sharding(mesh, nn.get_partition_spec(boxed), rules)
    if config.mesh.get("shard_update", False):
        shapes = jax.eval_shape(nn.meta.unbox, boxed)
        for part in ("params", "opt_state", ema.KEY):
            if part in shardings:
                shardings[part] = jax.tree.map(lambda sh, s: data_sharded(sh, s.shape),
                                               shardings[part], shapes[part])
    return shardings


def state_shardings(config, mesh, model, tx):
    """NamedShardings for every leaf of the state, from the logical axis names."""
    return _shardings_of(config, mesh, _boxed_shapes(config, model, tx))


def init_state(config, mesh, model, tx, shardings=None):
    """(state, shardings): a fresh state placed on the mesh. `shardings`, when
    the caller has them from `abstract_state`, spares tracing the init again."""
    if shardings is None:
        shardings = state_shardings(config, mesh, model, tx)
    init = _init_fn(config, model, tx)
    key = jax.random.key(config.train.seed)
    if op_by_op_init(mesh):   # unsharded (no mesh: init's batch of one), then placed
        return jax.device_put(nn.meta.unbox(init(key)), shardings), shardings
    with on_mesh(mesh, config):
        state = jax.jit(lambda r: nn.meta.unbox(init(r)), out_shardings=shardings)(key)
    return state, shardings


def op_by_op_init(mesh) -> bool:
    """Initialise op by op (each jax.random call compiled once per shape, the
    values those of the jitted init) on one GPU process: jitted, the init of a
    deep unrolled encoder is one giant program whose compile delays the first
    step (docs/PERFORMANCE.md, "What decides speed: unrolled layers and the
    dropout generator"). Elsewhere the jitted init stays: on TPU pods and
    several processes it is what creates each shard where it lives."""
    return jax.process_count() == 1 and platform() == "gpu"


def abstract_state(config, mesh, model, tx):
    """ShapeDtypeStructs with shardings: the restore target for orbax. (The
    boxes come off inside eval_shape: under a mesh, flax's unbox constrains
    each value's sharding, which only a traced value takes.)"""
    boxed = _boxed_shapes(config, model, tx)
    shardings = _shardings_of(config, mesh, boxed)
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                        jax.eval_shape(nn.meta.unbox, boxed), shardings), shardings
