"""Optimizers by name (`train.optimizer`), each from optax transforms behind
the same global-norm clipping, with the schedule of `train.schedule`
(kjax/train/schedules.py):

    adamw         optax.adamw (BERT's recipe; the default)
    lamb          Adam's direction scaled per tensor by the trust ratio
                  ‖w‖/‖update‖ (You et al. 2020, BERT in 76 minutes)
    adafactor     factored second moments, no first moment: a kernel's state
                  is a row and a column, not a copy of it (Shazeer & Stern 2018)
    stable_adamw  AdamW whose step shrinks per tensor where the gradient
                  outruns its second moment (ModernBERT's StableAdamW)

Every one leaves LayerNorm scales, biases and the E_inpos gates undecayed
(`decay_mask`); LAMB's trust ratio skips them as well.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from kjax.errors import KjaxError
from kjax.train.schedules import learning_rate_schedule, setting

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


def adamw(train_cfg, schedule) -> optax.GradientTransformation:
    return optax.adamw(schedule, b1=train_cfg.b1, b2=train_cfg.b2, eps=train_cfg.eps,
                       weight_decay=train_cfg.weight_decay, mask=decay_mask)


def lamb(train_cfg, schedule) -> optax.GradientTransformation:
    """optax.lamb's chain with its trust ratio masked like the decay: the
    large-batch BERT recipe excludes biases and LayerNorm from both (a bias
    starts at 0, so ‖w‖ = 0 would freeze or blow up its step)."""
    return optax.chain(
        optax.scale_by_adam(b1=train_cfg.b1, b2=train_cfg.b2, eps=train_cfg.eps),
        optax.add_decayed_weights(train_cfg.weight_decay, mask=decay_mask),
        optax.masked(optax.scale_by_trust_ratio(), decay_mask),
        optax.scale_by_learning_rate(schedule))


def adafactor(train_cfg, schedule) -> optax.GradientTransformation:
    """optax.adafactor on the schedule as an absolute step, as Adam's (no
    parameter-scale factor: HF's advice for an external schedule), its
    defaults otherwise (decay_rate 0.8, update clipping at RMS 1, no
    momentum); b1, b2 and eps are not used. The decay is `weight_decay` ×
    the schedule, decoupled as in AdamW (optax adds it after the step is
    scaled by the learning rate)."""
    wd = train_cfg.weight_decay
    return _axis_names_where_shapes_match(optax.adafactor(
        learning_rate=schedule, multiply_by_parameter_scale=False,
        weight_decay_rate=(lambda count: wd * schedule(count)) if wd else None,
        weight_decay_mask=decay_mask))


def _axis_names_where_shapes_match(tx) -> optax.GradientTransformation:
    """Initialised on flax's boxed params (kjax/train/state.py derives the
    state's shardings from the boxes), Adafactor's factored rows and columns
    and its (1,) placeholders inherit their parameter's axis names but not
    its shape: they are unboxed, i.e. replicated (a row and a column are
    small). A full second moment `v` keeps its parameter's names."""
    def same_shape(v, p):
        return v if jnp.shape(_raw(v)) == jnp.shape(_raw(p)) else _raw(v)

    def init(params):
        def fix(state):
            if not isinstance(state, optax.FactoredState):
                return state
            return state._replace(v_row=_unboxed(state.v_row), v_col=_unboxed(state.v_col),
                                  v=jax.tree.map(same_shape, state.v, params, is_leaf=_is_box))
        return jax.tree.map(fix, tx.init(params),
                            is_leaf=lambda x: isinstance(x, optax.FactoredState))
    return optax.GradientTransformationExtraArgs(init, tx.update)


def _is_box(x) -> bool:
    return isinstance(x, nn.meta.AxisMetadata)


def _raw(x):
    """A box's value as is (flax's unbox would constrain its sharding under a mesh)."""
    return x.value if _is_box(x) else x


def _unboxed(tree):
    return jax.tree.map(_raw, tree, is_leaf=_is_box)


def scale_by_stable_adamw(b1: float, b2: float, eps: float, weight_decay: float,
                          mask) -> optax.GradientTransformation:
    """StableAdamW (Wortsman et al. 2023, "Stable and low-precision training
    for large-scale vision-language models"; ModernBERT's optimizer):
    Adam's m̂ / (√v̂ + eps) plus decoupled decay, divided per tensor by

        max(1, RMS_t),   RMS_t = sqrt(mean(g_t² / max(v̂_t, eps²)))

    i.e. each tensor's learning rate (step and decay alike) is clipped where
    this step's gradient is large against its running second moment. The
    state is optax.scale_by_adam's; scale by the learning rate after it."""
    adam = optax.scale_by_adam(b1=b1, b2=b2, eps=eps)
    decay = optax.add_decayed_weights(weight_decay, mask=mask)

    def update(grads, state, params=None):
        updates, state = adam.update(grads, state, params)
        updates, _ = decay.update(updates, decay.init(params), params)
        correction = 1.0 - b2 ** state.count.astype(jnp.float32)

        def clipped(u, g, nu):
            v_hat = nu / correction
            rms = jnp.sqrt(jnp.mean(jnp.square(g) / jnp.maximum(v_hat, eps ** 2)))
            return u / jnp.maximum(1.0, rms).astype(u.dtype)
        return jax.tree.map(clipped, updates, grads, state.nu), state
    return optax.GradientTransformation(adam.init, update)


def stable_adamw(train_cfg, schedule) -> optax.GradientTransformation:
    return optax.chain(
        scale_by_stable_adamw(train_cfg.b1, train_cfg.b2, train_cfg.eps,
                              train_cfg.weight_decay, decay_mask),
        optax.scale_by_learning_rate(schedule))


OPTIMIZERS = {"adamw": adamw, "lamb": lamb, "adafactor": adafactor,
              "stable_adamw": stable_adamw}


def make_optimizer(train_cfg) -> optax.GradientTransformation:
    """Global-norm clipping, then `train.optimizer` (adamw when the key is
    absent: fine-tuning's optimizer dict) on `train.schedule`."""
    name = setting(train_cfg, "optimizer", "adamw")
    if name not in OPTIMIZERS:
        raise KjaxError(f"train.optimizer={name!r}; choose {', '.join(OPTIMIZERS)}")
    return optax.chain(optax.clip_by_global_norm(train_cfg.grad_clip_norm),
                       OPTIMIZERS[name](train_cfg, learning_rate_schedule(train_cfg)))


def with_schedule_count(opt_state, count: int):
    """`opt_state` with the clock of every learning-rate schedule in it
    (optax's ScaleByScheduleState.count, which counts the updates this state
    has made) at `count`, each on its own device layout: a kept optimizer
    state then applies the schedule of the run's own step counter (a phase's
    from 0, a decay branch's from its parent's step), not the updates its
    parent made. Adam's moments and their bias correction keep their count."""
    def reset(s):
        if isinstance(s, optax.ScaleByScheduleState):
            c = s.count
            value = jnp.asarray(count, c.dtype)
            return s._replace(count=jax.device_put(value, c.sharding)
                              if isinstance(c, jax.Array) else value)
        return s
    return jax.tree.map(reset, opt_state,
                        is_leaf=lambda s: isinstance(s, optax.ScaleByScheduleState))
