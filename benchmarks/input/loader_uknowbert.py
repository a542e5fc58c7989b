"""The loader on what UKnowBERT training really reads — multi-hot positions,
Eq. 7–9 targets, the three knowledge targets and B of Eq. 1 (pos variant) —
against the UKNOW-small train step that consumes it, on this CPU.

    kjax tokenizer train / kjax prepare with `kjax demo --uknowbert`'s overrides first
    (runs/demo_data_uknowbert), then:
    python benchmarks/input/loader_uknowbert.py [--workers 0,2] [--layout dense|pairs]

Measures, alternating in one invocation:
  transform  examples per CPU-second of the loader's per-example work
             (ToModelInputs: masking, multi-hot arrays, knowledge targets, B),
             one process, process CPU time (a fair figure on a shared machine);
  loader     examples/s (wall) of kjax.batches.loader.train_dataset with
             train.loader_workers = each of --workers (grain processes);
  step       examples/s of the UKNOW-small train step (uknowbert_s preset:
             multi-hot, NSP + knowledge heads, 4 layers × 256) on a batch of
             the same shape.
One record per row (benchmarks/results/loader.jsonl).
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

DATA = os.path.join(harness.ROOT, "runs", "demo_data_uknowbert")


def config(args, workers=0, preset="demo"):
    from kjax.cli import demo_overrides
    from kjax.config import load_config
    over = demo_overrides(None, True) + [
        f"--config.model.vocab_size={args.vocab}", "--config.model.shake_factor=0.3",
        "--config.shake.variant=pos", f"--config.shake.layout={args.layout}",
        f"--config.train.loader_workers={workers}", f"--config.train.batch_size={args.batch}"]
    return load_config(os.path.join(harness.ROOT, "tpu_configs", f"{preset}.py"), over)


def transform_rate(cfg, n: int) -> float:
    import grain
    import numpy as np
    from kjax.batches.loader import ToModelInputs
    from kjax.examples import records
    source = grain.sources.ArrayRecordDataSource(records.local_shards(cfg.data.dir, "train"))
    examples = [records.decode_example(source[i % len(source)]) for i in range(n)]
    transform, rng = ToModelInputs(cfg, True), np.random.default_rng(0)
    transform.random_map(examples[0], rng)     # resources opened, caches warm
    start = time.process_time()
    for example in examples:
        transform.random_map(example, rng)
    return n / (time.process_time() - start)


def drain(iterator, batches: int, batch: int) -> float:
    """Examples per second (wall) of `batches` batches drawn from the loader."""
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--layout", default="dense", choices=("dense", "pairs"))
    ap.add_argument("--vocab", type=int, default=1242, help="the prepared multihot vocabulary")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--steps", type=int, default=2)
    records.add_arguments(ap)
    args = ap.parse_args()
    from kjax.batches.loader import train_dataset

    base = config(args)
    seq = base.data.max_seq_len
    loaders = {}
    for w in map(int, args.workers.split(",")):
        it = iter(train_dataset(config(args, w)))
        next(it)   # workers started, shards open
        loaders[f"loader[{w}]"] = lambda _, it=it: drain(it, args.batches, args.batch)
    step_cfg = harness.preset_config("uknowbert_s", seq, args.batch, "float32", [
        "--config.model.vocab_size=32000", "--config.model.shake_factor=0.3",
        "--config.shake.variant=pos", f"--config.shake.layout={args.layout}",
        f"--config.data.max_predictions_per_seq={base.data.max_predictions_per_seq}"])
    step = harness.Step(step_cfg)
    load = harness.load_average()
    got = harness.alternate(
        {"transform": lambda _: transform_rate(base, 200), **loaders,
         "step": lambda n: args.batch / step.run(n)}, args.rounds, args.steps,
        lambda r, got: print(f"round {r}: " + "; ".join(
            f"{k} {v[-1]:.1f} ex/s" for k, v in got.items()), flush=True))
    transform, steps = got.pop("transform"), got.pop("step")
    need, per_cpu = statistics.median(steps), statistics.median(transform)
    lines = ["| what | examples/s | ÷ UKNOW-small step |", "|---|---|---|",
             f"| transform, per CPU-second (1 process) | {per_cpu:.0f} | {per_cpu / need:.0f}× |"]
    rows = [{"row": "transform, per CPU-second (1 process)",
             "figures": {"examples_per_s": round(per_cpu, 1), "vs_step": round(per_cpu / need, 1)}}]
    for w, rates in zip(args.workers.split(","), got.values()):
        rate = statistics.median(rates)
        lines.append(f"| loader, train.loader_workers={w} (wall) | {rate:.0f} | "
                     f"{rate / need:.0f}× |")
        rows.append({"row": f"loader, train.loader_workers={w} (wall)", "figures": {
            "examples_per_s": round(rate, 1), "vs_step": round(rate / need, 1)}})
    lines.append(f"| UKNOW-small train step (uknowbert_s, fp32) | {need:.1f} | 1× |")
    rows.append({"row": "UKNOW-small train step (uknowbert_s, fp32)", "preset": "uknowbert_s",
                 "figures": {"examples_per_s": round(need, 2), "vs_step": 1.0}})
    notes = (f"Data: {os.path.relpath(DATA, harness.ROOT)} (the demo corpus, `kjax demo "
             f"--uknowbert`'s preparation: multi-hot vocabulary of {args.vocab}, morpheme "
             f"masking, Eq. 7–9 targets, hypernym/sense/verb targets from the shipped samples), "
             f"B of the pos variant in the {args.layout} layout, rows of {seq} positions, batch "
             f"{args.batch}; {args.rounds} alternating rounds, medians.")
    print("\n".join(lines) + "\n" + notes)
    records.save(args, "loader", rows, load_before=load, notes=notes,
                 shape={"seq": seq, "batch": args.batch, "dtype": "float32"})


if __name__ == "__main__":
    main()
