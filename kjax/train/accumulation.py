"""A step's gradients, reduced across devices once whatever the microbatch
count; gradient accumulation (`train.microbatches`): one optimizer update
from k microbatches of the step's global batch, run one after another by a
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

One reduction a step. Left to XLA, the microbatch loop all-reduces every
microbatch's gradients inside the loop (XLA does not hoist it out: k times
the step's communication, and the word-embedding table's twice, once per
use). So the loop runs in a `shard_map` manual over the batch axes (data,
fsdp; tensor stays XLA's): each device sums the gradients of its own rows
of every microbatch, unreduced, in fp32 (the two uses of a tied table
summed before any reduction), and reduces them once after the loop into
the parameters' layout. Under `mesh.shard_update` (ZeRO over the data
axis) the parameters and their optimizer state are kept sliced over data
(kjax/parallel/mesh.py data_sharded): the step all-gathers the parameters
once, reduce-scatters the gradients once (XLA:TPU may run that as an
all-reduce and keep the slice) and each device updates its slice in place,
so the update reads and writes 1/data of the state; without it the
gradients are all-reduced and every device updates everything. FSDP's
parameters are gathered once before the loop too (`mesh.fsdp_gather=step`:
unsharded fp32 gradients summed, one reduce-scatter) or in every microbatch
(`microbatch`: the gather's transpose reduce-scatters each microbatch's
gradients over fsdp, FSDP's memory; the data axis still reduces once).
Explicit sharding's unreduced types would say the same in jit, but only
with every mesh axis Explicit, which the model's logical-axis constraints
(flax, Auto mode) are not; a shard_map needs nothing of the model. One pass
(k = 1) with replicated parameters keeps XLA's program: its one reduction
is of bf16 partial products, overlapped with the layer loop's backward.

Microbatch i takes rows [i·m, (i+1)·m) of every batch shard (m = B / (k·D),
D = mesh data × fsdp): the split is a reshape of each device's own rows, no
data moves between devices, and a shard's rows of a microbatch have
contiguous global indices, which the flash kernel's keep bits need.
"""
from __future__ import annotations

import contextlib
import contextvars

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from kjax import objectives
from kjax.parallel.mesh import BATCH_AXES, batch_sharding, manual_part


# Set while `kjax compile` costs a step (kjax/pretrain/aot.py): XLA's cost
# analysis counts a loop's body once, so the microbatch loop is unrolled, and
# one microbatch runs through the same code as k do (the costs then line up).
_UNROLLED = contextvars.ContextVar("kjax_microbatches_unrolled", default=False)


@contextlib.contextmanager
def unrolled():
    """Steps traced inside unroll their microbatch loop, whatever k (also 1)."""
    token = _UNROLLED.set(True)
    try:
        yield
    finally:
        _UNROLLED.reset(token)


