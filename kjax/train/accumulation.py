"""Gradient accumulation: one optimizer update from k microbatches of the
step's global batch (`train.microbatches`), run one after another by a
`lax.scan` inside the jitted step (one compile, a microbatch's activations
in memory at a time).

The result is the whole batch's, not a mean of microbatch means:

- every objective's loss and metrics are weighted means over its slots
  (masked positions, NSP pairs, knowledge targets), so microbatch j's are
  scaled by its share of the batch's slots, W_j / W, before they are summed:
  Σ_j (W_j / W) · (S_j / W_j) = S / W, whatever the masked counts of each;
- gradients are summed in fp32 whatever `model.dtype`;
- dropout hashes each row's global example index (kjax/model/dropout_hash.py),
  passed to the model as `example_ids`: a row drops the same units in
  whichever microbatch, on whichever device, it lands.

So k = 1, 4 or 8 give the same parameters up to the order of float sums, and
a run resumed with another k (on a smaller slice, say) continues its curve.

Microbatch i takes rows [i·m, (i+1)·m) of every batch shard (m = B / (k·D),
D = mesh data × fsdp): the split is a reshape of each device's own rows, no
data moves between devices, and a shard's rows of a microbatch have
contiguous global indices, which the flash kernel's keep bits need.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from kjax import objectives
from kjax.parallel.mesh import BATCH_AXES


def batch_shards(mesh) -> int:
    return int(np.prod([mesh.shape[a] for a in BATCH_AXES]))


def split(batch: dict, k: int, mesh) -> tuple[dict, jax.Array]:
    """(every leaf [B, ...] → [k, B/k, ...], example_ids int32 [k, B/k]): the
    microbatches and each row's index in the global batch."""
    shards = batch_shards(mesh)
    size = next(iter(batch.values())).shape[0]
    rows = size // (k * shards)
    spec = NamedSharding(mesh, P(None, BATCH_AXES))

    def cut(x):
        x = x.reshape((shards, k, rows) + x.shape[1:]).swapaxes(0, 1)
        x = x.reshape((k, shards * rows) + x.shape[3:])
        return jax.lax.with_sharding_constraint(x, spec)
    return jax.tree.map(cut, batch), cut(jnp.arange(size, dtype=jnp.int32))


def accumulate(loss_fn, params, batch: dict, k: int, mesh, config, param_shardings):
    """(gradients, metrics) of the whole batch from k microbatches.
    `loss_fn(params, microbatch, shares, example_ids)` → (loss, metrics), with
    `shares` {objective: this microbatch's slots / the batch's}."""
    micro, example_ids = split(batch, k, mesh)
    totals = objectives.slots(batch, config)
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def body(carry, xs):
        grads_sum, metrics_sum = carry
        mb, ids = xs
        counts = objectives.slots(mb, config)
        shares = {o: counts[o] / jnp.maximum(totals[o], 1e-8) for o in counts}
        (_, metrics), grads = grad_fn(params, mb, shares, ids)
        grads_sum = jax.tree.map(lambda a, g: a + g.astype(jnp.float32), grads_sum, grads)
        grads_sum = jax.lax.with_sharding_constraint(grads_sum, param_shardings)
        return (grads_sum, jax.tree.map(jnp.add, metrics_sum, metrics)), None

    first = jax.tree.map(lambda x: x[0], (micro, example_ids))
    shapes = jax.eval_shape(lambda: grad_fn(params, first[0], {o: 1.0 for o in totals},
                                            first[1])[0][1])
    zeros = (jax.lax.with_sharding_constraint(
                 jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params), param_shardings),
             jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes))
    (grads, metrics), _ = jax.lax.scan(body, zeros, (micro, example_ids))
    return jax.tree.map(lambda g, p: g.astype(p.dtype), grads, params), metrics
