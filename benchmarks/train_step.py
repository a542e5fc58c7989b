"""Train-step throughput: tokens/s, step time, peak memory and MFU of kjax
presets on synthetic batches (no input pipeline in the loop), on whatever
devices JAX sees, for model variants run alternately in one invocation.
Prints a table and appends a dated, machine-described record to
docs/PERFORMANCE.md (pass --no-record to skip).

    python benchmarks/train_step.py --preset uknow_small --seq 128 --batch 32
    python benchmarks/train_step.py --preset uknow_small --shake both          # Eq. 1 off vs on
    python benchmarks/train_step.py --preset uknow_small --knowledge both      # multi-hot, heads off/on
    python benchmarks/train_step.py --preset bert_base --seq 512 --batch 8 --dtype bfloat16
    python benchmarks/train_step.py --preset bert_base --batch 4 --dtype float32 \
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
import statistics
import time

import _common

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


class Variant:
    def __init__(self, config):
        import numpy as np
        from kjax.parallel.mesh import make_mesh, on_mesh, put_batch
        from kjax.train.state import init_state, make_model, make_optimizer
        from kjax.train.step import make_train_step
        self.config = config
        mesh = make_mesh(config)
        model, tx = make_model(config, deterministic=False), make_optimizer(config.train)
        self.state, shardings = init_state(config, mesh, model, tx)
        step = make_train_step(config, mesh, model, tx, shardings)
        self.batch = put_batch(_common.synthetic_batch(config, np.random.default_rng(0)), mesh)
        start = time.perf_counter()
        with on_mesh(mesh, config):
            self.step = step.jitted.lower(self.state, self.batch).compile()
        self.compile_s = time.perf_counter() - start
        self.peak_bytes = _common.peak_bytes(self.step)
        self.times = []
        self.run(1)  # first execution (allocations) outside the timing

    def run(self, steps: int) -> float:
        self.state, seconds = _common.timed_steps(self.step, self.state, self.batch, steps)
        return seconds


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
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    from kjax.train.metrics import measure_matmul_flops, peak_flops
    from kjax.train.step import flops_per_example
    runs = []
    for preset in args.preset or ["demo", "uknow_small"]:
        for name, extra in variants(args):
            if args.remat:
                extra = extra + [f"--config.model.remat_policy={args.remat}"]
            config = _common.preset_config(preset, args.seq, args.batch, args.dtype, extra)
            runs.append((preset, name, Variant(config)))
            print(f"{preset} / {name}: compiled in {runs[-1][2].compile_s:.1f} s", flush=True)
    load_before = _common.load_average()
    peak, source = peak_flops(runs[0][2].config)
    peaks = [peak]
    for r in range(args.rounds):
        for _, _, v in runs:
            v.times.append(v.run(args.steps))
        if source == "measured matmul":  # the CPU 'peak' is measured in every round too
            peaks.append(measure_matmul_flops(runs[0][2].config.model.dtype))
        print(f"round {r}: " + ", ".join(f"{p}/{n} {1000 * v.times[-1]:.0f} ms"
                                         for p, n, v in runs) + f"; matmul "
              f"{peaks[-1] / 1e12:.3f} TFLOP/s", flush=True)
    peak = statistics.median(peaks)
    header = ("| preset | variant | dtype | seq | batch | compile s | step ms | vs first (per-round range) | "
              "tokens/s | peak mem GiB | TFLOP/s | MFU | peak |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines, first = [], {}
    for preset, name, v in runs:
        c = v.config
        step_s = statistics.median(v.times)
        first.setdefault(preset, v.times)  # per-round ratios to the preset's first variant
        ratios = [t / f for t, f in zip(v.times, first[preset])]
        flops = flops_per_example(c.model, c.data.max_seq_len,
                                  c.data.max_predictions_per_seq) * c.train.batch_size
        lines.append(
            f"| {preset} | {name} | {c.model.dtype} | {args.seq} | {args.batch} | "
            f"{v.compile_s:.1f} | {1000 * step_s:.1f} | {statistics.median(ratios):.2f}× "
            f"({min(ratios):.2f}–{max(ratios):.2f}) | "
            f"{args.batch * args.seq / step_s:.0f} | {v.peak_bytes / 2**30:.3f} | "
            f"{flops / step_s / 1e12:.3f} | {flops / step_s / peak:.1%} | "
            f"{peak / 1e12:.3f} TFLOP/s ({source}) |")
    notes = (f"{args.rounds} rounds × {args.steps} steps per variant, alternating; median round"
             f"{'; CPU peak = median matmul FLOP/s over the rounds' if len(peaks) > 1 else ''}. "
             f"Load average before/after: {load_before} / {_common.load_average()}.")
    _common.record("train_step", "\n".join([header, *lines]), notes, args.no_record)


if __name__ == "__main__":
    main()
