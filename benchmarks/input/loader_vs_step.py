"""Input pipeline throughput vs what the train step consumes.

    python benchmarks/input/loader_vs_step.py        # runs/demo_data, batch 32, seq 128
    python benchmarks/input/loader_vs_step.py --shake   # + the Eq. 1 matrix B (random variant)
    python benchmarks/input/loader_vs_step.py --data runs/uknow_small_data/examples \\
        --models uknow_small

Measures, alternating in one invocation (rounds):
  loader   examples/s of kjax.batches.loader.train_dataset (grain: ArrayRecord
           reads, shuffle, dynamic masking, padding, batching; its 2 reader
           threads and prefetch) drawn with nothing else running;
  step     examples/s of the kjax train step on a device-resident batch of
           the same shape, for each model in --models;
  loop     examples/s of the trainer's loop body: next(loader) → put_batch →
           step (dispatch is asynchronous, so the loader works while the
           step runs — on a CPU both share the same cores).
The loader should stay several times ahead of the step. Needs prepared data
(`kjax demo` or `kjax prepare --config tpu_configs/demo.py` writes
runs/demo_data). One record per model (benchmarks/results/input.jsonl).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import records  # noqa: E402


def loader_rate(iterator, batches: int, batch: int) -> float:
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch / (time.perf_counter() - start)


class Consumer:
    """A model's train step, timed on its device-resident batch (`run`) and
    in the trainer's loop body, fed by the loader (`loop`)."""

    def __init__(self, config, iterator):
        self.step, self.iterator = harness.Step(config), iterator

    def run(self, steps: int) -> tuple[float, float]:
        import jax
        batch = self.step.config.train.batch_size
        alone = batch / self.step.run(steps)
        start = time.perf_counter()
        for _ in range(steps):  # the trainer's loop body
            metrics = self.step.feed(next(self.iterator))
        jax.block_until_ready(metrics)
        return alone, steps * batch / (time.perf_counter() - start)


class Loader:
    def __init__(self, iterator, batches: int, batch: int):
        self.iterator, self.batches, self.batch = iterator, batches, batch

    def run(self, _steps: int) -> float:
        return loader_rate(self.iterator, self.batches, self.batch)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.path.join(harness.ROOT, "runs", "demo_data", "examples"))
    ap.add_argument("--data-preset", default="demo", help="the preset the data was prepared with")
    ap.add_argument("--models", default="demo,uknow_small")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--shake", action="store_true", help="build B (shake.variant=random)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=20, help="loader batches per round")
    ap.add_argument("--steps", type=int, default=3, help="steps per model per round")
    ap.add_argument("--dtype", default="float32")
    records.add_arguments(ap)
    args = ap.parse_args()
    from kjax.batches.loader import train_dataset

    base = harness.preset_config(args.data_preset, 128, args.batch)
    seq, preds = base.data.max_seq_len, base.data.max_predictions_per_seq
    shake = ["--config.model.shake_factor=1.0", "--config.shake.variant=random"] \
        if args.shake else []
    data = [f"--config.data.dir={args.data}", f"--config.data.max_seq_len={seq}",
            f"--config.data.max_predictions_per_seq={preds}"] + shake
    loader_cfg = harness.preset_config(args.data_preset, seq, args.batch, extra=data)
    iterator = iter(train_dataset(loader_cfg))
    next(iterator)  # start the reader threads, open the shards
    sides = {"loader": Loader(iterator, args.batches, args.batch)}
    for name in args.models.split(","):
        sides[name] = Consumer(harness.preset_config(name, seq, args.batch, args.dtype,
                                                     extra=data[1:]), iterator)
    load_before = harness.load_average()

    def on_round(r, got):
        print(f"round {r}: loader {got['loader'][-1]:.0f} ex/s; " + "; ".join(
            f"{n} step {v[-1][0]:.0f} ex/s, loop {v[-1][1]:.0f} ex/s"
            for n, v in got.items() if n != "loader"), flush=True)
    got = harness.alternate(sides, args.rounds, args.steps, on_round)
    supply = statistics.median(got.pop("loader"))
    lines = ["| consumer | dtype | seq | batch | step ex/s | loader ex/s | loader ÷ step "
             "| loop ex/s (loader → step) | loop ÷ step |", "|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for name, rates in got.items():
        need = statistics.median(r[0] for r in rates)
        loop = statistics.median(r[1] for r in rates)
        lines.append(f"| {name} train step | {args.dtype} | {seq} | {args.batch} | {need:.0f} "
                     f"| {supply:.0f} | {supply / need:.1f}× | {loop:.0f} | {loop / need:.2f} |")
        rows.append({"row": f"{name} train step", "preset": name, "figures": {
            "step_examples_per_s": round(need, 1), "loader_examples_per_s": round(supply, 1),
            "loader_vs_step": round(supply / need, 2), "loop_examples_per_s": round(loop, 1),
            "loop_vs_step": round(loop / need, 3)}})
    notes = (f"Loader: {os.path.relpath(args.data, harness.ROOT)} (preset {args.data_preset}), "
             f"dynamic masking{', B built per example (random variant)' if args.shake else ''}, "
             f"grain with 2 reader threads, {args.rounds} rounds × {args.batches} batches, "
             "medians.")
    print("\n".join(lines) + "\n" + notes)
    records.save(args, "input", rows, load_before=load_before, notes=notes,
                 shape={"seq": seq, "batch": args.batch, "dtype": args.dtype})


if __name__ == "__main__":
    main()
