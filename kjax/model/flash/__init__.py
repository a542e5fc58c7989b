"""The flash-attention kernels with SHAKE's Eq. 1 and the dropout keep bits
inside (Pallas: Triton on GPU, Mosaic on TPU, interpret mode on CPU), and
the one function the model reaches them through, `sharded_flash_attention`
(kjax/model/attention_core.py's `fused_attention` calls it), and for a run's
config (attention_core's `choose_flash_tiles`) the tiles as values:
`flash_calls`, the calls a traced step makes, read from its jaxpr, and
`choose_tiles`, the tiles to fix for them (tuning.py):

    attention.py   flash_attention: the forward and backward pallas_calls, custom VJP
    kernels.py     the kernel bodies (online softmax, Eq. 1, keep bits per tile)
    tiles.py       how each kernel tiles the sequence, per platform
    tuning.py      a traced call's tiles (the config's, else the table); on a GPU,
                   better ones timed on the card per call signature, chosen before
                   a step is traced

The keep bits' hash lives beside them in kjax/model/dropout_hash.py: hidden
dropout draws from it too.
"""
from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from kjax.config.platform import platform
from kjax.model.flash import tuning as flash_tuning
from kjax.model.flash.attention import MASK_VALUE, flash_attention

__all__ = ["MASK_VALUE", "choose_tiles", "flash_calls", "sharded_flash_attention"]

flash_calls = flash_tuning.calls_in       # (a traced step's jaxpr) → [Call]
choose_tiles = flash_tuning.choose_tiles  # ([Call], fixed) → {signature: 'F/DQ/DKV'}


def sharded_flash_attention(q, k, v, attention_mask, segment_ids, local_window, shake, bf,
                            dropout, fixed_tiles=()):
    """The kernel is per (example, head): under a mesh it runs per device on
    its batch and head shards (shard_map), as XLA cannot partition a Pallas
    call. The specs come from the logical-axis rules, not from mesh names.
    Dropout's keep bits hash the global example and head, so each shard
    passes its offsets: the masks do not depend on the mesh. A microbatch's
    rows carry their global indices (`examples`), contiguous within a shard
    (kjax/train/accumulation.py): the shard's first one is its offset."""
    interpret = platform() == "cpu"
    bf = jnp.asarray(0.0 if bf is None else bf, jnp.float32)
    rate = 0.0 if dropout is None else dropout["rate"]
    broadcast = dropout is not None and dropout["broadcast"]
    words = jnp.zeros(2, jnp.int32) if dropout is None else dropout["words"]
    examples = None if dropout is None else dropout.get("examples")
    mesh = jax.sharding.get_abstract_mesh()
    heads = nn.logical_to_mesh_axes(("batch", "length", "heads", "kv"))

    def local(q, k, v, attention_mask, segment_ids, shake, bf, words, examples, sharded=False):
        base = None
        if (sharded or examples is not None) and rate:
            first = (_axis_index(heads[0]) * q.shape[0] if examples is None
                     else examples[0].astype(jnp.int32))
            head = _axis_index(heads[2]) * q.shape[2] if sharded else jnp.int32(0)
            base = jnp.stack([first, head, jnp.int32(
                q.shape[2] * (_axes_size(mesh, heads[2]) if sharded else 1))])
        run = functools.partial(
            flash_attention, q, k, v, attention_mask, segment_ids=segment_ids,
            local_window=local_window, shake=shake, bf=bf, dropout_rate=rate,
            dropout_words=words, dropout_broadcast=broadcast, index_base=base,
            interpret=interpret)
        if platform() != "gpu":
            return run(tiles=None)
        # Triton: the config's tiles, else the card's cached ones, else the table
        # (flash_tuning.traced_tiles: nothing timed or kept); the call names itself
        # in the trace (a named scope, absent from the lowered text), so a trace of
        # the steps lists the calls whose tiles a run chooses
        layout = "none" if shake is None else "pairs" if isinstance(shake, dict) else "dense"
        call = flash_tuning.Call(q.shape[0], q.shape[1], q.shape[2], q.shape[3],
                                 jnp.dtype(q.dtype).name, rate, layout,
                                 segment_ids is not None, local_window)
        with jax.named_scope(call.scope):
            return run(tiles=flash_tuning.traced_tiles(call, fixed_tiles))

    args = (q, k, v, attention_mask, segment_ids, shake, bf, words, examples)
    if mesh.empty or mesh.size == 1:
        return local(*args)
    if q.shape[0] % _axes_size(mesh, heads[0]) or q.shape[2] % _axes_size(mesh, heads[2]):
        return local(*args)   # e.g. init's one-example batch: unsharded (XLA replicates it)
    rows = P(heads[0], None)
    shake_spec = None if shake is None else (
        jax.tree.map(lambda _: rows, shake) if isinstance(shake, dict) else P(heads[0], None, None))
    specs = (heads, heads, heads, rows, None if segment_ids is None else rows, shake_spec, P(),
             P(), None if examples is None else P(heads[0]))
    return jax.shard_map(functools.partial(local, sharded=True), mesh=mesh, in_specs=specs,
                         out_specs=heads, check_vma=False)(*args)


def _names(axes) -> tuple:
    return () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)


def _axes_size(mesh, axes) -> int:
    return int(np.prod([mesh.shape[n] for n in _names(axes)]))


def _axis_index(axes):
    """This shard's index along mesh axes (major first, as a PartitionSpec splits)."""
    names = _names(axes)
    return jax.lax.axis_index(names).astype(jnp.int32) if names else jnp.int32(0)
