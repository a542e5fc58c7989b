"""Which attention implementation runs, and the masks and B layouts they share.

`model.attention_impl` picks, per call of SelfAttention:

    xla          the explicit path in kjax/model/attention.py: scores, Eq. 1,
                 mask, softmax, dropout, α·V, line by line (the reference);
    dot_product  `jax.nn.dot_product_attention` (XLA on CPU/TPU, cuDNN on GPU
                 for bf16/fp16) when the call has no Eq. 1 and no attention
                 dropout, else xla;
    flash        the Pallas kernel of kjax/model/flash_shake.py, Eq. 1 and
                 attention dropout inside the online softmax (CPU: Pallas'
                 interpret mode, slow, for tests and debugging);
    auto         (the default) on GPU: cuDNN (dot_product) for a call with
                 neither Eq. 1 nor attention dropout; for a call with either,
                 flash if `GPU_FLASH_FASTER` says a GPU measured the kernel
                 faster than the explicit path for each feature the call has,
                 else xla. On CPU and TPU: xla.

The rule follows measurements, not expectations: on CPU XLA's form of
dot_product_attention is the same algorithm as the explicit path with extra
mask plumbing, and TPU runs the same XLA code; on an H200 the kernel was
slower than the explicit path with dropout and with B (docs/PERFORMANCE.md,
"What decides speed: attention paths"). On TPU v4+ the kernel goes through
Mosaic; v2/v3's Mosaic refuses its bf16 matmuls (docs/TPU.md §15).

Whatever the setting, a call that needs the attention weights themselves
(`return_analysis`: α per head) runs the explicit path, and so does a call
with attention dropout under dot_product (cuDNN's dropout is not a function
of (seed, step): kjax/model/dropout_hash.py). Attention dropout draws the
same keep bits on the explicit and flash paths (dropout_hash), so switching
between them does not change a run's masks.

Masks follow `jax.nn.dot_product_attention` (True attends): the padding mask
over keys [b, k], optional segment ids [b, s] (packed documents: a query sees
only its own segment) and an optional local window w (|q − k| ≤ w // 2,
ModernBERT's 128-token local attention). A query row with no key to attend
to is undefined (kjax never reads one: it is a padded position).
"""
from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from kjax.config.platform import platform
from kjax.model import flash_tuning
from kjax.model.config import ATTENTION_IMPLS as IMPLS
from kjax.model.flash_shake import MASK_VALUE, flash_attention
from kjax.shake.matrix import SHAKE_PAIR_KEYS, shake_from_batch

__all__ = ["IMPLS", "MASK_VALUE", "SHAKE_PAIR_KEYS", "choose_impl", "dense_shake",
           "fused_attention", "logits_mask", "shake_from_batch"]


def dense_shake(shake, seq_len: int):
    """B [b, q, k] from either layout (pairs: each query's key run [start, end))."""
    if not isinstance(shake, dict):
        return shake
    keys = jnp.arange(seq_len)[None, None, :]
    inside = (keys >= shake["key_start"][..., None]) & (keys < shake["key_end"][..., None])
    return jnp.where(inside, shake["weight"].astype(jnp.float32)[..., None], 0.0)


def logits_mask(attention_mask, segment_ids=None, local_window: int | None = None):
    """Boolean [b, 1, q or 1, k], True where a query may attend a key."""
    mask = (attention_mask > 0)[:, None, None, :]
    if segment_ids is not None:
        mask = mask & (segment_ids[:, None, :, None] == segment_ids[:, None, None, :])
    if local_window is not None:
        pos = jnp.arange(attention_mask.shape[-1])
        mask = mask & (jnp.abs(pos[:, None] - pos[None, :]) <= local_window // 2)
    return mask


# Whether a GPU measured the flash kernel faster than the explicit path for calls
# with attention dropout and calls with Eq. 1's B (BERT-base step, docs/GPU.md §5):
# `auto` sends a call to the kernel when every feature it has says so.
GPU_FLASH_FASTER = {"dropout": False, "shake": False}


def choose_impl(impl: str, *, shaking: bool, explicit: bool, dropping: bool = False,
                dtype=jnp.float32) -> str:
    """The path one call takes: "xla", "dot_product" or "flash" (module doc)."""
    if impl not in IMPLS:
        raise ValueError(f"model.attention_impl={impl!r}; choose one of {IMPLS}")
    if explicit or impl == "xla":
        return "xla"
    if impl == "flash":
        return "flash"
    if not shaking and not dropping:
        return "dot_product" if impl == "dot_product" or _cudnn(dtype) else "xla"
    features = [f for f, on in (("dropout", dropping), ("shake", shaking)) if on]
    if impl == "auto" and platform() == "gpu" and all(GPU_FLASH_FASTER[f] for f in features):
        return "flash"
    return "xla"


def _cudnn(dtype) -> bool:
    return platform() == "gpu" and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16)


def fused_attention(impl: str, q, k, v, attention_mask, *, segment_ids=None,
                    local_window: int | None = None, shake=None, bf=None, dropout=None,
                    tiles=()):
    """q (scaled by 1/sqrt(d)), k, v [b, s, heads, d] → context [b, s, heads, d].
    `dropout`: {"rate", "words", "broadcast", "examples"} (kjax/model/dropout_hash.py),
    flash only;
    `tiles`: model.attention_tiles as (signature, value) pairs (flash_tuning)."""
    if impl == "dot_product" and dropout is None:
        return _dot_product(q, k, v, attention_mask, segment_ids, local_window)
    if impl != "flash":
        raise ValueError(f"fused_attention runs dot_product (no dropout) or flash, not {impl!r}")
    return _sharded_flash(q, k, v, attention_mask, segment_ids, local_window, shake, bf, dropout,
                          tiles)


def _dot_product(q, k, v, attention_mask, segment_ids, local_window):
    if _cudnn(q.dtype):
        # cuDNN has no two-sided window and takes masks as a [b, 1, q, k] bias.
        mask = logits_mask(attention_mask, segment_ids, local_window)
        mask = jnp.broadcast_to(mask, (q.shape[0], 1, q.shape[1], k.shape[1]))
        try:
            return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=1.0,
                                                implementation="cudnn")
        except (ValueError, NotImplementedError, RuntimeError):
            pass   # a shape, dtype or cuDNN version it does not take: XLA below
    window = None if local_window is None else (local_window // 2, local_window // 2)
    return jax.nn.dot_product_attention(q, k, v, mask=logits_mask(attention_mask, segment_ids),
                                        scale=1.0, local_window_size=window,
                                        implementation="xla")


def _sharded_flash(q, k, v, attention_mask, segment_ids, local_window, shake, bf, dropout,
                   fixed_tiles=()):
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
        tiles = None
        if platform() == "gpu":   # Triton: the tiles timed on this card (flash_tuning)
            layout = "none" if shake is None else "pairs" if isinstance(shake, dict) else "dense"
            call = flash_tuning.Call(q.shape[0], q.shape[1], q.shape[2], q.shape[3],
                                     jnp.dtype(q.dtype).name, rate, layout,
                                     segment_ids is not None, local_window)
            tiles = flash_tuning.tiles_for(call, fixed_tiles)
        return flash_attention(q, k, v, attention_mask, segment_ids=segment_ids,
                               local_window=local_window, shake=shake, bf=bf,
                               dropout_rate=rate, dropout_words=words,
                               dropout_broadcast=broadcast, index_base=base,
                               tiles=tiles, interpret=interpret)

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