def gradients(loss_fn, params, batch: dict, rng, config, mesh, param_shardings):
    """(gradients of the whole batch, laid out as the parameters are, metrics).
    `loss_fn(params, batch, rng, shares, example_ids)` → (loss, metrics), with
    `shares` {objective: this microbatch's slots / the batch's} (None: the
    whole batch) and `example_ids` its rows' indices in the batch."""
    k = config.train.microbatches
    manual = frozenset(BATCH_AXES)
    specs = jax.tree.map(lambda s: manual_part(s.spec, manual), param_shardings)
    sliced = any("data" in _axes(e) for spec in jax.tree.leaves(
        specs, is_leaf=lambda x: isinstance(x, P)) for e in spec)
    if k == 1 and not sliced and not _UNROLLED.get():
        # one pass, the update replicated: XLA's own reduction (of bf16
        # partial products, overlapped with the layer loop's backward)
        (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, rng)
        return grads, metrics
    # gathered before the loop: every axis, or (fsdp_gather=microbatch) the data axis
    once = manual if config.mesh.get("fsdp_gather", "step") == "step" else frozenset({"data"})
    splits = jax.tree.map(lambda spec: tuple(_split(e, once) for e in spec), specs,
                          is_leaf=lambda x: isinstance(x, P))
    totals = objectives.slots(batch, config)   # the whole batch's, before the split
    size = next(iter(batch.values())).shape[0]
    ids = jax.lax.with_sharding_constraint(jnp.arange(size, dtype=jnp.int32),
                                           batch_sharding(mesh))
    rules = tuple((name, _without(axes, manual)) for name, axes in nn.get_logical_axis_rules())

    def local(params, batch, ids, totals, rng):
        with nn.logical_axis_rules(rules):   # inside, the batch axes are this device's rows
            full = jax.tree.map(lambda x, sp: _gather(x, sp, 1), params, splits)

            def loss_of(p, mb, shares, mb_ids):   # FSDP's gather per microbatch, if any
                p = jax.tree.map(lambda x, sp: _gather(x, sp, 0), p, splits)
                return loss_fn(p, mb, rng, shares, mb_ids)
            grad_of = jax.value_and_grad(loss_of, has_aux=True)

            def body(carry, xs):
                grads_sum, metrics_sum = carry
                mb, mb_ids = xs
                counts = objectives.slots(mb, config)   # this device's rows
                shares = {o: counts[o] / jnp.maximum(totals[o], 1e-8) for o in counts}
                (_, metrics), grads = grad_of(full, mb, shares, mb_ids)
                grads_sum = jax.tree.map(lambda a, g: a + g.astype(jnp.float32), grads_sum,
                                         grads)
                return (grads_sum, jax.tree.map(jnp.add, metrics_sum, metrics)), None

            micro = jax.tree.map(lambda x: x.reshape((k, x.shape[0] // k) + x.shape[1:]),
                                 (batch, ids))
            first = jax.tree.map(lambda x: x[0], micro)
            shapes = jax.eval_shape(lambda: grad_of(full, first[0], totals, first[1])[0][1])
            zeros = (jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), full),
                     jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes))
            (grads, metrics), _ = jax.lax.scan(body, zeros, micro,
                                               unroll=k if _UNROLLED.get() else 1)
            grads = jax.tree.map(lambda g, sp: _reduce(g, sp, manual), grads, splits)
            return grads, jax.lax.psum(metrics, tuple(manual))

    grads, metrics = jax.shard_map(
        local, mesh=mesh, in_specs=(specs, P(BATCH_AXES), P(BATCH_AXES), P(), P()),
        out_specs=(specs, P()), axis_names=set(manual), check_vma=False)(
            params, batch, ids, totals, rng)
    return jax.tree.map(lambda g, p: g.astype(p.dtype), grads, params), metrics


def _without(axes, manual):
    """A logical rule's mesh axes less the shard_map's manual ones."""
    names = tuple(a for a in (axes if isinstance(axes, (tuple, list)) else (axes,))
                  if a is not None and a not in manual)
    return None if not names else names[0] if len(names) == 1 else names


def _axes(entry) -> tuple:
    return () if entry is None else entry if isinstance(entry, tuple) else (entry,)


def _split(entry, once) -> tuple[tuple, tuple]:
    """(axes gathered every microbatch, axes gathered once) of one dimension's
    spec entry: its minor axes that `once` names are gathered before the loop;
    an entry whose once-axis is not minor is gathered before the loop whole
    (a block of a major axis is not contiguous without its minor ones)."""
    axes = _axes(entry)
    i = len(axes)
    while i and axes[i - 1] in once:
        i -= 1
    if any(a in once for a in axes[:i]):
        return (), axes
    return axes[:i], axes[i:]


def _gather(x, split, which: int):
    """A parameter's block, all-gathered over its dimensions' axes gathered
    every microbatch (which=0) or once (1)."""
    for d, parts in enumerate(split):
        if parts[which]:
            x = jax.lax.all_gather(x, parts[which], axis=d, tiled=True)
    return x


def _reduce(g, split, manual):
    """This device's unreduced gradient sum → its block of the whole batch's,
    laid out as the parameter: reduce-scattered over the axes gathered before
    the loop (those gathered every microbatch were, by the gather's
    transpose), summed over the axes that split no dimension."""
    for d, (_, once) in enumerate(split):
        if once:
            g = jax.lax.psum_scatter(g, once, scatter_dimension=d, tiled=True)
    named = {a for parts in split for axes in parts for a in axes}
    rest = tuple(a for a in sorted(manual) if a not in named)
    return jax.lax.psum(g, rest) if rest else g
