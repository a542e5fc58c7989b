"""An exponential moving average (EMA) of the parameters (`train.ema_decay`).

With `train.ema_decay = d > 0` the train state holds `ema`, a float32 copy
of the parameter tree (sharded as the parameters: kjax/train/state.py gives
it their logical axis names), and every train step, after the optimizer's
update, moves it towards the new parameters θ:

    ema ← decay_t · ema + (1 − decay_t) · θ,    decay_t = min(d, t / (t + 10))

where t is the number of updates made before this one (the state's step).
The warmup form is TensorFlow's ExponentialMovingAverage (`num_updates`),
shifted by one so that the first update's decay is 0: the EMA starts from
the first trained weights whatever it held before (an initialisation, a
parent run's parameters), and early on averages over about the last tenth
of the steps (1 / (1 − decay_t) = (t + 10) / 10) instead of dragging the
random initialisation along for 1 / (1 − d) steps, which for d = 0.9999 is
longer than most runs. The decay reaches d at t = 10·d / (1 − d) (d = 0.999:
step 9990). Chosen over Adam's debiasing (optax.ema's `debias`), whose
stored value is not the weights until divided by 1 − d^t: here the
checkpoint's `ema` leaves are the weights, as a reader takes them.

The update is optax's (`optax.tree.update_moment`, order 1), inside the
jitted step, so it is a pure function of the state: a resumed run's EMA is
bit-identical to an uninterrupted one's. The EMA is checkpointed with the
state; eval, export, fill-mask and fine-tuning take it with `--weights ema`
(kjax/checkpoint/restore.py). With d = 0 (the default) the state has no
`ema` at all: state, checkpoints and compiled step are as without the key.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

KEY = "ema"          # the state's (and the checkpoint's) subtree
WARMUP = 10.0        # the t + 10 of decay_t


def enabled(train_cfg) -> bool:
    """Whether the run keeps an EMA (fine-tuning's optimizer dict has no key: no)."""
    return float(train_cfg.get("ema_decay", 0.0) if hasattr(train_cfg, "get") else 0.0) > 0


def start(params):
    """The EMA's first value: a float32 copy of `params` (boxes, where the
    parameters carry their logical axis names, are kept: the EMA's shardings
    come from them). Its own buffers, so a donated state never aliases."""
    return jax.tree.map(lambda x: jnp.array(x, jnp.float32, copy=True), params)


def with_ema(train_cfg, state: dict) -> dict:
    """`state` with an EMA starting at its params when the run keeps one
    (a fresh init, a phase's grafted parameters, an imported model)."""
    return {**state, KEY: start(state["params"])} if enabled(train_cfg) else state


def decay_at(step, decay: float):
    """decay_t = min(d, t / (t + 10)) of the update made at `step` (t, 0-based)."""
    t = jnp.asarray(step, jnp.float32)
    return jnp.minimum(jnp.float32(decay), t / (t + WARMUP))


def update(ema, params, step, decay: float):
    """The EMA after the update at `step` (module doc), in float32."""
    new = jax.tree.map(lambda x: x.astype(jnp.float32), params)
    return optax.tree.update_moment(new, ema, decay_at(step, decay), 1)
