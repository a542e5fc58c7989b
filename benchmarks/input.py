"""Input pipeline throughput vs what the train step consumes.

    python benchmarks/input.py                       # runs/demo_data, batch 32, seq 128
    python benchmarks/input.py --shake               # + the Eq. 1 matrix B (random variant)
    python benchmarks/input.py --data runs/uknow_small_data/examples --models uknow_small

Measures, alternating in one invocation (rounds):
  loader   examples/s of kjax.batches.loader.train_dataset (grain: ArrayRecord
           reads, shuffle, dynamic masking, padding, batching; its 2 reader
           threads and prefetch) drawn with nothing else running;
  step     examples/s of the kjax train step on a device-resident batch of
           the same shape, for each model in --models;
  loop     examples/s of the trainer's loop body: next(loader) → put_batch →
           step (dispatch is asynchronous, so the loader works while the
           step runs — on a CPU both share the same cores).
Target: loader ≥ 5× what the step consumes. Needs prepared data (`kjax
demo` or `kjax prepare --config tpu_configs/demo.py` writes runs/demo_data).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import _common


def loader_rate(iterator, batches: int, batch: int) -> float:
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.path.join(_common.ROOT, "runs", "demo_data", "examples"))
    ap.add_argument("--data-preset", default="demo", help="the preset the data was prepared with")
    ap.add_argument("--models", default="demo,uknow_small")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--shake", action="store_true", help="build B (shake.variant=random)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=20, help="loader batches per round")
    ap.add_argument("--steps", type=int, default=3, help="steps per model per round")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    import jax
    import numpy as np
    from kjax.batches.loader import train_dataset
    from kjax.parallel.mesh import put_batch

    base = _common.preset_config(args.data_preset, 128, args.batch)
    seq, preds = base.data.max_seq_len, base.data.max_predictions_per_seq
    shake = ["--config.model.shake_factor=1.0", "--config.shake.variant=random"] \
        if args.shake else []
    data = [f"--config.data.dir={args.data}", f"--config.data.max_seq_len={seq}",
            f"--config.data.max_predictions_per_seq={preds}"] + shake
    loader_cfg = _common.preset_config(args.data_preset, seq, args.batch, extra=data)
    iterator = iter(train_dataset(loader_cfg))
    next(iterator)  # start the reader threads, open the shards

    steps = {}
    for name in args.models.split(","):
        cfg = _common.preset_config(name, seq, args.batch, args.dtype, extra=data[1:])
        fn, state, mesh = _common.train_step(cfg)
        batch = put_batch(_common.synthetic_batch(cfg, np.random.default_rng(0)), mesh)
        state, m = fn(state, batch)
        jax.block_until_ready(m)
        steps[name] = {"fn": fn, "state": state, "batch": batch, "mesh": mesh,
                       "step": [], "loop": []}

    load_before = _common.load_average()
    loader = []
    for r in range(args.rounds):
        loader.append(loader_rate(iterator, args.batches, args.batch))
        for name, s in steps.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                s["state"], m = s["fn"](s["state"], s["batch"])
            jax.block_until_ready((s["state"], m))
            s["step"].append(args.steps * args.batch / (time.perf_counter() - start))
            start = time.perf_counter()
            for _ in range(args.steps):  # the trainer's loop body
                s["state"], m = s["fn"](s["state"], put_batch(next(iterator), s["mesh"]))
            jax.block_until_ready((s["state"], m))
            s["loop"].append(args.steps * args.batch / (time.perf_counter() - start))
        print(f"round {r}: loader {loader[-1]:.0f} ex/s; " + "; ".join(
            f"{n} step {s['step'][-1]:.0f} ex/s, loop {s['loop'][-1]:.0f} ex/s"
            for n, s in steps.items()), flush=True)
    supply = statistics.median(loader)
    lines = ["| consumer | dtype | seq | batch | step ex/s | loader ex/s | loader ÷ step "
             "| loop ex/s (loader → step) | loop ÷ step |", "|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for name, s in steps.items():
        need, loop = statistics.median(s["step"]), statistics.median(s["loop"])
        lines.append(f"| {name} train step | {args.dtype} | {seq} | {args.batch} | {need:.0f} "
                     f"| {supply:.0f} | {supply / need:.1f}× | {loop:.0f} | {loop / need:.2f} |")
        verdicts.append(f"{name}: {supply / need:.1f}× ({'holds' if supply / need >= 5 else 'MISSED'})")
    notes = (f"Loader: {args.data} (preset {args.data_preset}), dynamic masking"
             f"{', B built per example (random variant)' if args.shake else ''}, grain with 2 "
             f"reader threads, {args.rounds} rounds × {args.batches} batches, medians. Target "
             f"loader ≥ 5× step: " + "; ".join(verdicts) +
             f". Load average before/after: {load_before} / {_common.load_average()}.")
    _common.record("input", "\n".join(lines), notes, args.no_record)


if __name__ == "__main__":
    main()
