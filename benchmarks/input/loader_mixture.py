"""The loader with and without a source mixture and a mask-rate schedule.

    python benchmarks/input/loader_mixture.py --data runs/demo_data/examples
    python benchmarks/input/loader_mixture.py --data DIR --sources 2,8 --rounds 5

Measures, alternating in one invocation (rounds), examples/s (wall) and
examples per CPU-second (this process and its reader threads) of
kjax.batches.loader.train_dataset, train.loader_workers=0, dynamic masking:

  one source       data.dir, as every run before mixtures
  mixture of N     data.sources: N sources (the same prepared folder N times,
                   each shuffled on its own seed), equal weights: grain's
                   MapDataset.mix selection, the source tag, the counters'
                   row keys
  mask schedule    one source, data.mask_schedule=linear 0.3 → 0.15 (the
                   rate of each record's step; slots for 30 %)

The shape (seq, slots, vocabulary) is the prepared folder's (its meta.json).
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


def config(args, extra: dict):
    from kjax.config import load_config
    from kjax.examples.records import read_meta
    meta = read_meta(args.data)
    keys = {"data.dir": args.data, "data.max_seq_len": meta["max_seq_len"],
            "data.max_predictions_per_seq": meta["max_predictions_per_seq"],
            "model.vocab_size": meta["vocab_size"], "train.batch_size": args.batch,
            "data.mask_unit": meta.get("mask_unit", "eojeol"), "data.masking": "dynamic",
            "train.num_steps": 10_000, "train.warmup_steps": 100, **extra}
    return load_config(os.path.join(harness.ROOT, "tpu_configs", "demo.py"),
                       [f"--config.{k}={v}" for k, v in keys.items()])


def drain(iterator, batches: int, batch: int) -> tuple[float, float]:
    """(examples/s wall, examples per CPU-second) of `batches` batches."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(batches):
        next(iterator)
    n = batches * batch
    return n / (time.perf_counter() - wall), n / (time.process_time() - cpu)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.path.join(harness.ROOT, "runs", "demo_data", "examples"))
    ap.add_argument("--sources", default="2,8", help="mixtures of this many sources")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=30, help="batches per round and row")
    records.add_arguments(ap)
    args = ap.parse_args()
    args.data = os.path.abspath(args.data)
    from kjax.batches.loader import train_dataset

    rows = {"one source": {}}
    for n in map(int, args.sources.split(",")):
        rows[f"mixture of {n} sources"] = {"data.sources": {
            f"s{i}": {"dir": args.data, "weight": 1.0} for i in range(n)}}
    seq = config(args, {}).data.max_seq_len
    rows["mask schedule 0.3 → 0.15"] = {
        "data.mask_schedule": "linear", "data.masked_lm_prob": 0.3,
        "data.final_masked_lm_prob": 0.15,
        "data.max_predictions_per_seq": max(int(round(0.3 * (seq - 3))),
                                            config(args, {}).data.max_predictions_per_seq)}
    sides = {}
    for name, extra in rows.items():
        it = iter(train_dataset(config(args, extra)))
        next(it)   # reader threads started, shards open
        sides[name] = lambda _, it=it: drain(it, args.batches, args.batch)
    load = harness.load_average()
    got = harness.alternate(sides, args.rounds, 1, lambda r, got: print(
        f"round {r}: " + "; ".join(f"{k} {v[-1][0]:.0f} ex/s" for k, v in got.items()),
        flush=True), swap=True)
    base = statistics.median(w for w, _ in got["one source"])
    lines = ["| loader | examples/s (wall) | examples per CPU-s | ÷ one source (wall) |",
             "|---|---|---|---|"]
    out = []
    for name, rates in got.items():
        wall, cpu = (statistics.median(r[i] for r in rates) for i in (0, 1))
        lines.append(f"| {name} | {wall:.0f} | {cpu:.0f} | {wall / base:.2f} |")
        out.append({"row": f"loader: {name}", "figures": {
            "examples_per_s": round(wall, 1), "examples_per_cpu_s": round(cpu, 1),
            "vs_one_source": round(wall / base, 3)}})
    notes = (f"Data: {os.path.relpath(args.data, harness.ROOT)} (seq {seq}), batch {args.batch}, dynamic masking, "
             f"train.loader_workers=0 (grain's 2 reader threads), {args.rounds} alternating "
             f"rounds × {args.batches} batches per row, medians.")
    print("\n".join(lines) + "\n" + notes)
    records.save(args, "loader", out, load_before=load, notes=notes,
                 shape={"seq": seq, "batch": args.batch})


if __name__ == "__main__":
    main()
