"""The flash kernels' tilings as ptxas sees them on an H100, without a GPU.

One attention layer (BERT-base heads, 12 × 64, bf16), forward + backward
through kjax's Pallas kernels (kjax/model/flash/attention.py), is compiled for an
H100 described to this CPU host (.ci/h100_sxm.txtpb, jax's CUDA plugin, as
`make gpu-check`); XLA dumps each kernel's PTX and ptxas (from jax's CUDA
wheels) assembles it for sm_90a: registers per thread, bytes spilled, the
kernel's wgmma instructions and whether ptxas serialized them for lack of
registers (compile_checks/ptx.py). Each candidate tiling of one kernel
is compiled with the other two kernels at their defaults
(kjax/model/flash/tiles.py), for each case. Not timings: which tilings
spill is decided here, which of the clean ones is fastest needs a GPU
(`benchmarks/kernels/attention.py --grid --tiles ...`).

    build/gpu-venv/bin/python benchmarks/kernels/flash_tiles.py        # every candidate
    build/gpu-venv/bin/python benchmarks/kernels/flash_tiles.py --kernels dkv \\
        --candidates 64,64,4,2 128,128,4,2 --cases dropout

A candidate is outer,inner,warps,stages (kjax.model.flash.tiles.Tiles).
Cases: plain (padding only); dropout (attention dropout 0.1); shaken
(dropout 0.1 + pairs B + packed segments + a local window of seq / 4, as
modern_base's local layers: the most a tile computes). One record per
kernel, tiling and case (benchmarks/results/flash_tiles.jsonl).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import records  # noqa: E402

KERNELS = {"forward": "shake_flash_forward", "dq": "shake_flash_dq", "dkv": "shake_flash_dkv"}
CANDIDATES = ["128,128,4,2", "128,128,8,2", "128,64,4,2", "128,64,8,2", "128,32,4,2",
              "64,128,8,2", "64,64,4,2", "64,64,8,2", "64,32,4,2", "32,32,4,2"]
CASES = ("plain", "dropout", "shaken")


def compile_layer(devices, tiles, case: str, seq: int, tokens: int, dump: str,
                  head_dim: int = 64) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import SingleDeviceSharding

    from kjax.model.flash.attention import flash_attention
    b, h, d = max(1, tokens // seq), 12, head_dim
    pos = np.arange(seq)
    shaken = case == "shaken"
    aux = {"segment_ids": jnp.asarray(np.broadcast_to(pos // (seq // 4), (b, seq)))
           if shaken else None,
           "shake": {"key_start": jnp.asarray(np.broadcast_to(pos, (b, seq)), jnp.int32),
                     "key_end": jnp.asarray(np.broadcast_to(pos + 2, (b, seq)), jnp.int32),
                     "weight": jnp.ones((b, seq), jnp.float32)} if shaken else None}

    def loss(q, k, v, valid):
        o = flash_attention(q, k, v, valid, backend="gpu", tiles=tiles,
                            local_window=seq // 4 if shaken else None,
                            dropout_rate=0.0 if case == "plain" else 0.1,
                            dropout_words=jnp.asarray([1, 2], jnp.int32),
                            bf=0.3 if shaken else None, **aux)
        return jnp.sum(o.astype(jnp.float32))

    where = SingleDeviceSharding(devices[0])
    args = ([jax.ShapeDtypeStruct((b, seq, h, d), jnp.bfloat16, sharding=where)] * 3
            + [jax.ShapeDtypeStruct((b, seq), jnp.int32, sharding=where)])
    jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(*args).compile(
        compiler_options={"xla_dump_to": dump})


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=list(KERNELS))
    ap.add_argument("--candidates", nargs="+", default=CANDIDATES,
                    help="outer,inner,warps,stages (default: %(default)s)")
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=4096, help="batch × seq (default: %(default)s)")
    ap.add_argument("--head-dim", type=int, default=64, help="BERT's 64 (default) or 128, ...")
    records.add_arguments(ap)
    args = ap.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")   # the H100 is described, not here
    from kjax.model.flash.tiles import Tiles, kernel_tiles
    from compile_checks.ptx import dumped_kernels, find_ptxas
    ptxas = find_ptxas()
    if ptxas is None:
        raise SystemExit("flash_tiles: no ptxas (jax's CUDA wheels): run it with "
                         "build/gpu-venv/bin/python (`make gpu-check` builds it)")
    devices = harness.step.h100_devices()
    defaults = kernel_tiles(args.seq, triton=True, head_dim=args.head_dim)
    print(f"seq {args.seq}, batch × seq {args.tokens}, 12 heads × {args.head_dim}, bf16, sm_90a; "
          f"defaults (forward, dq, dk/dv): "
          + ", ".join(f"{t.outer}×{t.inner} w{t.num_warps} s{t.num_stages}" for t in defaults)
          + "\n")
    print("| kernel | outer × inner | warps | stages | case | registers | spilled bytes "
          "(stores / loads) | wgmma | serialized |")
    print("|---|---|---|---|---|---|---|---|---|")
    start, rows = time.perf_counter(), []
    for kernel in args.kernels:
        slot = list(KERNELS).index(kernel)
        for text in args.candidates:
            tile = Tiles(*(int(x) for x in text.split(",")))
            tiles = tuple(tile if i == slot else t for i, t in enumerate(defaults))
            for case in args.cases:
                with tempfile.TemporaryDirectory() as dump:
                    compile_layer(devices, tiles, case, args.seq, args.tokens, dump,
                                  args.head_dim)
                    info = dumped_kernels(dump, ptxas, prefix=KERNELS[kernel])[KERNELS[kernel]]
                print(f"| {kernel} | {tile.outer} × {tile.inner} | {tile.num_warps} | "
                      f"{tile.num_stages} | {case} | {info['registers']} | "
                      f"{info['spill_stores']} / {info['spill_loads']} | {info['wgmma']} | "
                      f"{'**yes**' if info['wgmma_serialized'] else 'no'} |", flush=True)
                rows.append({"row": f"{kernel} {text}, {case}", "figures": {
                    k: info[k] for k in ("registers", "spill_stores", "spill_loads", "wgmma",
                                         "wgmma_serialized")}})
    print(f"\n{time.perf_counter() - start:.0f} s")
    records.save(args, "flash_tiles", rows, target="H100 SXM (sm_90a), compiled deviceless",
                 shape={"seq": args.seq, "tokens": args.tokens, "heads": 12,
                        "head_dim": args.head_dim, "dtype": "bfloat16"})


if __name__ == "__main__":
    main()
