"""Train-step throughput: tokens/s, step time, peak memory and MFU of kjax
presets on synthetic batches (no input pipeline in the loop), on whatever
devices JAX sees, for model variants run alternately in one invocation.
Prints a table and writes one record per variant (benchmarks/results/
train_step.jsonl; --no-record: print only).

    python benchmarks/step/train_step.py --preset uknow_small --seq 128 --batch 32
    python benchmarks/step/train_step.py --preset uknow_small --shake both       # Eq. 1 off vs on
    python benchmarks/step/train_step.py --preset uknow_small --knowledge both   # multi-hot, heads off/on
    python benchmarks/step/train_step.py --preset bert_base --seq 512 --batch 8 --dtype bfloat16
    python benchmarks/step/train_step.py --preset bert_base --batch 4 --dtype float32 \\
        --compare unrolled:--config.model.scan_layers=False

Variants: --shake on adds B to the batch (float8 [seq, seq] per example, a
few boosted pairs per row) with bf = 1 in every layer; --knowledge on
switches to multi-hot input (the heads need morpheme positions) with the
hypernym, sense and verb heads and their losses; --knowledge both compares
multi-hot with and without heads; --input-mode multihot alone gives
multi-hot without heads. Each variant is compiled ahead of time (its peak
memory from XLA's memory_analysis: arguments + un-aliased outputs +
temporaries), then the variants take turns, --rounds times --steps steps;
step time is the median round.

MFU counts bidirectional attention FLOPs (kjax.train.step.flops_per_example;
the knowledge heads' and Eq. 1's few FLOPs are not counted) against the
device's datasheet peak, or on CPU the median of the square-matmul FLOP/s
measured between the rounds (so the peak sees the same machine load).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import records  # noqa: E402

SHAKE = ["--config.model.shake_factor=1.0", "--config.shake.variant=random"]
MULTIHOT = ["--config.model.input_mode=multihot", "--config.tokenizer.scheme=multihot",
            "--config.train.mlm_loss=eq9"]
KNOWLEDGE = ["--config.knowledge.hypernym_weight=1.0", "--config.knowledge.sense_weight=1.0",
             "--config.knowledge.verb_weight=1.0"]


def variants(args) -> list[tuple[str, list[str]]]:
    shake = {"off": [False], "on": [True], "both": [False, True]}[args.shake]
    know = {"off": [False], "on": [True], "both": [False, True]}[args.knowledge]
    multihot = args.input_mode == "multihot" or args.knowledge != "off"
    out = []
    for k in know:
        for s in shake:
            name = ["multi-hot" if multihot else "one-hot"]
            extra = list(MULTIHOT if multihot else [])
            if k:
                name.append("knowledge heads")
                extra += KNOWLEDGE
            if s:
                name.append("shaking")
                extra += SHAKE
            out.append((" + ".join(name), extra))
    for spec in args.compare or []:  # "label:--config.a=b,--config.c=d" on top of the first
        label, _, overrides = spec.partition(":")
        out.append((f"{out[0][0]} + {label}", out[0][1] + overrides.split(",")))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", action="append", default=None,
                    help="tpu_configs/<preset>.py (repeatable; default demo and uknow_small)")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtype", default=None, help="compute dtype (default: the preset's)")
    ap.add_argument("--remat", default=None, help="model.remat_policy (default: the preset's)")
    ap.add_argument("--shake", default="off", choices=("off", "on", "both"))
    ap.add_argument("--knowledge", default="off", choices=("off", "on", "both"))
    ap.add_argument("--input-mode", default="onehot", choices=("onehot", "multihot"))
    ap.add_argument("--compare", action="append", default=None,
                    help="extra variant 'label:--config.a=b,...' (repeatable), e.g. "
                         "'unrolled:--config.model.scan_layers=False'")
    ap.add_argument("--steps", type=int, default=3, help="steps per variant per round")
    ap.add_argument("--rounds", type=int, default=3)
    records.add_arguments(ap)
    args = ap.parse_args()
    from kjax.train.peak_flops import measure_matmul_flops, peak_flops
    runs = {}
    for preset in args.preset or ["demo", "uknow_small"]:
        for name, extra in variants(args):
            if args.remat:
                extra = extra + [f"--config.model.remat_policy={args.remat}"]
            config = harness.preset_config(preset, args.seq, args.batch, args.dtype, extra)
            runs[f"{preset} / {name}"] = (preset, name, extra, harness.Step(config))
            print(f"{preset} / {name}: compiled in {runs[f'{preset} / {name}'][3].compile_s:.1f} s",
                  flush=True)
    load_before = harness.load_average()
    first = next(iter(runs.values()))[3]
    peak, source = peak_flops(first.config)
    peaks = [peak]

    def on_round(r, times):
        if source == "measured matmul":  # the CPU 'peak' is measured in every round too
            peaks.append(measure_matmul_flops(first.config.model.dtype))
        print(f"round {r}: " + ", ".join(f"{k} {1000 * v[-1]:.0f} ms" for k, v in times.items())
              + f"; matmul {peaks[-1] / 1e12:.3f} TFLOP/s", flush=True)
    times = harness.alternate({k: v[3] for k, v in runs.items()}, args.rounds, args.steps,
                              on_round)
    peak = statistics.median(peaks)
    lines = ["| preset | variant | dtype | seq | batch | compile s | step ms | vs first "
             "(per-round range) | tokens/s | peak mem GiB | MFU | peak |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows, firsts = [], {}
    for key, (preset, name, extra, step) in runs.items():
        firsts.setdefault(preset, key)   # ratios to the preset's first variant
        ratios = [t / f for t, f in zip(times[key], times[firsts[preset]])]
        fig = step.figures(statistics.median(times[key]), (round(peak), source))
        fig.update(vs_first=round(statistics.median(ratios), 3),
                   vs_first_low=round(min(ratios), 3), vs_first_high=round(max(ratios), 3))
        c = step.config
        lines.append(f"| {preset} | {name} | {c.model.dtype} | {args.seq} | {args.batch} | "
                     f"{fig['compile_s']:.1f} | {fig['ms']:.1f} | {fig['vs_first']:.2f}× "
                     f"({fig['vs_first_low']:.2f}–{fig['vs_first_high']:.2f}) | "
                     f"{fig['tokens_per_s']} | {fig['peak_gib']:.3f} | {fig['mfu']:.1%} | "
                     f"{peak / 1e12:.3f} TFLOP/s ({source}) |")
        rows.append({"row": name, "preset": preset, "overrides": harness.overrides_of(extra),
                     "shape": {"seq": args.seq, "batch": args.batch, "dtype": c.model.dtype},
                     "figures": fig})
    notes = (f"{args.rounds} rounds × {args.steps} steps per variant, alternating; median round"
             f"{'; CPU peak = median matmul FLOP/s over the rounds' if len(peaks) > 1 else ''}.")
    print("\n".join(lines) + "\n" + notes)
    records.save(args, "train_step", rows, load_before=load_before, notes=notes)


if __name__ == "__main__":
    main()
