"""kjax vs the peer a JAX user would otherwise pick: HF transformers 4.57
`FlaxBertForPreTraining` (the last transformers with Flax), same pretraining
step, run alternately in one invocation; prints tokens/s of each and the
ratio kjax/peer.

    python benchmarks/peer.py                         # UKNOW-small, seq 128, batch 32
    python benchmarks/peer.py --shape bert_base --batch 8
    python benchmarks/peer.py --shape bert_base --seq 512 --batch 8 --dtype bfloat16

Identical on both sides: layers/hidden/heads/FFN, vocabulary 32000, seq,
batch, 15% MLM predictions, dropout 0.1, compute dtype (fp32 parameters),
the optax chain (global-norm clip 1.0 + AdamW, decay on kernels and
embeddings, warmup + linear decay), a jitted step that donates its state.
What differs is the model code: kjax gathers the masked positions before the
vocabulary projection and scans over layers; the peer computes MLM logits at
every position, as HF's model does.

The peer runs in its own virtual environment (default runs/peer_venv, made
on first use with `pip install transformers==4.57.* jax==<this jax> flax
optax`) as a subprocess (benchmarks/_peer_worker.py) that answers "run N
steps" with its seconds per step as JSON, so each round times kjax then the
peer under the same machine load. Reported: the median over rounds and the
range of per-round ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import _common

ROOT = _common.ROOT


def ensure_venv(path: str, jax_version: str) -> str:
    python = os.path.join(path, "bin", "python")
    if not os.path.exists(python):
        subprocess.run(["python3", "-m", "venv", path], check=True)
    probe = subprocess.run([python, "-c", "import transformers, flax, optax"],
                           capture_output=True)
    if probe.returncode:
        print(f"installing the peer into {path} ...", file=sys.stderr, flush=True)
        subprocess.run([python, "-m", "pip", "install", "-q", "transformers==4.57.*",
                        f"jax=={jax_version}", "flax", "optax"], check=True)
    return python


class Peer:
    def __init__(self, python: str, spec: dict):
        self.proc = subprocess.Popen(
            [python, os.path.join(ROOT, "benchmarks", "_peer_worker.py"), json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "")})
        self.ready = None   # wait(): the worker compiles while kjax's sides do

    def wait(self) -> dict:
        self.ready = self.ready or self._read()
        return self.ready

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the peer worker exited (rc {self.proc.wait()}); see stderr")
        return json.loads(line)

    def run(self, steps: int) -> float:
        self.proc.stdin.write(f"{steps}\n")
        self.proc.stdin.flush()
        return self._read()["step_s"]

    def close(self):
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        self.proc.wait(timeout=60)


class Kjax:
    def __init__(self, config):
        import jax
        import numpy as np
        from kjax.parallel.mesh import make_mesh, put_batch
        from kjax.train.state import init_state, make_model, make_optimizer
        from kjax.train.step import make_train_step
        mesh = make_mesh(config)
        model, tx = make_model(config, deterministic=False), make_optimizer(config.train)
        self.state, shardings = init_state(config, mesh, model, tx)
        self.step = make_train_step(config, mesh, model, tx, shardings)
        self.batch = put_batch(_common.synthetic_batch(config, np.random.default_rng(0)), mesh)
        start = time.perf_counter()
        self.state, m = self.step(self.state, self.batch)
        jax.block_until_ready((self.state, m))
        self.ready = {"ready": time.perf_counter() - start, "loss": float(m["loss"])}

    def run(self, steps: int) -> float:
        self.state, seconds = _common.timed_steps(self.step, self.state, self.batch, steps)
        return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="uknow_small", choices=sorted(_common.SHAPES))
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtype", default="float32",
                    help="compute dtype on both sides (float32 default: CPUs lack bf16 matmul)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3, help="steps per side per round")
    ap.add_argument("--venv", default=os.path.join(ROOT, "runs", "peer_venv"))
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--kjax", action="append", metavar="LABEL=OVERRIDES",
                    help="a kjax side: a label, '=', comma-separated --config.KEY=V on top of "
                    "the preset (repeatable; default one side, the preset)")
    args = ap.parse_args()
    sides = [(label, [o for o in rest.split(",") if o]) for label, _, rest in
             (k.partition("=") for k in args.kjax or ["kjax="])]

    import jax
    config = _common.preset_config(args.shape, args.seq, args.batch, args.dtype)
    m, o = config.model, config.train
    spec = {**{k: m[k] for k in ("vocab_size", "hidden_size", "num_layers", "num_heads",
                                 "intermediate_size", "max_position_embeddings",
                                 "dropout_rate", "attention_dropout_rate")},
            "batch": args.batch, "seq": args.seq, "dtype": m.dtype,
            "predictions": config.data.max_predictions_per_seq,
            "optimizer": {"lr": o.learning_rate, "warmup": o.warmup_steps, "steps": o.num_steps,
                          "clip": o.grad_clip_norm, "b1": o.b1, "b2": o.b2, "eps": o.eps,
                          "weight_decay": o.weight_decay}}
    python = ensure_venv(args.venv, jax.__version__)
    load_before = _common.load_average()
    peer = Peer(python, spec)    # its own process compiles alongside kjax's sides
    mine = {}
    for label, extra in sides:   # compile every side before timing anything
        mine[label] = Kjax(_common.preset_config(args.shape, args.seq, args.batch, args.dtype,
                                                 extra))
        print(f"ready: {label}: compile + first step {mine[label].ready['ready']:.1f} s",
              flush=True)
    print(f"ready: peer: compile + first step {peer.wait()['ready']:.1f} s", flush=True)
    times = {**{label: [] for label in mine}, "peer": []}
    for r in range(args.rounds):
        for label, side in mine.items():
            times[label].append(side.run(args.steps))
        times["peer"].append(peer.run(args.steps))
        print(f"round {r}: " + ", ".join(f"{k} {1000 * v[-1]:.1f} ms" for k, v in times.items()),
              flush=True)
    peer.close()
    tokens = args.batch * args.seq
    med = {k: statistics.median(v) for k, v in times.items()}
    # MFU of both sides counts the same useful work (kjax's FLOPs: MLM logits at
    # the masked positions only; the peer computes them everywhere, uncounted).
    from kjax.train.metrics import peak_flops
    from kjax.train.step import flops_per_example
    flops = flops_per_example(m, args.seq, config.data.max_predictions_per_seq) * args.batch
    peak = peak_flops(config)[0]
    mfu = {k: flops / t / peak for k, t in med.items()}
    v = peer.ready["versions"]
    table = "\n".join([
        "| side | versions | shape | dtype | seq | batch | compile s | step ms (median) "
        "| tokens/s | MFU | first loss |", "|---|---|---|---|---|---|---|---|---|---|---|",
        *[f"| {label} | jax {jax.__version__} | {args.shape} | {m.dtype} | {args.seq} "
          f"| {args.batch} | {side.ready['ready']:.1f} | {1000 * med[label]:.1f} "
          f"| {tokens / med[label]:.0f} | {mfu[label]:.1%} | {side.ready['loss']:.3f} |"
          for label, side in mine.items()],
        f"| HF FlaxBertForPreTraining | transformers {v['transformers']}, jax {v['jax']}, "
        f"flax {v['flax']} | {args.shape} | {m.dtype} | {args.seq} | {args.batch} "
        f"| {peer.ready['ready']:.1f} | {1000 * med['peer']:.1f} | {tokens / med['peer']:.0f} "
        f"| {mfu['peer']:.1%} | {peer.ready['loss']:.3f} |"])
    target = 1.5 if args.shape == "uknow_small" else 1.2
    notes = []
    for label in mine:
        ratio = med["peer"] / med[label]
        ratios = [p / k for k, p in zip(times[label], times["peer"])]
        notes.append(f"{label}/peer tokens/s = **{ratio:.2f}×** (per-round {min(ratios):.2f}–"
                     f"{max(ratios):.2f}×); target ≥ {target}×: "
                     f"{'holds' if ratio >= target else 'MISSED'}.")
    notes = (" ".join(notes) + f" {args.rounds} rounds × {args.steps} steps each side, "
             f"alternating. Load average before/after: {load_before} / {_common.load_average()}.")
    _common.record("peer", table, notes, args.no_record)


if __name__ == "__main__":
    main()
