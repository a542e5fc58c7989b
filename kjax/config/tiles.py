"""The format of `model.attention_tiles`' values: the flash kernels' tiling
(kjax/model/flash/tiles.py says what each block is), written 'F/DQ/DKV' with
each part outer,inner,warps,stages (DKV may end in ,1: computed transposed).
One parser, for the config check and the kernels alike.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Tiles:
    """One kernel's tiling: `outer`, the block its grid walks (queries for the
    forward and dq, keys for dk/dv); `inner`, the block its loop walks;
    Triton's warps per program and software-pipeline stages (GPU only); and for
    dk/dv on GPU, `transposed`: the tile computed as kqᵀ [keys, queries], so
    dV += PᵀdO and dK += dSᵀQ take their left operand as computed (Triton's
    fused-attention tutorial's backward), not through a transpose."""
    outer: int
    inner: int
    num_warps: int = 4
    num_stages: int = 2
    transposed: int = 0      # dk/dv only, GPU: 1 computes the tile as keys × queries


def parse_tiles(spec: str) -> tuple[Tiles, Tiles, Tiles]:
    """'F/DQ/DKV', each outer,inner,warps,stages (DKV may end in ,1: transposed)."""
    parts = spec.split("/")
    try:
        if len(parts) != 3:
            raise ValueError
        tiles = tuple(Tiles(*(int(x) for x in part.split(","))) for part in parts)
    except (TypeError, ValueError):
        raise ValueError(f"flash tiles {spec!r}: give F/DQ/DKV, each outer,inner,warps,stages "
                         f"(e.g. 128,64,8,2/128,32,4,5/128,32,4,5)") from None
    forms = [t.transposed for t in tiles]
    if any(x <= 0 for t in tiles for x in dataclasses.astuple(t)[:4]) or forms[:2] != [0, 0] \
            or forms[2] not in (0, 1):
        raise ValueError(f"flash tiles {spec!r}: every block, warp and stage count is ≥ 1, and "
                         f"only DKV may end in ,1 (transposed)")
    return tiles


def format_tiles(tiles) -> str:
    return "/".join(",".join(str(int(x)) for x in dataclasses.astuple(t)[:4 + t.transposed])
                    for t in tiles)
