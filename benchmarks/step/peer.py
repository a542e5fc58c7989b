"""kjax vs the peer a JAX user would otherwise pick: HF transformers 4.57
`FlaxBertForPreTraining` (the last transformers with Flax), same pretraining
step, run alternately in one invocation; prints tokens/s of each and the
ratio kjax/peer, and writes one record per side (benchmarks/results/peer.jsonl).

    python benchmarks/step/peer.py                    # UKNOW-small, seq 128, batch 32
    python benchmarks/step/peer.py --shape bert_base --batch 8
    python benchmarks/step/peer.py --shape bert_base --seq 512 --batch 32 --dtype bfloat16

Identical on both sides: layers/hidden/heads/FFN, vocabulary 32000, seq,
batch, 15% MLM predictions, dropout 0.1, compute dtype (fp32 parameters),
the optax chain (global-norm clip 1.0 + AdamW, decay on kernels and
embeddings, warmup + linear decay), a jitted step that donates its state.
What differs is the model code: kjax gathers the masked positions before the
vocabulary projection and scans over layers; the peer computes MLM logits at
every position, as HF's model does.

The peer runs in its own virtual environment (default runs/peer_venv, made
on first use with `pip install transformers==4.57.* jax==<this jax> flax
optax`) as a subprocess (benchmarks/harness/flax_bert_worker.py) that
answers "run N steps" with its seconds per step, so each round times kjax
then the peer under the same machine load. Reported: the median over rounds
and the range of per-round ratios. MFU of both sides counts the same useful
work (kjax's FLOPs: MLM logits at the masked positions only).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import peers, records  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="uknow_small", choices=sorted(harness.SHAPES))
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtype", default="float32",
                    help="compute dtype on both sides (float32 default: CPUs lack bf16 matmul)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3, help="steps per side per round")
    ap.add_argument("--venv", default=peers.FLAX_VENV)
    ap.add_argument("--kjax", action="append", metavar="LABEL=OVERRIDES",
                    help="a kjax side: a label, '=', comma-separated --config.KEY=V on top of "
                    "the preset (repeatable; default one side, the preset)")
    records.add_arguments(ap)
    args = ap.parse_args()
    sides = [(label, [o for o in rest.split(",") if o]) for label, _, rest in
             (k.partition("=") for k in args.kjax or ["kjax="])]

    import jax
    config = harness.preset_config(args.shape, args.seq, args.batch, args.dtype)
    python = peers.ensure_flax_venv(args.venv, jax.__version__)
    load_before = harness.load_average()
    peer = peers.FlaxBertPeer(python, config)   # its own process compiles alongside kjax's sides
    mine = {}
    for label, extra in sides:   # compile every side before timing anything
        mine[label] = harness.Step(harness.preset_config(args.shape, args.seq, args.batch,
                                                         args.dtype, extra))
        print(f"ready: {label}: compile + first step "
              f"{mine[label].compile_s + mine[label].first_step_s:.1f} s", flush=True)
    print(f"ready: peer: compile + first step {peer.wait()['ready']:.1f} s", flush=True)
    times = harness.alternate({**mine, "peer": peer}, args.rounds, args.steps)
    peer.close()
    from kjax.train.peak_flops import peak_flops
    first = next(iter(mine.values()))
    peak = peak_flops(config)
    shape = {"seq": args.seq, "batch": args.batch, "dtype": config.model.dtype}
    v = peer.ready["versions"]
    peer_versions = {f"peer {k}": val for k, val in v.items()}
    lines = ["| side | versions | shape | dtype | seq | batch | compile + first step s "
             "| step ms (median) | tokens/s | MFU | first loss |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    rows, notes = [], []
    for label, extra in sides:
        step = mine[label]
        fig = {**step.figures(statistics.median(times[label]), peak),
               **harness.compare(times, label, "peer")}
        rows.append({"row": label, "preset": args.shape, "shape": shape,
                     "overrides": harness.overrides_of(extra), "figures": fig})
        lines.append(f"| {label} | jax {jax.__version__} | {args.shape} | {shape['dtype']} | "
                     f"{args.seq} | {args.batch} | {fig['compile_s'] + fig['first_step_s']:.1f} "
                     f"| {fig['ms']:.1f} | {fig['tokens_per_s']} | {fig['mfu']:.1%} "
                     f"| {fig['first_loss']:.3f} |")
        notes.append(f"{label}/peer tokens/s = **{fig['ratio_vs_peer']:.2f}×** (per-round "
                     f"{fig['ratio_low']:.2f}–{fig['ratio_high']:.2f}×).")
    peer_ms = statistics.median(times["peer"])
    peer_fig = {"ms": round(1000 * peer_ms, 2),
                "tokens_per_s": round(args.batch * args.seq / peer_ms),
                "mfu": round(first.flops() / peer_ms / peak[0], 4),
                "ready_s": round(peer.ready["ready"], 1), "first_loss": round(peer.ready["loss"], 3)}
    rows.append({"row": peers.FlaxBertPeer.name, "preset": args.shape, "shape": shape,
                 "overrides": [], "figures": peer_fig})
    lines.append(f"| {peers.FlaxBertPeer.name} | transformers {v['transformers']}, jax {v['jax']},"
                 f" flax {v['flax']} | {args.shape} | {shape['dtype']} | {args.seq} | {args.batch} "
                 f"| {peer_fig['ready_s']:.1f} | {peer_fig['ms']:.1f} | {peer_fig['tokens_per_s']} "
                 f"| {peer_fig['mfu']:.1%} | {peer_fig['first_loss']:.3f} |")
    notes = " ".join(notes) + (f" {args.rounds} rounds × {args.steps} steps each side, "
                               "alternating.")
    print("\n".join(lines) + "\n" + notes, flush=True)
    records.save(args, "peer", rows, load_before=load_before, notes=notes,
                 extra_versions=peer_versions)


if __name__ == "__main__":
    main()
