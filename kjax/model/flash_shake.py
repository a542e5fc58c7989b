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
stored): dV = (P∘Z)ᵀ dO, dP = (dO Vᵀ)∘Z, and D = rowsum(dO ∘ O) is Σ P∘dP.

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
window); each kernel tiles its own way (kjax/model/flash_tiles.py). The kernels
read q, k, v [batch, seq, heads, head_dim] in place on GPU and in interpret
mode; on TPU they are made [batch, heads, seq, head_dim] first, and
per-position vectors are laid out [b, s, 1] (query side) and [b, 1, s] (key
side), so every block's last two dimensions are TPU-legal. With
`interpret=True` (CPU) Pallas runs the same kernels through XLA: that is how
the tests check them (`backend="tpu"` with it: the TPU layout).
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from kjax.model import dropout_hash
from kjax.model.flash_tiles import Tiles, block_spec, kernel_tiles
from kjax.model.platform import platform

MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)   # jax.nn.dot_product_attention's
NT = (((1,), (1,)), ((), ()))    # a · bᵀ
TN = (((0,), (0,)), ((), ()))    # aᵀ · b


@dataclasses.dataclass(frozen=True)
class Static:
    """What the kernels are specialised on (hashable: a custom_vjp static)."""
    forward: Tiles
    dq: Tiles
    dkv: Tiles
    half_window: int | None   # |q − k| ≤ half_window attends; None: global
    segments: bool
    shake: str                # "none" | "dense" | "pairs"
    dropout: float            # attention dropout rate (0: none)
    drop_broadcast: bool      # one mask shared by every example and head
    interpret: bool           # run through XLA (CPU): tests and debugging
    triton: bool              # on GPU: Pallas' Triton backend (not Mosaic GPU)
    heads_major: bool         # arrays [b, h, s, d] (TPU), else as given, [b, s, h, d]


# ---- one tile: logits, Eq. 1, mask ------------------------------------------------------

def _tile(st: Static, refs: dict, q, k, q0, k0, rows, cols, eq1: bool):
    """(s, s', mask, B tile or None) for queries q0.. and keys k0.. . `rows`/`cols`
    index the query-/key-side refs (a pl.ds, or slice(None) for a ref that
    already holds just this block); `eq1`: whether this tile applies Eq. 1."""
    bq, bk = q.shape[0], k.shape[0]
    s = lax.dot_general(q, k, NT, preferred_element_type=jnp.float32)
    qpos = q0 + lax.broadcasted_iota(jnp.int32, (bq, bk), 0)
    kpos = k0 + lax.broadcasted_iota(jnp.int32, (bq, bk), 1)
    mask = refs["key_valid"][:, cols] > 0
    if st.segments:
        mask = mask & (refs["q_seg"][rows, :] == refs["k_seg"][:, cols])
    if st.half_window is not None:
        mask = mask & (qpos - kpos <= st.half_window) & (kpos - qpos <= st.half_window)
    if not eq1:
        return s, s, mask, None
    if st.shake == "dense":
        tile = refs["shake"][rows, cols].astype(jnp.float32)
    else:   # pairs: query i boosts keys key_start[i] <= k < key_end[i] by weight[i]
        start, end, weight = (refs[n][rows, :] for n in ("key_start", "key_end", "weight"))
        tile = jnp.where((kpos >= start) & (kpos < end), weight.astype(jnp.float32), 0.0)
    return s, s + jnp.abs(s * tile) * refs["bf"][0, 0], mask, tile     # Eq. 1


def _loop_step(st: Static, refs: dict, step, carry, rows, k0, bk: int):
    """step(eq1, carry) for one tile. Pairs boost few keys per query (pos: a handful near
    it): most tiles skip Eq. 1, on a flag of O(block_q) (a max: Triton lowers no `any`).
    The branch spans the step: a cond inside it, feeding dK/dV's transposed products,
    did not compile on Triton (jax 0.10–0.11)."""
    if st.shake != "pairs":
        return step(st.shake == "dense", carry)
    start, end, weight = (refs[n][rows, :] for n in ("key_start", "key_end", "weight"))
    hit = jnp.max(jnp.where((weight != 0) & (start < k0 + bk) & (end > k0), 1, 0)) > 0
    return lax.cond(hit, functools.partial(step, True), functools.partial(step, False), carry)


def _drop_seed(st: Static, refs):
    """[1, 1] seed of this grid step's (example, head) plane, or None without
    dropout. `drop` holds k0, k1 and the global index of the shard's first
    example and head and the heads in all (kjax/model/dropout_hash.py): kept
    as [1, 1] vectors, no scalar extraction (Mosaic and Triton alike)."""
    if not st.dropout:
        return None
    word = lambda i: refs["drop"][:, i:i + 1]  # noqa: E731  a [1, 1] load (Triton has no slice)
    plane = jnp.zeros((1, 1), jnp.int32) if st.drop_broadcast else (
        (word(2) + pl.program_id(0)) * word(4) + word(3) + pl.program_id(1))
    return dropout_hash.plane_seed(word(0), word(1), plane)


