"""The three Pallas kernels of the flash attention (kjax/model/flash/attention.py
says what they compute and how they are called): forward, dq, dk/dv.

Per tile the kernels spend their instructions on elementwise work (their
matrix products are small at head size 64), so each step is written to the
fewest: the operand a kernel loads once (q in the forward and dq, k in dk/dv)
is scaled by log₂e first, so the tile's logits are s·log₂e and eˣ is one
`ex2` of a difference (Triton's fused-attention tutorial's pre-scaled K;
Eq. 1, the max and sign(s) are unchanged by a positive scale, and the saved
log-sum-exp is in base 2); the dropout decision is one boolean per entry,
computed once per tile and applied as a select, its 1/(1 − rate) folded into
a per-row or per-program factor. docs/PERFORMANCE.md, "What decides speed:
attention paths" has the figures behind each choice.
"""
from __future__ import annotations

import dataclasses
import functools

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl

from kjax.model import dropout_hash
from kjax.model.flash.tiles import Tiles

MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)   # jax.nn.dot_product_attention's
LOG2E = np.float32(np.log2(np.e))
NT = (((1,), (1,)), ((), ()))    # a · bᵀ
NN = (((1,), (0,)), ((), ()))    # a · b
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
    wide_operands: bool = False   # products of fp32 operands (TPU v2/v3: `_dot`)


def _dot(st: Static, a, b, dims):
    """a · b on the MXU. v2's and v3's Mosaic takes no bf16 operand ("Unsupported
    matmul RHS type on target"): there both are widened to fp32 in VMEM. A bf16
    value is exact in fp32, so the products are the same numbers and the loads
    from HBM stay bf16; what the wider operands cost a v3's MXU is unmeasured
    (docs/TPU.md).
    """
    if st.wide_operands:
        a, b = a.astype(jnp.float32), b.astype(jnp.float32)
    return lax.dot_general(a, b, dims, preferred_element_type=jnp.float32)


# ---- one tile: logits, Eq. 1, mask ------------------------------------------------------

def _tile(st: Static, refs: dict, q, k, q0, k0, rows, cols, eq1: bool):
    """(s, s', mask, B tile or None) for queries q0.. and keys k0.. . `rows`/`cols`
    index the query-/key-side refs (a pl.ds, or slice(None) for a ref that
    already holds just this block); `eq1`: whether this tile applies Eq. 1."""
    bq, bk = q.shape[0], k.shape[0]
    s = _dot(st, q, k, NT)
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
        start, end, weight = _pairs(refs, rows)
        tile = jnp.where((kpos >= start) & (kpos < end), weight.astype(jnp.float32), 0.0)
    return s, s + jnp.abs(s * tile) * refs["bf"][0, 0], mask, tile     # Eq. 1


def _pairs(refs: dict, queries, along_rows: bool = False):
    """B's pairs of queries `queries` (key_start, key_end, weight): [bq, 1], or
    [1, bq] where the queries run along a row (the transposed dk/dv kernel)."""
    names = ("key_start", "key_end", "weight")
    return tuple(refs[n][:, queries] if along_rows else refs[n][queries, :] for n in names)


def _tile_t(st: Static, refs: dict, k, q, k0, q0, cols, eq1: bool):
    """_tile transposed, keys k0.. as rows and queries q0.. as columns: (sᵀ, s'ᵀ,
    maskᵀ, Bᵀ) [bk, bq]; the key-side refs hold just this block, the query-side
    ones are rows indexed by `cols`."""
    bk, bq = k.shape[0], q.shape[0]
    s = _dot(st, k, q, NT)
    kpos = k0 + lax.broadcasted_iota(jnp.int32, (bk, bq), 0)
    qpos = q0 + lax.broadcasted_iota(jnp.int32, (bk, bq), 1)
    mask = refs["key_valid"][...] > 0
    if st.segments:
        mask = mask & (refs["k_seg"][...] == refs["q_seg"][:, cols])
    if st.half_window is not None:
        mask = mask & (qpos - kpos <= st.half_window) & (kpos - qpos <= st.half_window)
    if not eq1:
        return s, s, mask, None
    if st.shake == "dense":
        tile = refs["shake_t"][:, cols].astype(jnp.float32)
    else:
        start, end, weight = _pairs(refs, cols, along_rows=True)
        tile = jnp.where((kpos >= start) & (kpos < end), weight.astype(jnp.float32), 0.0)
    return s, s + jnp.abs(s * tile) * refs["bf"][0, 0], mask, tile     # Eq. 1


