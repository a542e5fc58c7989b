"""What gradient accumulation costs: the train step of one global batch run
whole (train.microbatches=1) and as k microbatches (kjax/train/accumulation.py:
a lax.scan over the microbatches, fp32 gradient sums, one update), the
sides alternating in one process so load drift on a shared machine hits
both. Prints each side's median step time, the ratio to k = 1 and what its
compiled program's collectives move per device a step (and how much of it
inside loops: kjax/pretrain/collectives.py); one record per side
(benchmarks/results/accumulation.jsonl).

    python benchmarks/step/accumulation.py                         # uknow_small 128 × 32, k = 1, 4
    python benchmarks/step/accumulation.py --k 1,2,4,8 --rounds 8
    python benchmarks/step/accumulation.py --preset bert_base --seq 512 --batch 32 --dtype bfloat16
    python benchmarks/step/accumulation.py --config.model.num_layers=2    # overrides: every side

On whatever devices JAX sees (a data mesh over all of them), so on a GPU
or TPU the same command times the card or slice. On the 8 fake devices of a
CPU (JAX_NUM_CPU_DEVICES=8) the gradient reduction is a copy between host
buffers, but there is one a step whatever k (kjax/train/accumulation.py):
the collectives column shows it; keep 2 rows or more a device per
microbatch (batch ≥ 16·k), or it times one-row matmuls.
The first loss of every side is printed: accumulation gives the whole
batch's step, so they agree to float rounding.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import records  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="uknow_small", help="a preset of tpu_configs/")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32, help="the global batch, every side's")
    ap.add_argument("--dtype", default="float32",
                    help="compute dtype (default float32: a CPU emulates bfloat16 matmuls)")
    ap.add_argument("--k", default="1,4", help="microbatch counts, the first the baseline")
    ap.add_argument("--steps", type=int, default=3, help="steps per side per round")
    ap.add_argument("--rounds", type=int, default=6)
    records.add_arguments(ap)
    args, overrides = ap.parse_known_args()   # --config.KEY=VALUE: on every side
    if any(not o.startswith("--config.") for o in overrides):
        ap.error(f"unrecognized arguments: {' '.join(overrides)}")
    import jax
    from kjax.pretrain.collectives import KINDS, summary
    from kjax.train.peak_flops import peak_flops
    ks = [int(k) for k in args.k.split(",")]
    sides = {}
    for k in ks:
        extra = [*overrides, f"--config.train.microbatches={k}"]
        config = harness.preset_config(args.preset, args.seq, args.batch, args.dtype, extra)
        label = "k=1, whole batch" if k == 1 else f"k={k}, microbatches of {args.batch // k}"
        sides[label] = (k, extra, harness.Step(config))
        print(f"{label}: compiled in {sides[label][2].compile_s:.1f} s, "
              f"first loss {sides[label][2].loss:.6f}", flush=True)
    load_before = harness.load_average()
    first = next(iter(sides.values()))[2]
    peak = peak_flops(first.config)
    # swap: each side runs first in every other round, so neither always follows the other
    times = harness.alternate({label: s[2] for label, s in sides.items()}, args.rounds,
                              args.steps, swap=True)
    base = next(iter(sides))
    lines = [f"{args.preset} seq {args.seq}, global batch {args.batch}, {args.dtype}, "
             f"{jax.device_count()} {jax.devices()[0].platform} device(s)\n",
             "| microbatches | compile s | step ms (median) | vs k=1: ratio of medians "
             "| per round: median (range) | peak mem GiB | collectives MiB a step (in loops) "
             "| first loss |", "|---" * 8 + "|"]
    rows = []
    for label, (k, extra, step) in sides.items():
        ratios = [t / b for t, b in zip(times[label], times[base])]
        fig = step.figures(statistics.median(times[label]), peak)
        moved = summary(step.compiled.as_text())
        fig.update(collective_mib=round(sum(moved[k] for k in KINDS) / 2**20, 2),
                   collective_in_loops_mib=round(moved["in_loops"] / 2**20, 2),
                   collective_ops=moved["ops"])
        fig.update(microbatches=k, vs_k1=round(statistics.median(times[label])
                                               / statistics.median(times[base]), 4),
                   vs_k1_low=round(min(ratios), 4), vs_k1_high=round(max(ratios), 4),
                   vs_k1_rounds=round(statistics.median(ratios), 4),
                   round_ms=[round(1000 * t, 1) for t in times[label]])
        lines.append(f"| {label} | {fig['compile_s']:.1f} | {fig['ms']:.1f} | "
                     f"{fig['vs_k1']:.3f}× | {fig['vs_k1_rounds']:.3f}× "
                     f"({fig['vs_k1_low']:.3f}–{fig['vs_k1_high']:.3f}) | "
                     f"{fig['peak_gib']:.3f} | {fig['collective_mib']:.2f} "
                     f"({fig['collective_in_loops_mib']:.2f}) | {step.loss:.6f} |")
        rows.append({"row": label, "preset": args.preset, "overrides": harness.overrides_of(extra),
                     "shape": {"seq": args.seq, "batch": args.batch, "dtype": args.dtype},
                     "figures": fig})
    notes = (f"{args.rounds} rounds × {args.steps} steps per side, alternating (the order "
             f"swapped every other round); step time is the median round; vs_k1 is the "
             f"ratio of medians, vs_k1_rounds the median of the per-round ratios (steadier "
             f"when the machine's speed drifts between rounds), low/high their range.")
    print("\n".join(lines) + "\n" + notes, flush=True)
    records.save(args, "accumulation", rows, load_before=load_before, notes=notes)


if __name__ == "__main__":
    main()
