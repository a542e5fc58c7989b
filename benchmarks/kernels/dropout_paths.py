"""The attention-dropout paths side by side, one layer fwd + bwd, bf16 on a
GPU: kjax's explicit path and its flash kernel (both drawing kjax's hashed
keep bits, kjax/model/dropout_hash.py) against cuDNN's own fused dropout
(jax's cuDNN attention with `dropout_rate`), and cuDNN without dropout as
the floor.

cuDNN's dropout is not kjax's: its bits come from cuDNN's Philox generator
seeded by a *static* seed, and XLA advances the generator's offset on every
execution of the program (xla/stream_executor/cuda/cuda_dnn.h,
`UpdateDropoutState`), so its masks depend on how many steps this process
ran — not a function of (seed, step), and a resumed run would draw other
masks. Each cuDNN case runs in a child process of its own, because cuDNN's
dropout has aborted the whole process on an H200 (jax 0.11.2: "Check failed:
local_device_ordinal.has_value()", reached when XLA replays the kernel from
a CUDA command buffer, where the device ordinal is not passed); the second
child runs with XLA's command buffers off (`--xla_gpu_enable_command_buffer=`)
to see whether that is the cause. Each child also answers two questions:
does one program run twice give two different results (the offset moves per
execution), and do two calls in one program draw the same mask.

    python benchmarks/kernels/dropout_paths.py               # seq 512, 2048; records
    JAX_PLATFORMS=cpu python benchmarks/kernels/dropout_paths.py --tiny --no-record

Rows: benchmarks/results/attention.jsonl ("dropout paths: ...").
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import records  # noqa: E402

NO_COMMAND_BUFFERS = "--xla_gpu_enable_command_buffer="
CHILD_LIMIT_S = 90


def child(impl: str, seq: int, tokens: int, steps: int, rate: float) -> dict:
    """One path timed in this process: {"ms", and for cuDNN "repeat_differs", "calls_same"}."""
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np
    from kjax.model import dropout_hash
    from kjax.model.attention import explicit_attention
    from kjax.model.attention_core import fused_attention
    gpu = jax.default_backend() == "gpu"
    dtype = jnp.bfloat16 if gpu else jnp.float32
    b, h, d = max(1, tokens // seq), 12, 64
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(b, seq, h, d)) / 4, dtype) for _ in range(3))
    valid = jnp.ones((b, seq), jnp.int32)
    words = dropout_hash.key_words(jax.random.key(0))

    def attend(q, k, v, seed=0):
        if impl == "cudnn":
            from jax._src.cudnn.fused_attention_stablehlo import dot_product_attention
            return dot_product_attention(q, k, v, scale=1.0, dropout_rate=rate, seed=seed)
        if impl == "flash":
            drop = dict(rate=rate, words=words, broadcast=False) if rate else None
            return fused_attention("flash", q, k, v, valid, dropout=drop)
        hashed = (lambda p: dropout_hash.dropout(p, words, rate)) if rate else None
        return explicit_attention(q, k, v, valid, dropout=hashed, logits_dtype=q.dtype)[0]

    step = jax.jit(jax.value_and_grad(lambda q, k, v: attend(q, k, v).astype(jnp.float32).sum(),
                                      (0, 1, 2)))
    first = jax.block_until_ready(step(q, k, v))
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        jax.block_until_ready(step(q, k, v))
        times.append(time.perf_counter() - t)
    out = {"ms": round(1e3 * float(np.median(times)), 3), "batch": b}
    if impl == "cudnn" and rate:
        again = step(q, k, v)
        out["repeat_differs"] = bool(float(jnp.abs(first[1][0] - again[1][0]).max()) > 0)
        pair = jax.jit(lambda q, k, v: (attend(q, k, v), attend(q, k, v)))(q, k, v)
        out["calls_same"] = bool(float(jnp.abs(pair[0] - pair[1]).max()) == 0)
    return out


def run_child(impl, seq, tokens, steps, rate, flags: str | None) -> dict:
    env = dict(os.environ)
    if flags:
        env["XLA_FLAGS"] = " ".join(filter(None, (env.get("XLA_FLAGS"), flags)))
    cmd = [sys.executable, os.path.abspath(__file__), "--child",
           json.dumps([impl, seq, tokens, steps, rate])]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=CHILD_LIMIT_S)
    except subprocess.TimeoutExpired:
        return {"status": f"cut off after {CHILD_LIMIT_S} s"}
    last = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode == 0 and last:
        return {"status": "ok", **json.loads(last[-1])}
    why = [line for line in p.stderr.splitlines() if "Check failed" in line or "Error" in line]
    tail = (why or p.stderr.strip().splitlines() or ["no output"])[-1]
    return {"status": f"exit {p.returncode}: {tail.strip()[:160]}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--seqs", default="512,2048")
    ap.add_argument("--tokens", type=int, default=16384, help="batch × seq per call")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rate", type=float, default=0.1)
    ap.add_argument("--tiny", action="store_true", help="CPU sizes: checks the script")
    records.add_arguments(ap)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*json.loads(args.child))), flush=True)
        return
    import jax
    gpu = jax.default_backend() == "gpu"
    seqs = [64] if args.tiny else [int(s) for s in args.seqs.split(",")]
    tokens, steps = (128, 1) if args.tiny else (args.tokens, args.steps)
    cases = [("cudnn", 0.0, None, "cuDNN, no dropout (the floor)"),
             ("xla", args.rate, None, "explicit path, kjax's hashed bits"),
             ("flash", args.rate, None, "flash kernel, kjax's hashed bits"),
             ("cudnn", args.rate, None, "cuDNN's own dropout"),
             ("cudnn", args.rate, NO_COMMAND_BUFFERS, "cuDNN's own dropout, command buffers off")]
    print("| path | seq | batch | fwd+bwd ms | ÷ cuDNN no dropout | status | a 2nd run of the "
          "program differs | 2 calls, same mask |\n|---|---|---|---|---|---|---|---|",
          flush=True)
    rows = []
    for seq in seqs:
        floor = None
        for impl, rate, flags, name in cases:
            if impl == "cudnn" and not gpu:
                print(f"| {name} | {seq} | | | | skipped: needs a GPU | | |", flush=True)
                continue
            r = run_child(impl, seq, tokens, steps, rate, flags)
            ms = r.get("ms")
            floor = ms if impl == "cudnn" and not rate and ms else floor
            ratio = f"{ms / floor:.2f}×" if ms and floor else "–"
            yes = lambda key: {True: "yes", False: "no"}.get(r.get(key), "–")  # noqa: E731
            print(f"| {name} | {seq} | {r.get('batch', '')} | {ms if ms else '–'} | {ratio} | "
                  f"{r['status']} | {yes('repeat_differs')} | {yes('calls_same')} |", flush=True)
            fig = {k: r[k] for k in ("ms", "repeat_differs", "calls_same") if k in r}
            if ms and floor:
                fig["vs_cudnn_no_dropout"] = round(ms / floor, 3)
            fig["ran"] = r["status"] == "ok"   # an abort is a finding too
            rows.append({"row": f"dropout paths: {name}", "status": r["status"],
                         "shape": {"seq": seq, "batch": r.get("batch"), "heads": 12,
                                   "head_dim": 64, "dtype": "bfloat16" if gpu else "float32",
                                   "attention_dropout": rate},
                         "xla_flags": flags or "", "figures": fig})
    if not args.tiny:
        records.save(args, "attention", rows,
                     notes=f"one layer fwd+bwd, median of {steps} runs after the first; "
                           "each path in a child process of its own")


if __name__ == "__main__":
    main()
