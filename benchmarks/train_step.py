"""Train-step throughput: tokens/s, step time and MFU of kjax presets on
synthetic batches (no input pipeline in the loop), on whatever devices JAX
sees. Prints a table and appends a dated, machine-described record to
docs/PERFORMANCE.md (pass --no-record to skip).

    python benchmarks/train_step.py --preset uknow_small --seq 128 --batch 32
    python benchmarks/train_step.py --preset demo --seq 128 --batch 32

MFU counts bidirectional attention FLOPs (kjax.train.step.flops_per_example)
against the device's datasheet peak, or on CPU the matmul FLOP/s measured
in the same run.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import time

import jax
import numpy as np

from kjax.config import load_config
from kjax.parallel.mesh import make_mesh, put_batch
from kjax.train.metrics import peak_flops
from kjax.train.state import init_state, make_model, make_optimizer
from kjax.train.step import flops_per_example, make_train_step

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def synthetic_batch(config, rng):
    b, s, p, v = (config.train.batch_size, config.data.max_seq_len,
                  config.data.max_predictions_per_seq, config.model.vocab_size)
    return {"input_ids": rng.integers(5, v, (b, s)).astype(np.int32),
            "token_type_ids": (np.arange(s) >= s // 2).astype(np.int32)[None].repeat(b, 0),
            "attention_mask": np.ones((b, s), np.int32),
            "mlm_positions": np.sort(rng.choice(s, (b, p)), -1).astype(np.int32),
            "mlm_ids": rng.integers(5, v, (b, p)).astype(np.int32),
            "mlm_weights": np.ones((b, p), np.float32),
            "nsp_labels": rng.integers(0, 2, b).astype(np.int32),
            "nsp_weights": np.ones(b, np.float32)}


def measure(config, steps: int, warmup: int) -> dict:
    mesh = make_mesh(config)
    model, tx = make_model(config, deterministic=False), make_optimizer(config.train)
    state, shardings = init_state(config, mesh, model, tx)
    step = make_train_step(config, mesh, model, tx, shardings)
    batch = put_batch(synthetic_batch(config, np.random.default_rng(0)), mesh)
    start = time.perf_counter()
    state, m = step(state, batch)
    jax.block_until_ready(m)
    compile_s = time.perf_counter() - start
    for _ in range(warmup):
        state, m = step(state, batch)
    jax.block_until_ready(m)
    start = time.perf_counter()
    for _ in range(steps):
        state, m = step(state, batch)
    jax.block_until_ready(m)
    step_s = (time.perf_counter() - start) / steps
    peak, source = peak_flops(config)
    flops = flops_per_example(config.model, config.data.max_seq_len,
                              config.data.max_predictions_per_seq) * config.train.batch_size
    return {"compile_s": compile_s, "step_s": step_s,
            "tokens_per_s": config.train.batch_size * config.data.max_seq_len / step_s,
            "tflops": flops / step_s / 1e12, "mfu": flops / step_s / peak,
            "peak_tflops": peak / 1e12, "peak_source": source}


def machine() -> str:
    d = jax.devices()
    return (f"{platform.node() or 'host'}: {os.cpu_count()} CPU cores, {len(d)}× "
            f"{d[0].device_kind} ({d[0].platform}), jax {jax.__version__}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", action="append", default=None,
                    help="tpu_configs/<preset>.py (repeatable; default demo and uknow_small)")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtype", default=None, help="compute dtype (default: the preset's)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    rows = []
    for preset in args.preset or ["demo", "uknow_small"]:
        overrides = [f"--config.data.max_seq_len={args.seq}", f"--config.train.batch_size={args.batch}",
                     "--config.train.num_steps=1000", "--config.train.warmup_steps=10",
                     f"--config.data.max_predictions_per_seq={max(1, round(args.seq * 0.15))}"]
        if args.dtype:
            overrides.append(f"--config.model.dtype={args.dtype}")
        config = load_config(os.path.join(ROOT, "tpu_configs", f"{preset}.py"), overrides)
        rows.append((preset, config.model.dtype, measure(config, args.steps, args.warmup)))
    header = (f"| preset | dtype | seq | batch | compile s | step ms | tokens/s | TFLOP/s | "
              f"MFU | peak |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [f"| {p} | {dt} | {args.seq} | {args.batch} | {r['compile_s']:.1f} | "
             f"{1000 * r['step_s']:.1f} | {r['tokens_per_s']:.0f} | {r['tflops']:.3f} | "
             f"{r['mfu']:.1%} | {r['peak_tflops']:.3f} TFLOP/s ({r['peak_source']}) |"
             for p, dt, r in rows]
    table = "\n".join([header, *lines])
    print(table)
    if not args.no_record:
        stamp = datetime.date.today().isoformat()
        with open(os.path.join(ROOT, "docs", "PERFORMANCE.md"), "a", encoding="utf-8") as f:
            f.write(f"\n### train_step — {stamp} — {machine()}\n\n{table}\n")


if __name__ == "__main__":
    main()
