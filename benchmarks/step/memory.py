"""What a train step's memory is made of, per remat policy, and what SHAKE's
Eq. 1 adds, from XLA's buffer assignment (nothing is run): the fixed part and
the cost of each example.

    python benchmarks/step/memory.py                      # BERT-base, seq 512
    python benchmarks/step/memory.py --policies none,dots_saveable
    python benchmarks/step/memory.py --shape uknow_small --seq 256 --no-shake

For each policy the train step (fwd + bwd + AdamW, state donated) is lowered
against abstract inputs and compiled at two batch sizes; peak bytes =
arguments + un-aliased outputs + temporaries (`compiled.memory_analysis()`),
which is linear in the batch: fixed (params, Adam moments, gradients) + a
per-example share (saved activations and the step's transients). With
shaking on (bf = 1, B in the batch as float8 [seq, seq]: 1 byte per (q, k)
per example), the same fit gives its per-example cost. The largest batch
that fits a slice is not read off this line: it is the target compiler's
verdict, `kjax compile --topology ... --fit-batch` (kjax/pretrain/memory_fit.py),
which also names the microbatches that fit a larger batch.

Caveat: the figures are XLA:CPU's buffer assignment; XLA:GPU/TPU fuse and
schedule differently (and the CPU backend may keep bf16 elementwise work in
fp32), so treat the absolute numbers as indicative and the differences
between policies as the reading.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import records  # noqa: E402

GIB = 1 << 30


def measure(shape, seq, dtype, policy, shake, batch) -> dict:
    extra = [f"--config.model.remat_policy={policy}"]
    if shake:
        extra += ["--config.model.shake_factor=1.0", "--config.shake.variant=random"]
    config = harness.preset_config(shape, seq, batch, dtype, extra)
    return {batch: harness.peak_bytes(harness.lower_step(config).compile())}


def fit(shape, seq, dtype, policy, shake, batches):
    out = {}
    for b in batches:
        out.update(measure(shape, seq, dtype, policy, shake, b))
    (b1, m1), (b2, m2) = sorted(out.items())[:2]
    per = (m2 - m1) / (b2 - b1)
    return m1 - per * b1, per, out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="bert_base", choices=sorted(harness.SHAPES))
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--policies", default="none,full,dots_with_no_batch_dims_saveable")
    ap.add_argument("--shake-policies", default="none",
                    help="policies to repeat with shaking on")
    ap.add_argument("--no-shake", action="store_true")
    ap.add_argument("--fit-batches", default="2,4")
    records.add_arguments(ap)
    args = ap.parse_args()
    batches = [int(x) for x in args.fit_batches.split(",")]
    load_before = harness.load_average()
    rows = []
    runs = [(p, False) for p in args.policies.split(",")]
    if not args.no_shake:
        runs += [(p, True) for p in args.shake_policies.split(",")]
    for policy, shake in runs:
        start = time.perf_counter()
        fixed, per, seen = fit(args.shape, args.seq, args.dtype, policy, shake, batches)
        rows.append((policy, shake, fixed, per, time.perf_counter() - start))
        print(f"{policy} shake={shake}: fixed {fixed / GIB:.2f} GiB, {per / 2**20:.0f} MiB/example",
              flush=True)
    lines = ["| remat policy | shaking | fixed GiB | MiB per example |", "|---|---|---|---|"]
    plain = {p: per for p, s, _, per, _ in rows if not s}
    found = []
    for policy, shake, fixed, per, _ in rows:
        extra = ""
        if shake and policy in plain:
            extra = f" (+{(per - plain[policy]) / 2**20:.0f} MiB vs off)"
        lines.append(f"| {policy} | {'on' if shake else 'off'} | {fixed / GIB:.2f} | "
                     f"{per / 2**20:.0f}{extra} |")
        found.append({"row": f"remat {policy}, shaking {'on' if shake else 'off'}",
                      "overrides": [f"model.remat_policy={policy}"] + (
                          ["model.shake_factor=1.0", "shake.variant=random"] if shake else []),
                      "figures": {"fixed_gib": round(fixed / GIB, 3),
                                  "mib_per_example": round(per / 2**20, 1)}})
    from kjax.shake.matrix import B_DTYPE
    b_bytes = args.seq * args.seq * np.dtype(B_DTYPE).itemsize
    notes = (f"{args.shape}, seq {args.seq}, {args.dtype} compute, fp32 params + AdamW; per-device"
             f" peak from XLA:CPU memory_analysis, linear fit over batches {batches}. B itself is "
             f"{b_bytes / 2**20:.2f} MiB per example ({np.dtype(B_DTYPE).name} [seq, seq]); the rest of shaking's "
             f"per-example cost is what the backward keeps for Eq. 1.")
    print("\n".join(lines) + "\n" + notes)
    records.save(args, "memory", found, load_before=load_before, notes=notes,
                 preset=args.shape, shape={"seq": args.seq, "dtype": args.dtype})


if __name__ == "__main__":
    main()
