"""The loader on what UKnowBERT training really reads — multi-hot positions,
Eq. 7–9 targets, the three knowledge targets and B of Eq. 1 (pos variant) —
against the UKNOW-small train step that consumes it, on this CPU.

    kjax tokenizer train / kjax prepare with `kjax demo --uknowbert`'s overrides first
    (runs/demo_data_uknowbert), then:
    python benchmarks/loader.py [--workers 0,2] [--layout dense|pairs]

Measures, alternating in one invocation:
  transform  examples per CPU-second of the loader's per-example work
             (ToModelInputs: masking, multi-hot arrays, knowledge targets, B),
             one process, process CPU time (a fair figure on a shared machine);
  loader     examples/s (wall) of kjax.batches.loader.train_dataset with
             train.loader_workers = each of --workers (grain processes);
  step       examples/s of the UKNOW-small train step (uknowbert_s preset:
             multi-hot, NSP + knowledge heads, 4 layers × 256) on a batch of
             the same shape.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import _common

DATA = os.path.join(_common.ROOT, "runs", "demo_data_uknowbert")


def config(args, workers=0, preset="demo"):
    from kjax.cli import demo_overrides
    from kjax.config import load_config
    over = demo_overrides(None, True) + [
        f"--config.model.vocab_size={args.vocab}", "--config.model.shake_factor=0.3",
        "--config.shake.variant=pos", f"--config.shake.layout={args.layout}",
        f"--config.train.loader_workers={workers}", f"--config.train.batch_size={args.batch}"]
    return load_config(os.path.join(_common.ROOT, "tpu_configs", f"{preset}.py"), over)


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
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    import jax
    import numpy as np
    from kjax.batches.loader import train_dataset
    from kjax.parallel.mesh import put_batch

    base = config(args)
    seq = base.data.max_seq_len
    loaders = {}
    for w in map(int, args.workers.split(",")):
        it = iter(train_dataset(config(args, w)))
        next(it)   # workers started, shards open
        loaders[w] = {"it": it, "rates": []}
    step_cfg = _common.preset_config("uknowbert_s", seq, args.batch, "float32", [
        "--config.model.vocab_size=32000", "--config.model.shake_factor=0.3",
        "--config.shake.variant=pos", f"--config.shake.layout={args.layout}",
        f"--config.data.max_predictions_per_seq={base.data.max_predictions_per_seq}"])
    fn, state, mesh = _common.train_step(step_cfg)
    batch = put_batch(_common.synthetic_batch(step_cfg, np.random.default_rng(0)), mesh)
    state, m = fn(state, batch)
    jax.block_until_ready(m)
    load = _common.load_average()
    transform, steps = [], []
    for r in range(args.rounds):
        transform.append(transform_rate(base, 200))
        for w, lo in loaders.items():
            start = time.perf_counter()
            for _ in range(args.batches):
                next(lo["it"])
            lo["rates"].append(args.batches * args.batch / (time.perf_counter() - start))
        state, per = _common.timed_steps(fn, state, batch, args.steps)
        steps.append(args.batch / per)
        print(f"round {r}: transform {transform[-1]:.0f} ex/CPU-s; " + "; ".join(
            f"loader[{w}] {lo['rates'][-1]:.0f} ex/s" for w, lo in loaders.items())
            + f"; step {steps[-1]:.1f} ex/s", flush=True)
    need, per_cpu = statistics.median(steps), statistics.median(transform)
    lines = ["| what | examples/s | ÷ UKNOW-small step |", "|---|---|---|",
             f"| transform, per CPU-second (1 process) | {per_cpu:.0f} | {per_cpu / need:.0f}× |"]
    for w, lo in loaders.items():
        rate = statistics.median(lo["rates"])
        lines.append(f"| loader, train.loader_workers={w} (wall) | {rate:.0f} | "
                     f"{rate / need:.0f}× |")
    lines.append(f"| UKNOW-small train step (uknowbert_s, fp32) | {need:.1f} | 1× |")
    notes = (f"Data: {DATA} (the demo corpus, `kjax demo --uknowbert`'s preparation: multi-hot "
             f"vocabulary of {args.vocab}, morpheme masking, Eq. 7–9 targets, hypernym/sense/"
             f"verb targets from the shipped samples), B of the pos variant in the {args.layout} "
             f"layout, rows of {seq} positions, batch {args.batch}; {args.rounds} alternating "
             f"rounds, medians. Load average before/after: {load} / "
             f"{_common.load_average()}.")
    _common.record("loader on UKnowBERT inputs", "\n".join(lines), notes, args.no_record)


if __name__ == "__main__":
    main()
