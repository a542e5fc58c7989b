"""Flash attention with SHAKE's Eq. 1 inside the online softmax (Pallas).

For every (query block, key block) tile, on the scaled logits s = q·kᵀ:

    s' = s + |s ⊙ B| · bf                  (METHODS §1.2, Eq. 1; B ≥ 0)
    s' = -big where the mask says no       (padding, segments, local window)
    online softmax over key blocks         (FlashAttention-2: running max m,
                                            running sum l, unnormalised output)

The backward recomputes the tile from the saved log-sum-exp and applies the
chain rule through Eq. 1 (B ≥ 0, so d|s·B|/ds = B·sign(s)):

    ds' = p ⊙ (dp − rowsum(dO ⊙ O)),   ds = ds' ⊙ (1 + bf·B·sign(s))

in two kernels (FlashAttention-2's split, no atomics): one over query blocks
for dq, one over key blocks for dk and dv. B and bf get no gradient (B is
data, bf a hyper-parameter).

Attention dropout (rate r) multiplies the P that meets V by Z = keep/(1 − r),
the softmax statistics staying those of the undropped P; keep comes from
kjax/model/dropout_hash.py, recomputed per tile in all three kernels (never
stored): dV = (P∘Z)ᵀ dO, dP = (dO Vᵀ)∘Z, and D = rowsum(dO ∘ O) is Σ P∘dP∘Z.

B arrives in one of two layouts (kjax/shake/matrix.py):
  dense  [b, q, k], one weight per (query, key);
  pairs  per query: the key run [start, end) it boosts and its weight
         (each query boosts at most one contiguous run of keys), from which
         the kernel builds the B tile itself — O(seq) memory, not O(seq²).

Masks follow `jax.nn.dot_product_attention`: True attends. A query row with
no key to attend to (a padded query in its own segment) returns zeros and
passes no gradient; kjax never reads such rows.

The grid runs over batch, heads and blocks of the outer sequence, a
`fori_loop` over the blocks of the other (skipping blocks outside a local
window); the kernels are in kjax/model/flash/kernels.py, each tiling its own
way (kjax/model/flash/tiles.py; timed on the card: flash_tuning.py). The kernels
read q, k, v [batch, seq, heads, head_dim] in place on GPU and in interpret
mode; on TPU they are made [batch, heads, seq, head_dim] first, and
per-position vectors are laid out [b, s, 1] (query side) and [b, 1, s] (key
side), so every block's last two dimensions are TPU-legal. With
`interpret=True` (CPU) Pallas runs the same kernels through XLA: that is how
the tests check them (`backend="tpu"` with it: the TPU layout).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from kjax.config.platform import platform, tpu_generation
from kjax.model import dropout_hash
from kjax.model.flash.kernels import (MASK_VALUE, Static, dkv_kernel, dkv_t_kernel, dq_kernel,
                                      forward_kernel)
from kjax.model.flash.tiles import Tiles, block_spec, kernel_tiles

__all__ = ["MASK_VALUE", "Static", "Tiles", "flash_attention"]


# ---- pallas_call plumbing ---------------------------------------------------------------

def _call(kernel, st: Static, tiles: Tiles, over_q: bool, inputs: dict, outputs: dict,
          name: str):
    b, seq, h = _sizes(st, inputs["q"])
    names = tuple(inputs) + tuple(outputs)
    spec = functools.partial(block_spec, over_q=over_q, block=tiles.outer,
                             heads_major=st.heads_major)
    return pl.pallas_call(
        functools.partial(kernel, st=st, names=names),
        grid=(b, h, seq // tiles.outer),
        in_specs=[spec(n, a.shape) for n, a in inputs.items()],
        out_specs=[spec(n, a.shape) for n, a in outputs.items()],
        out_shape=list(outputs.values()),
        interpret=st.interpret, name=name,
        compiler_params=pltriton.CompilerParams(num_warps=tiles.num_warps,
                                                num_stages=tiles.num_stages)
        if st.triton else None,
    )(*inputs.values())


def _sizes(st: Static, q) -> tuple[int, int, int]:
    """(batch, seq, heads) of a [b, s, h, d] or, heads-major, [b, h, s, d] array."""
    b, x, y, _ = q.shape
    return (b, y, x) if st.heads_major else (b, x, y)


def _forward(st: Static, q, k, v, aux: dict):
    # the log-sum-exp as q's layout with one feature: [b, s, h, 1] or [b, h, s, 1]
    outputs = {"o": jax.ShapeDtypeStruct(q.shape, q.dtype),
               "lse": jax.ShapeDtypeStruct(q.shape[:3] + (1,), jnp.float32)}
    return _call(forward_kernel, st, st.forward, True, {"q": q, "k": k, "v": v, **aux}, outputs,
                 "shake_flash_forward")


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attention(st: Static, q, k, v, aux):
    return _forward(st, q, k, v, aux)[0]


def _attention_fwd(st, q, k, v, aux):
    o, lse = _forward(st, q, k, v, aux)
    return o, (q, k, v, aux, o, lse)


def _attention_bwd(st, residuals, do):
    q, k, v, aux, o, lse = residuals
    delta = jnp.sum(o.astype(jnp.float32) * do.astype(jnp.float32), axis=-1, keepdims=True)
    common = {"q": q, "k": k, "v": v, "do": do.astype(q.dtype), "lse": lse, "delta": delta, **aux}
    (dq,) = _call(dq_kernel, st, st.dq, True, common,
                  {"dq": jax.ShapeDtypeStruct(q.shape, q.dtype)}, "shake_flash_dq")
    kernel = dkv_kernel
    if st.dkv.transposed and not st.heads_major:
        kernel, common = dkv_t_kernel, _transposed(common)
    dk, dv = _call(kernel, st, st.dkv, False, common,
                   {"dk": jax.ShapeDtypeStruct(k.shape, k.dtype),
                    "dv": jax.ShapeDtypeStruct(v.shape, v.dtype)}, "shake_flash_dkv")
    return dq, dk, dv, None     # masks, B and bf: data, no gradient (custom_vjp's zero)


def _transposed(common: dict) -> dict:
    """The operands of the transposed dk/dv kernel (keys as rows, queries as
    columns): per-query vectors as rows, per-key ones as columns, B as [b, k, q]."""
    b, s = common["key_valid"].shape[0], common["key_valid"].shape[-1]
    rows = lambda x: jnp.moveaxis(x[..., 0], 1, 2)[:, :, None, :]  # noqa: E731  [b, h, 1, s]
    out = {n: common[n] for n in ("q", "k", "v", "do")}
    out.update(lse_row=rows(common["lse"]), delta_row=rows(common["delta"]))
    for name, x in common.items():
        if name in ("q", "k", "v", "do", "lse", "delta"):
            continue
        if name in ("key_valid", "k_seg"):
            out[name] = x.reshape(b, s, 1)
        elif name in ("q_seg", "key_start", "key_end", "weight"):
            out[name] = x.reshape(b, 1, s)
        elif name == "shake":
            out["shake_t"] = jnp.swapaxes(x, 1, 2)
        else:
            out[name] = x                                 # bf, drop
    return out


_attention.defvjp(_attention_fwd, _attention_bwd)


def flash_attention(q, k, v, key_valid, *, segment_ids=None, local_window: int | None = None,
                    shake=None, bf=None, dropout_rate: float = 0.0, dropout_words=None,
                    dropout_broadcast: bool = False, index_base=None,
                    block_q: int | None = None, block_k: int | None = None,
                    tiles: tuple[Tiles, Tiles, Tiles] | None = None, interpret: bool = False,
                    backend: str | None = None):
    """Attention of q, k, v [b, s, heads, d] (q already scaled by 1/sqrt(d)) → [b, s, heads, d].

    key_valid [b, s]: padding mask (non-zero attends); segment_ids [b, s]:
    packed documents, a query sees only keys of its own segment; local_window
    w: a query sees keys with |q − k| ≤ w // 2. `shake`: B dense [b, s, s] or
    pairs {"key_start", "key_end", "weight"} [b, s] (see kjax/shake/matrix.py),
    applied with this layer's `bf` (Eq. 1); None: plain attention.
    `dropout_rate` > 0: attention dropout with the keep bits of
    kjax/model/dropout_hash.py from `dropout_words` (int32 [2], the layer's
    key: dropout_hash.key_words); `index_base` (int32 [3]): the global index
    of this call's first example and first head and the heads in all (a
    shard_map shard's offsets; default 0, 0, heads); `dropout_broadcast`:
    one mask for every example and head.
    `backend` ("gpu", "tpu"): the platform to lower for (default: jax's).
    `block_q`/`block_k`: every kernel's blocks; `tiles`: each kernel's own
    (benchmarks/kernels/flash_tiles.py); default `kernel_tiles`.
    """
    b, seq, heads = q.shape[:3]
    layout = "none" if shake is None else ("pairs" if isinstance(shake, dict) else "dense")
    target = backend or platform()
    triton = not interpret and target == "gpu"
    forward, dq, dkv = tiles or kernel_tiles(seq, triton, block_q, block_k, q.shape[-1])
    st = Static(forward, dq, dkv, None if local_window is None else int(local_window) // 2,
                segment_ids is not None, layout, float(dropout_rate), bool(dropout_broadcast),
                bool(interpret), triton, target == "tpu",
                wide_operands=target == "tpu" and (tpu_generation() or 4) <= 3)
    if any(seq % t.outer or seq % t.inner for t in (forward, dq, dkv)):
        raise ValueError(f"sequence length {seq} is not a multiple of the kernels' blocks "
                         f"{[(t.outer, t.inner) for t in (forward, dq, dkv)]}")
    aux = {"key_valid": (key_valid > 0).astype(jnp.int32).reshape(b, 1, seq)}
    if segment_ids is not None:
        seg = segment_ids.astype(jnp.int32)
        aux.update(q_seg=seg.reshape(b, seq, 1), k_seg=seg.reshape(b, 1, seq))
    if layout == "dense":
        # float8 B is widened to bf16 (exact for every e4m3 value) for the kernel's loads.
        aux["shake"] = shake.astype(jnp.bfloat16) if shake.dtype.itemsize == 1 else shake
    elif layout == "pairs":
        aux.update(key_start=shake["key_start"].astype(jnp.int32).reshape(b, seq, 1),
                   key_end=shake["key_end"].astype(jnp.int32).reshape(b, seq, 1),
                   weight=shake["weight"].astype(jnp.float32).reshape(b, seq, 1))
    if layout != "none":
        aux["bf"] = jnp.asarray(bf, jnp.float32).reshape(1, 1)
    if st.dropout:
        dropout_hash.threshold(st.dropout)          # the rate's range, checked once
        base = jnp.asarray([0, 0, heads] if index_base is None else index_base, jnp.int32)
        # [1, 8]: k0, k1, first example, first head, heads in all (padded: Triton, Mosaic)
        aux["drop"] = jnp.concatenate([jnp.asarray(dropout_words, jnp.int32).reshape(2),
                                       base.reshape(3), jnp.zeros(3, jnp.int32)]).reshape(1, 8)
    if not st.heads_major:      # GPU, interpret: blocks read [b, s, h, d] in place
        return _attention(st, q, k, v, aux)
    to_heads = lambda x: jnp.swapaxes(x, 1, 2)  # noqa: E731  [b, s, h, d] ↔ [b, h, s, d]
    return to_heads(_attention(st, to_heads(q), to_heads(k), to_heads(v), aux))