def _loop_step(st: Static, refs: dict, step, carry, rows, k0, bk: int, along_rows=False):
    """step(eq1, carry) for one tile. Pairs boost few keys per query (pos: a handful near
    it): most tiles skip Eq. 1, on a flag of O(block_q) (a max: Triton lowers no `any`).
    The branch spans the step: a cond inside it, feeding dK/dV's transposed products,
    did not compile on Triton (jax 0.10–0.11)."""
    if st.shake != "pairs":
        return step(st.shake == "dense", carry)
    start, end, weight = _pairs(refs, rows, along_rows)
    hit = jnp.max(jnp.where((weight != 0) & (start < k0 + bk) & (end > k0), 1, 0)) > 0
    return lax.cond(hit, functools.partial(step, True), functools.partial(step, False), carry)


# ---- attention dropout: the keep bits of kjax/model/dropout_hash.py ----------------------

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


def _keep(st: Static, seed, q0, k0, bq: int, bk: int, seq: int):
    """Boolean [bq, bk] keep bits of the tile (None without dropout): one hash per
    key pair where lanes interleave (Triton, interpret), one per entry on Mosaic."""
    if seed is None:
        return None
    if st.heads_major or bk % 2:
        rows = q0 + lax.broadcasted_iota(jnp.int32, (bq, 1), 0)
        cols = k0 + lax.broadcasted_iota(jnp.int32, (1, bk), 1)
        return dropout_hash.keep(seed, rows, cols, seq, st.dropout)
    return dropout_hash.keep_tile(seed, q0, k0, bq, bk, seq, st.dropout)


def _keep_t(st: Static, seed, q0, k0, bq: int, bk: int, seq: int):
    """The keep bits of the transposed tile [bk, bq] (keys as rows)."""
    keep = _keep(st, seed, q0, k0, bq, bk, seq)
    return None if keep is None else keep.T


def _kept(x, keep):
    """x where the entry survives dropout, else 0 (x unchanged without dropout)."""
    return x if keep is None else jnp.where(keep, x, 0.0)


def _survival(st: Static) -> float:
    """1 − the effective dropout rate: the backward's D/(1/(1 − rate)) is D · this."""
    return 1.0 / dropout_hash.keep_scale(st.dropout) if st.dropout else 1.0


def _scale(st: Static) -> float:
    return dropout_hash.keep_scale(st.dropout) if st.dropout else 1.0


def _log2_scaled(x):
    """x·log₂e in x's dtype: the operand whose products with the other are base-2 logits."""
    return (x.astype(jnp.float32) * LOG2E).astype(x.dtype)


def _exp2_minus(x, row):
    """2^(x − row): Triton lowers jnp.exp to libdevice's accurate expf (~8
    instructions an entry), exp2 to one ex2.approx (FlashAttention's way)."""
    return jnp.exp2(x - row)


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


