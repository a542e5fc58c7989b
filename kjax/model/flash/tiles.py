"""How the flash kernels of kjax/model/flash/attention.py tile the sequence.

Each of the three kernels (forward, dq, dk/dv) has its own tiling: the block
its grid walks (`outer`), the block its loop walks (`inner`) and, on GPU,
Triton's warps per program and software-pipeline stages.

TPU (Mosaic) and interpret mode use one block on both sides, the largest power
of two ≤ 128 that divides the sequence, in every kernel.

On GPU the table below is the start: tilings with which ptxas reports no
spilled register and no serialized wgmma for an H100 (sm_90a, deviceless:
benchmarks/kernels/flash_tiles.py; `make gpu-check` fails a step whose Pallas kernel
spills), with padding, with attention dropout and with dropout + pairs B +
segments + a local window; then the largest tile, as a spill is a round trip
through local memory inside the inner loop. Which clean tiling is fastest
only a GPU says: kjax/model/flash/tuning.py times `CANDIDATES` on the card.
Heads of 128 (twice the accumulators) need smaller backward tiles; larger
heads take the 128 entry and may spill. docs/GPU.md §8 has the figures.
"""
from __future__ import annotations

from jax.experimental import pallas as pl

from kjax.config.tiles import Tiles, format_tiles, parse_tiles  # noqa: F401 (the format)


# (forward, dq, dk/dv) for Triton by the largest head size they serve (docs/GPU.md §8).
TRITON_TILES = {64: (Tiles(128, 64, 8, 2), Tiles(128, 64, 8, 2), Tiles(64, 128, 8, 2)),
                128: (Tiles(128, 64, 8, 2), Tiles(128, 32, 8, 2), Tiles(32, 64, 8, 2))}

# What tuning.py times on a GPU after the table, by head size, every one free of
# spills under ptxas on sm_90a with padding, dropout and dropout + pairs B + segments +
# a window: deeper pipelines with dk/dv on 64 × 64 (the fewest loop instructions per
# entry with dropout); Triton's fused-attention tutorial's backward (dq over 128
# queries in 32-key steps, 4 warps, 5 stages; dk/dv over 128 keys in 32-query steps
# computed as keys × queries, on 8 warps: on 4 it spills); everything on 4 warps.
CANDIDATES = {
    64: ((Tiles(128, 64, 8, 3), Tiles(128, 64, 8, 3), Tiles(64, 64, 4, 3)),
         (Tiles(128, 64, 8, 2), Tiles(128, 32, 4, 5), Tiles(128, 32, 8, 5, 1)),
         (Tiles(64, 64, 4, 3), Tiles(64, 64, 4, 3), Tiles(64, 64, 4, 3))),
    128: ((Tiles(128, 64, 8, 2), Tiles(128, 32, 8, 2), Tiles(32, 128, 8, 2, 1)),),
}


def fit(tiles, seq: int) -> tuple[Tiles, Tiles, Tiles]:
    """Each block shrunk to the largest power of two that divides seq (or seq)."""
    return tuple(Tiles(pick_block(seq, t.outer), pick_block(seq, t.inner), t.num_warps,
                       t.num_stages, t.transposed) for t in tiles)


def _by_head(table: dict, head_dim: int):
    """The first entry ≥ head_dim, else the last."""
    fits = [d for d in sorted(table) if d >= head_dim]
    return table[fits[0] if fits else max(table)]


def pick_block(seq: int, preferred: int = 128) -> int:
    """The largest power of two ≤ `preferred` that divides seq (≥ 8), else seq."""
    block = preferred
    while block >= 8:
        if seq % block == 0:
            return block
        block //= 2
    return seq


def kernel_tiles(seq: int, triton: bool, block_q: int | None = None,
                 block_k: int | None = None, head_dim: int = 64) -> tuple[Tiles, Tiles, Tiles]:
    """(forward, dq, dk/dv) tiles. Blocks given: every kernel uses them (tests do).
    TPU and interpret mode: one block for both sides in every kernel. Triton:
    TRITON_TILES for the head size (the first entry ≥ it, else the last), each
    block shrunk to divide seq."""
    if block_q or block_k or not triton:
        bq, bk = block_q or pick_block(seq), block_k or pick_block(seq)
        return Tiles(bq, bk), Tiles(bq, bk), Tiles(bk, bq)
    return fit(_by_head(TRITON_TILES, head_dim), seq)


def candidates(seq: int, head_dim: int = 64) -> list[tuple[Tiles, Tiles, Tiles]]:
    """The table's tiles, then CANDIDATES, fitted to seq, without repeats."""
    out = []
    for tiles in (_by_head(TRITON_TILES, head_dim),) + _by_head(CANDIDATES, head_dim):
        if fit(tiles, seq) not in out:
            out.append(fit(tiles, seq))
    return out


# ---- which block of each operand a grid step (batch, head, i) sees ------------------------

QUERY_SIDE = ("q", "do", "lse", "delta", "lse_row", "delta_row", "q_seg", "key_start",
              "key_end", "weight", "o", "dq")
ROWS = ("lse_row", "delta_row")   # [b, h, 1, s]: a query-side statistic laid along a row


def block_spec(name: str, shape, over_q: bool, block: int, heads_major: bool):
    """The block of operand `name` a grid step (b, h, i) sees; i walks query blocks
    (over_q) or key blocks. The side the grid walks is blocked, the other whole.
    Per-head arrays (q, k, v, o, lse, their gradients) are [b, s, h, x], or
    [b, h, s, x] when `heads_major` (TPU: a block's last two dimensions must be
    (8, 128)-divisible or whole, and a head squeezed out of [.., h, x] is neither);
    per-position vectors are a column [b, s, 1] or a row [b, 1, s]; B is [b, q, k]
    (`shake`) or [b, k, q] (`shake_t`, the transposed dk/dv kernel's)."""
    if name in ("bf", "drop"):
        return pl.BlockSpec(shape, lambda b, h, i: (0, 0))
    blocked = (name in QUERY_SIDE) == over_q
    if name in ROWS:
        return pl.BlockSpec((None, None, 1, shape[-1]), lambda b, h, i: (b, h, 0, 0))
    if len(shape) == 4:
        seq = shape[2] if heads_major else shape[1]
        size = block if blocked else seq
        if heads_major:
            return pl.BlockSpec((None, None, size, shape[-1]),
                                lambda b, h, i: (b, h, i if blocked else 0, 0))
        return pl.BlockSpec((None, size, None, shape[-1]),
                            lambda b, h, i: (b, i if blocked else 0, h, 0))
    if name in ("shake", "shake_t"):         # the grid's side along dimension 1 or 2
        if over_q == (name == "shake"):
            return pl.BlockSpec((None, block, shape[-1]), lambda b, h, i: (b, i, 0))
        return pl.BlockSpec((None, shape[-2], block), lambda b, h, i: (b, 0, i))
    if shape[-1] == 1:                       # a column [b, s, 1]
        size = block if blocked else shape[-2]
        return pl.BlockSpec((None, size, 1), lambda b, h, i: (b, i if blocked else 0, 0))
    size = block if blocked else shape[-1]   # a row [b, 1, s]
    return pl.BlockSpec((None, 1, size), lambda b, h, i: (b, 0, i if blocked else 0))