def _drop_scale(st: Static, seed, q0, k0, bq, bk, seq):
    """Z = keep/(1 − rate) on the tile (None without dropout): the same bits as
    the explicit path's dropout_hash.keep_mask, recomputed wherever needed."""
    if seed is None:
        return None
    rows = q0 + lax.broadcasted_iota(jnp.int32, (bq, 1), 0)   # index terms per row / column
    cols = k0 + lax.broadcasted_iota(jnp.int32, (1, bk), 1)
    return jnp.where(dropout_hash.keep(seed, rows, cols, seq, st.dropout),
                     np.float32(1.0 / (1.0 - st.dropout)), np.float32(0.0))


def _exp(x):
    """eˣ as 2^(x·log₂e): Triton lowers jnp.exp to libdevice's accurate expf (~8
    instructions an entry, 2026-11-27 PTX), exp2 to one ex2.approx (FlashAttention's way)."""
    return jnp.exp2(x * np.float32(np.log2(np.e)))


def _dropped(p, z):
    return p if z is None else p * z


def _eq1_backward(refs, ds, s, tile):
    """d|s·B|/ds = B·sign(s) for B ≥ 0, with jnp.abs's convention sign(0) = +1."""
    if tile is None:
        return ds
    return ds * (1.0 + refs["bf"][0, 0] * tile * jnp.where(s >= 0, 1.0, -1.0))


def _span(outer0, outer_block, inner_block, n_inner, half):
    """Inner blocks a local window reaches from the outer block at outer0."""
    if half is None:
        return 0, n_inner
    # lax.div truncates (operands are non-negative): `//` would lower through sign.
    lo = lax.div(jnp.maximum(outer0 - half, 0), inner_block)
    hi = jnp.minimum(lax.div(outer0 + outer_block - 1 + half, inner_block) + 1, n_inner)
    return lo, hi


# ---- kernels ----------------------------------------------------------------------------

def _named(names, refs):
    return dict(zip(names, refs))


def _forward_kernel(*refs, st: Static, names):
    r = _named(names, refs)
    q = r["q"][...]
    bq, seq = q.shape[0], r["k"].shape[0]
    q0 = pl.program_id(2) * bq
    seed, bk = _drop_seed(st, r), st.forward.inner

    def step(k0, eq1, carry):
        acc, m, l = carry
        cols = pl.ds(k0, bk)
        k, v = r["k"][cols, :], r["v"][cols, :]
        _, shaken, mask, _ = _tile(st, r, q, k, q0, k0, slice(None), cols, eq1)
        shaken = jnp.where(mask, shaken, MASK_VALUE)
        m_new = jnp.maximum(m, jnp.max(shaken, axis=1, keepdims=True))
        p = jnp.where(mask, _exp(shaken - m_new), 0.0)
        correction = _exp(m - m_new)
        l = correction * l + jnp.sum(p, axis=1, keepdims=True)   # statistics: undropped p
        p = _dropped(p, _drop_scale(st, seed, q0, k0, bq, bk, seq))
        acc = correction * acc + lax.dot_general(p.astype(v.dtype), v, (((1,), (0,)), ((), ())),
                                                 preferred_element_type=jnp.float32)
        return acc, m_new, l

    def body(j, carry):
        k0 = pl.multiple_of(j * bk, bk)
        return _loop_step(st, r, functools.partial(step, k0), carry, slice(None), k0, bk)

    lo, hi = _span(q0, bq, bk, seq // bk, st.half_window)
    init = (jnp.zeros(q.shape, jnp.float32), jnp.full((bq, 1), MASK_VALUE, jnp.float32),
            jnp.zeros((bq, 1), jnp.float32))
    acc, m, l = lax.fori_loop(lo, hi, body, init)
    seen = l > 0                                          # rows with a key to attend to
    r["o"][...] = jnp.where(seen, acc / jnp.where(seen, l, 1.0), 0.0).astype(r["o"].dtype)
    r["lse"][...] = jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), 0.0)


