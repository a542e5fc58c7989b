"""The attention implementations side by side (kjax/model/attention_core.py).

    python benchmarks/kernels/attention.py                  # seq 128, 512, 2048; records
    python benchmarks/kernels/attention.py --seqs 128,512 --no-record
    python benchmarks/kernels/attention.py --tables time    # only the timing table
    python benchmarks/kernels/attention.py --grid --cap 420 # every GPU path, rows as measured

Tables:
  time    one attention layer, forward + backward (context and the
          gradients of q, k, v), BERT-base heads (12 × 64), batch × seq =
          4096 tokens per call: median seconds and the compiled program's
          peak bytes (memory_analysis: arguments + outputs + temporaries).
          On CPU the flash kernel runs only in interpret mode (an emulator:
          its time is no speed), so its row is timed at the shortest seq
          only; on GPU/TPU it is compiled and timed at every seq, in bf16;
  b, step what B costs in memory (benchmarks/kernels/shake_memory.py).
That the paths agree is tested (tests/test_attention_kernels.py), not timed.

--grid (for a GPU; benchmarks/kernels/attention_grid.py): one layer fwd+bwd
at seq 512, 2048, 8192 (batch × seq = --tokens), bf16, for {cudnn, flash,
xla} × {no dropout, attention dropout 0.1} × {no B, pairs B "pos", pairs B
"random"}; each row printed and recorded as soon as it is measured, stopped
after --cap seconds. `--tiles LABEL=F/DQ/DKV` (repeatable) adds flash rows
with that tiling of the three kernels (benchmarks/kernels/flash_tiles.py
says which tilings spill); `--flash-tiles table` fixes the plain flash rows'
tiles instead of timing them on the card, `--tuning-budget S` bounds that
timing per signature (kjax/model/flash/tuning.py's BUDGET_S); every flash
row says its tiles. `--impls`, `--rates`, `--b` and `--dtype` pick part of
the grid (`--impls cudnn,mosaic --rates 0 --b none`: jax's Mosaic GPU
attention, in float16, beside cuDNN). Records:
benchmarks/results/attention.jsonl.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from attention_grid import LAYOUTS, grid, parse_tiling, pick_impls  # noqa: E402
from harness import records  # noqa: E402
from shake_memory import MIB, b_rows, step_rows  # noqa: E402


def ints(text):
    return [int(x) for x in text.split(",")]


def time_rows(seqs, tokens, steps, backend) -> tuple[list[str], list[dict], str]:
    import jax
    import jax.numpy as jnp
    dtype = jnp.float32 if backend == "cpu" else jnp.bfloat16
    h, d = 12, 64
    variants = [("xla", None), ("dot_product", None), ("xla", "dense"), ("xla", "pairs"),
                ("flash", None), ("flash", "dense"), ("flash", "pairs")]
    lines = ["| impl | Eq. 1 B | seq | batch | fwd+bwd ms (median) | ÷ xla, no B | peak MiB |",
             "|---|---|---|---|---|---|---|"]
    rows = []
    for s in seqs:
        b = max(1, tokens // s)
        rng = np.random.default_rng(0)
        q, k, v = (jnp.asarray(rng.normal(size=(b, s, h, d)) / 4, dtype) for _ in range(3))
        valid = jnp.ones((b, s), jnp.int32)
        start = rng.integers(0, s - 1, (b, s))
        weight = (rng.random((b, s)) < 0.25).astype(np.float32)
        pairs = {"key_start": jnp.asarray(start, jnp.int32),
                 "key_end": jnp.asarray(start + 1, jnp.int32),
                 "weight": jnp.asarray(weight, jnp.float8_e4m3fn)}
        keys = np.arange(s)
        dense = jnp.asarray(np.where((keys >= start[..., None]) & (keys < start[..., None] + 1),
                                     weight[..., None], 0), jnp.float8_e4m3fn)
        compiled = {}
        for impl, layout in variants:
            if impl == "flash" and backend == "cpu" and s != seqs[0]:
                continue
            shake = {"dense": dense, "pairs": pairs, None: None}[layout]
            step = jax.jit(jax.value_and_grad(_layer_loss(impl, valid), (0, 1, 2)))
            peak = harness.peak_bytes(step.lower(q, k, v, shake).compile())
            jax.block_until_ready(step(q, k, v, shake))
            compiled[impl, layout] = (step, shake, peak, [])
        for _ in range(steps):     # rounds alternate the variants: load drift hits all alike
            for step, shake, _, times in compiled.values():
                start_t = time.perf_counter()
                jax.block_until_ready(step(q, k, v, shake))
                times.append(time.perf_counter() - start_t)
        plain = float(np.median(compiled["xla", None][3]))
        for (impl, layout), (_, _, peak, times) in compiled.items():
            label = impl + (" (interpret)" if impl == "flash" and backend == "cpu" else "")
            ms = 1e3 * float(np.median(times))
            lines.append(f"| {label} | {layout or 'none'} | {s} | {b} | {ms:.1f} | "
                         f"{ms / 1e3 / plain:.2f}× | {peak / MIB:.0f} |")
            rows.append({"row": f"{label}, B {layout or 'none'}",
                         "shape": {"seq": s, "batch": b, "heads": h, "head_dim": d,
                                   "dtype": jnp.dtype(dtype).name},
                         "figures": {"ms": round(ms, 3), "vs_xla": round(ms / 1e3 / plain, 3),
                                     "peak_mib": round(peak / MIB, 1)}})
    note = (f"One attention layer (q, k, v → context; value and gradients of q, k, v), "
            f"{h} heads × {d}, {jnp.dtype(dtype).name}, {tokens} tokens per call, bf = 0.5 "
            f"where B is given (a quarter of the queries boost one key); median of {steps} "
            f"rounds (each round calls every variant once) after a warm-up; peak = arguments + "
            f"outputs + temporaries of the compiled call. xla = the explicit path (what `auto` "
            f"runs on CPU and TPU), dot_product = jax.nn.dot_product_attention (`auto`'s choice "
            f"for unshaken calls on GPU, as cuDNN; here its XLA form).")
    return lines, rows, note


def _layer_loss(impl, valid):
    import jax.numpy as jnp
    from kjax.model.attention import explicit_attention
    from kjax.model.attention_core import fused_attention

    def loss(q, k, v, shake):
        if impl == "xla":
            out = explicit_attention(q, k, v, valid, shake=shake, bf=0.5)[0]
        else:
            out = fused_attention(impl, q, k, v, valid, shake=shake, bf=0.5)
        return out.astype(jnp.float32).sum()
    return loss


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", default="128,512,2048", help="timing table")
    ap.add_argument("--tokens", type=int, default=4096, help="batch × seq per timed call")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--b-seqs", default="512,1024,8192")
    ap.add_argument("--step-shape", default="uknow_small", choices=sorted(harness.SHAPES))
    ap.add_argument("--step-seqs", default="512,2048")
    ap.add_argument("--step-batch", type=int, default=2)
    ap.add_argument("--tables", default="time,b,step")
    ap.add_argument("--grid", action="store_true", help="the grid of GPU paths only")
    ap.add_argument("--grid-seqs", default="512,2048,8192")
    ap.add_argument("--cap", type=float, default=420, help="--grid: seconds before it stops")
    ap.add_argument("--tiles", action="append", default=[], metavar="LABEL=F/DQ/DKV",
                    help="--grid: flash rows with this tiling too, each kernel's as "
                    "outer,inner,warps,stages (kjax/model/flash/tiles.py), e.g. "
                    "large=128,128,4,2/128,128,4,2/128,128,4,2")
    ap.add_argument("--flash-tiles", metavar="VALUE", help="--grid: the plain flash rows' "
                    "tiles as model.attention_tiles takes them ('table' or F/DQ/DKV; default: "
                    "timed on the card)")
    ap.add_argument("--impls", help="--grid: comma-separated, of cudnn, flash, xla, mosaic "
                    "and the --tiles labels (default: all but mosaic)")
    ap.add_argument("--rates", default="0,0.1", help="--grid: attention dropout rates")
    ap.add_argument("--b", default=",".join(LAYOUTS), help="--grid: B layouts, of "
                    f"{', '.join(LAYOUTS)}")
    ap.add_argument("--dtype", help="--grid: q, k, v dtype (default bfloat16; float32 on CPU)")
    ap.add_argument("--tuning-budget", type=float, help="--grid: seconds of tile timing per "
                    "flash signature (default flash_tuning.BUDGET_S)")
    records.add_arguments(ap)
    args = ap.parse_args()
    before = harness.load_average()
    if args.grid:
        tilings = [parse_tiling(t) for t in args.tiles]
        layouts = [x for x in args.b.split(",") if x]
        if set(layouts) - set(LAYOUTS):
            ap.error(f"--b {args.b}: choose from {', '.join(LAYOUTS)}")
        impls = pick_impls([x for x in (args.impls or "").split(",") if x], tilings)
        note = ("one layer fwd + bwd (benchmarks/kernels/attention.py --grid"
                + (f"; plain flash rows on tiles {args.flash_tiles}" if args.flash_tiles else "")
                + ")")

        def record(row):   # at once: a grid cut off or aborted keeps what it measured
            if not args.no_record:
                records.write("attention", [{**row, "row": f"grid: {row['row']}"}],
                              args.results, load_before=before, notes=note)
        rows = grid(ints(args.grid_seqs), args.tokens, args.steps, args.cap, tilings, impls,
                    [float(x) for x in args.rates.split(",")], layouts, args.dtype,
                    args.flash_tiles, record, args.tuning_budget)
        if not args.no_record:
            print(f"records: {len(rows)} row(s) added to "
                  f"{os.path.relpath(os.path.join(args.results, 'attention.jsonl'))}",
                  flush=True)
        return
    import jax
    tables = args.tables.split(",")
    unknown = set(tables) - {"time", "b", "step"}
    if unknown:
        ap.error(f"--tables {args.tables}: {', '.join(sorted(unknown))} unknown; "
                 "choose from time, b, step")
    found = []
    if "time" in tables:
        lines, rows, note = time_rows(ints(args.seqs), args.tokens, args.steps,
                                      jax.default_backend())
        found += [{**r, "notes": note} for r in rows]
        print("\n".join(lines) + "\n" + note, flush=True)
    if "b" in tables:
        lines, rows = b_rows(ints(args.b_seqs))
        found += rows
        print("\n".join(lines), flush=True)
    if "step" in tables:
        lines, rows, note = step_rows(args.step_shape, ints(args.step_seqs), args.step_batch)
        found += [{**r, "notes": note} for r in rows]
        print("\n".join(lines) + "\n" + note, flush=True)
    records.save(args, "attention", found, load_before=before)


if __name__ == "__main__":
    main()
