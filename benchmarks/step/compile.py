"""Compile time of the kjax train step vs depth, with and without nn.scan.

    python benchmarks/step/compile.py                 # depths 4, 12, 24; hidden 64
    python benchmarks/step/compile.py --depths 4,12,24 --hidden 768 --heads 12 --ffn 3072

Times trace + lower + XLA compile of the full train step (forward, backward,
AdamW update) with `jitted.lower(abstract state, abstract batch).compile()`,
nothing executed, no persistent cache. The hidden size is small by default
so the figures show what depth costs; XLA's time grows with the number of
ops, which scan keeps constant in depth (one layer body in a while loop) and
an unrolled stack multiplies. One record per depth and stack
(benchmarks/results/compile.jsonl).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import records  # noqa: E402


def compile_seconds(config) -> tuple[float, float]:
    """(trace + lower seconds, XLA compile seconds) of one fresh train step."""
    start = time.perf_counter()
    lowered = harness.lower_step(config)
    traced = time.perf_counter() - start
    lowered.compile()
    return traced, time.perf_counter() - start - traced


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--depths", default="4,12,24")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--remat", default="none", help="model.remat_policy")
    records.add_arguments(ap)
    args = ap.parse_args()
    import jax
    jax.config.update("jax_enable_compilation_cache", False)
    depths = [int(x) for x in args.depths.split(",")]
    load_before = harness.load_average()
    rows = {}
    for depth in depths:          # interleave scan / unrolled so load drifts hit both
        for scan in (True, False):
            config = harness.preset_config("uknow_small", args.seq, args.batch, "float32", [
                f"--config.model.num_layers={depth}", f"--config.model.hidden_size={args.hidden}",
                f"--config.model.num_heads={args.heads}",
                f"--config.model.intermediate_size={args.ffn}",
                f"--config.model.vocab_size={args.vocab}",
                f"--config.model.scan_layers={scan}",
                f"--config.model.remat_policy={args.remat}"])
            rows[depth, scan] = compile_seconds(config)
            print(f"depth {depth} scan {scan}: trace+lower {rows[depth, scan][0]:.1f} s, "
                  f"compile {rows[depth, scan][1]:.1f} s", flush=True)
    lines = ["| layers | scan: trace+lower s | scan: XLA compile s | scan: total s | ×(first) "
             "| unrolled: trace+lower s | unrolled: XLA compile s | unrolled: total s | ×(first) |",
             "|---|---|---|---|---|---|---|---|---|"]
    base = {scan: sum(rows[depths[0], scan]) for scan in (True, False)}
    for depth in depths:
        cells = []
        for scan in (True, False):
            t, c = rows[depth, scan]
            cells.append(f"{t:.1f} | {c:.1f} | {t + c:.1f} | {(t + c) / base[scan]:.2f}×")
        lines.append(f"| {depth} | " + " | ".join(cells) + " |")
    ratio = sum(rows[depths[-1], True]) / base[True]
    notes = (f"Train step (fwd + bwd + AdamW), hidden {args.hidden}, {args.heads} heads, FFN "
             f"{args.ffn}, vocab {args.vocab}, seq {args.seq}, batch {args.batch}, remat "
             f"{args.remat}. With scan, {depths[-1]} layers take **{ratio:.2f}×** the "
             f"{depths[0]}-layer compile.")
    print("\n".join(lines) + "\n" + notes)
    found = [{"row": f"{depth} layers, {'scan' if scan else 'unrolled'}",
              "overrides": [f"model.num_layers={depth}", f"model.scan_layers={scan}"],
              "figures": {"trace_lower_s": round(rows[depth, scan][0], 1),
                          "compile_s": round(rows[depth, scan][1], 1),
                          "total_s": round(sum(rows[depth, scan]), 1),
                          "vs_first_depth": round(sum(rows[depth, scan]) / base[scan], 3)}}
             for depth in depths for scan in (True, False)]
    records.save(args, "compile", found, load_before=load_before, notes=notes,
                 preset="uknow_small", shape={"seq": args.seq, "batch": args.batch,
                                              "dtype": "float32", "hidden": args.hidden})


if __name__ == "__main__":
    main()