def _dq_kernel(*refs, st: Static, names):
    r = _named(names, refs)
    q, do, lse, delta = r["q"][...], r["do"][...], r["lse"][...], r["delta"][...]
    bq, seq = q.shape[0], r["k"].shape[0]
    q0 = pl.program_id(2) * bq
    seed, bk = _drop_seed(st, r), st.dq.inner

    def step(k0, eq1, dq):
        cols = pl.ds(k0, bk)
        k, v = r["k"][cols, :], r["v"][cols, :]
        s, shaken, mask, tile = _tile(st, r, q, k, q0, k0, slice(None), cols, eq1)
        p = jnp.where(mask, _exp(shaken - lse), 0.0)
        # dP = (dO·Vᵀ)∘Z; D = rowsum(dO∘O) already is Σ P∘dP (O used the dropped P).
        dp = _dropped(lax.dot_general(do, v, NT, preferred_element_type=jnp.float32),
                      _drop_scale(st, seed, q0, k0, bq, bk, seq))
        ds = _eq1_backward(r, p * (dp - delta), s, tile)
        return dq + lax.dot_general(ds.astype(k.dtype), k, (((1,), (0,)), ((), ())),
                                    preferred_element_type=jnp.float32)

    def body(j, dq):
        k0 = pl.multiple_of(j * bk, bk)
        return _loop_step(st, r, functools.partial(step, k0), dq, slice(None), k0, bk)

    lo, hi = _span(q0, bq, bk, seq // bk, st.half_window)
    dq = lax.fori_loop(lo, hi, body, jnp.zeros(q.shape, jnp.float32))
    r["dq"][...] = dq.astype(r["dq"].dtype)


def _dkv_kernel(*refs, st: Static, names):
    r = _named(names, refs)
    k, v = r["k"][...], r["v"][...]
    bk, seq = k.shape[0], r["q"].shape[0]
    k0 = pl.program_id(2) * bk
    seed, bq = _drop_seed(st, r), st.dkv.inner

    def step(q0, rows, eq1, carry):
        dk, dv = carry
        q, do = r["q"][rows, :], r["do"][rows, :]
        lse, delta = r["lse"][rows, :], r["delta"][rows, :]
        s, shaken, mask, tile = _tile(st, r, q, k, q0, k0, rows, slice(None), eq1)
        p = jnp.where(mask, _exp(shaken - lse), 0.0)
        z = _drop_scale(st, seed, q0, k0, bq, bk, seq)
        dv = dv + lax.dot_general(_dropped(p, z).astype(do.dtype), do, TN,
                                  preferred_element_type=jnp.float32)
        dp = _dropped(lax.dot_general(do, v, NT, preferred_element_type=jnp.float32), z)
        ds = _eq1_backward(r, p * (dp - delta), s, tile)
        dk = dk + lax.dot_general(ds.astype(q.dtype), q, TN, preferred_element_type=jnp.float32)
        return dk, dv

    def body(i, carry):
        q0 = pl.multiple_of(i * bq, bq)
        rows = pl.ds(q0, bq)
        return _loop_step(st, r, functools.partial(step, q0, rows), carry, rows, k0, bk)

    lo, hi = _span(k0, bk, bq, seq // bq, st.half_window)
    dk, dv = lax.fori_loop(lo, hi, body, (jnp.zeros(k.shape, jnp.float32),) * 2)
    r["dk"][...] = dk.astype(r["dk"].dtype)
    r["dv"][...] = dv.astype(r["dv"].dtype)


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
    return _call(_forward_kernel, st, st.forward, True, {"q": q, "k": k, "v": v, **aux}, outputs,
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
    (dq,) = _call(_dq_kernel, st, st.dq, True, common,
                  {"dq": jax.ShapeDtypeStruct(q.shape, q.dtype)}, "shake_flash_dq")
    dk, dv = _call(_dkv_kernel, st, st.dkv, False, common,
                   {"dk": jax.ShapeDtypeStruct(k.shape, k.dtype),
                    "dv": jax.ShapeDtypeStruct(v.shape, v.dtype)}, "shake_flash_dkv")
    no_grad = jax.tree.map(_zero_cotangent, aux)   # masks, B and bf: no gradient
    return dq, dk, dv, no_grad


def _zero_cotangent(x):
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.zeros_like(x)
    return np.zeros(x.shape, jax.dtypes.float0)


_attention.defvjp(_attention_fwd, _attention_bwd)


def flash_attention(q, k, v, key_valid, *, segment_ids=None, local_window: int | None = None,
                    shake=None, bf=None, dropout_rate: float = 0.0, dropout_words=None,
                    dropout_broadcast: bool = False, index_base=None,
                    block_q: int | None = None, block_k: int | None = None,
                    tiles: tuple[Tiles, Tiles, Tiles] | None = None, interpret: bool = False, backend: str | None = None):
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
    (benchmarks/flash_tiles.py); default `kernel_tiles`.
    """
    b, seq, heads = q.shape[:3]
    layout = "none" if shake is None else ("pairs" if isinstance(shake, dict) else "dense")
    target = backend or platform()
    triton = not interpret and target == "gpu"
    forward, dq, dkv = tiles or kernel_tiles(seq, triton, block_q, block_k, q.shape[-1])
    st = Static(forward, dq, dkv, None if local_window is None else int(local_window) // 2,
                segment_ids is not None, layout, float(dropout_rate), bool(dropout_broadcast),
                bool(interpret), triton, target == "tpu")
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