def forward_kernel(*refs, st: Static, names):
    r = _named(names, refs)
    q = _log2_scaled(r["q"][...])
    bq, seq = q.shape[0], r["k"].shape[0]
    q0 = pl.program_id(2) * bq
    seed, bk = _drop_seed(st, r), st.forward.inner

    def step(k0, eq1, carry):
        acc, m, l = carry
        cols = pl.ds(k0, bk)
        k, v = r["k"][cols, :], r["v"][cols, :]
        _, shaken, mask, _ = _tile(st, r, q, k, q0, k0, slice(None), cols, eq1)
        m_new = jnp.maximum(m, jnp.max(jnp.where(mask, shaken, MASK_VALUE), axis=1,
                                       keepdims=True))
        p = jnp.where(mask, _exp2_minus(shaken, m_new), 0.0)
        correction = _exp2_minus(m, m_new)
        l = correction * l + jnp.sum(p, axis=1, keepdims=True)   # statistics: undropped p
        p = _kept(p, _keep(st, seed, q0, k0, bq, bk, seq))
        acc = correction * acc + _dot(st, p.astype(v.dtype), v, NN)
        return acc, m_new, l

    def body(j, carry):
        k0 = pl.multiple_of(j * bk, bk)
        return _loop_step(st, r, functools.partial(step, k0), carry, slice(None), k0, bk)

    lo, hi = _span(q0, bq, bk, seq // bk, st.half_window)
    init = (jnp.zeros(q.shape, jnp.float32), jnp.full((bq, 1), MASK_VALUE, jnp.float32),
            jnp.zeros((bq, 1), jnp.float32))
    acc, m, l = lax.fori_loop(lo, hi, body, init)
    seen = l > 0                                          # rows with a key to attend to
    # the dropped P's 1/(1 − rate), once per row with 1/l
    inverse = jnp.where(seen, np.float32(_scale(st)) / jnp.where(seen, l, 1.0), 0.0)
    r["o"][...] = (acc * inverse).astype(r["o"].dtype)
    r["lse"][...] = jnp.where(seen, m + jnp.log2(jnp.where(seen, l, 1.0)), 0.0)   # base 2


def dq_kernel(*refs, st: Static, names):
    r = _named(names, refs)
    q, do = _log2_scaled(r["q"][...]), r["do"][...]
    # dS = P∘(dP∘Z − D) = P∘(dP∘keep − D·(1 − rate)) / (1 − rate): the factor once, at the end
    lse, delta = r["lse"][...], r["delta"][...] * np.float32(_survival(st))
    bq, seq = q.shape[0], r["k"].shape[0]
    q0 = pl.program_id(2) * bq
    seed, bk = _drop_seed(st, r), st.dq.inner

    def step(k0, eq1, dq):
        cols = pl.ds(k0, bk)
        k, v = r["k"][cols, :], r["v"][cols, :]
        s, shaken, mask, tile = _tile(st, r, q, k, q0, k0, slice(None), cols, eq1)
        p = jnp.where(mask, _exp2_minus(shaken, lse), 0.0)
        # D = rowsum(dO∘O) already is Σ P∘dP∘Z (O used the dropped P).
        dp = _kept(_dot(st, do, v, NT), _keep(st, seed, q0, k0, bq, bk, seq))
        ds = _eq1_backward(r, p * (dp - delta), s, tile)
        return dq + _dot(st, ds.astype(k.dtype), k, NN)

    def body(j, dq):
        k0 = pl.multiple_of(j * bk, bk)
        return _loop_step(st, r, functools.partial(step, k0), dq, slice(None), k0, bk)

    lo, hi = _span(q0, bq, bk, seq // bk, st.half_window)
    dq = lax.fori_loop(lo, hi, body, jnp.zeros(q.shape, jnp.float32))
    r["dq"][...] = (dq * np.float32(_scale(st))).astype(r["dq"].dtype)


def dkv_kernel(*refs, st: Static, names, transposed: bool = False):
    """dk/dv over one key block. `transposed`: the tile as keys × queries, sᵀ =
    (k·log₂e)qᵀ, Pᵀ, dPᵀ = V dOᵀ, so dV += Pᵀ dO and dK += dSᵀ Q are plain
    products (lse and D then arrive as rows [1, s]: attention._transposed)."""
    r = _named(names, refs)
    k, v = _log2_scaled(r["k"][...]), r["v"][...]
    bk, seq = k.shape[0], r["q"].shape[0]
    k0 = pl.program_id(2) * bk
    seed, bq = _drop_seed(st, r), st.dkv.inner
    survival = np.float32(_survival(st))
    left = NN if transposed else TN       # Pᵀ·dO and dSᵀ·Q: as computed, or transposed

    def step(q0, rows, eq1, carry):
        dk, dv = carry
        q, do = r["q"][rows, :], r["do"][rows, :]
        if transposed:
            lse, delta = r["lse_row"][:, rows], r["delta_row"][:, rows]
            s, shaken, mask, tile = _tile_t(st, r, k, q, k0, q0, rows, eq1)
            keep = _keep_t(st, seed, q0, k0, bq, bk, seq)
            dp = _dot(st, v, do, NT)
        else:
            lse, delta = r["lse"][rows, :], r["delta"][rows, :]
            s, shaken, mask, tile = _tile(st, r, q, k, q0, k0, rows, slice(None), eq1)
            keep = _keep(st, seed, q0, k0, bq, bk, seq)      # once for dV and dP
            dp = _dot(st, do, v, NT)
        p = jnp.where(mask, _exp2_minus(shaken, lse), 0.0)
        dv = dv + _dot(st, _kept(p, keep).astype(do.dtype), do, left)
        ds = _eq1_backward(r, p * (_kept(dp, keep) - delta * survival), s, tile)
        dk = dk + _dot(st, ds.astype(q.dtype), q, left)
        return dk, dv

    def body(i, carry):
        q0 = pl.multiple_of(i * bq, bq)
        rows = pl.ds(q0, bq)
        return _loop_step(st, r, functools.partial(step, q0, rows), carry, rows, k0, bk,
                          along_rows=transposed)

    lo, hi = _span(k0, bk, bq, seq // bq, st.half_window)
    dk, dv = lax.fori_loop(lo, hi, body, (jnp.zeros(k.shape, jnp.float32),) * 2)
    scale = np.float32(_scale(st))          # dV and dK of the dropped P: 1/(1 − rate) once
    r["dk"][...] = (dk * scale).astype(r["dk"].dtype)
    r["dv"][...] = (dv * scale).astype(r["dv"].dtype)


dkv_t_kernel = functools.partial(dkv_kernel, transposed=True)
