"""What verified checkpoints cost (kjax/checkpoint/fingerprint.py): a save and a
restore of the BERT-base train state (params + AdamW moments, 1.3 GB in
float32), with fingerprints and without, taking turns in the same run.

    python benchmarks/system/checkpoint.py            # BERT-base, 3 rounds
    python benchmarks/system/checkpoint.py --shape uknow_small --rounds 5 --no-record

Columns: `save` is the time the training loop is blocked in
Checkpointer.save (fingerprints are only started there: zero-copy views or
device dispatches), `committed` adds the wait until orbax has committed the
step (the whole checkpoint time; the sums run on a second thread meanwhile
and the record waits for them), `restore` reads and places every array
(and, when verified, sums them again and compares). "Without" is the same Checkpointer
with the fingerprint functions replaced by no-ops. `fingerprint` times the
sums alone. Records: benchmarks/results/checkpoint.jsonl.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import records  # noqa: E402


def run_round(ckpt_dir, state, target, step, fingerprints: bool) -> dict:
    import jax
    from kjax.checkpoint import fingerprint, manager
    real = (fingerprint.PendingSums, fingerprint.restored_sums)
    if not fingerprints:
        class NoSums:
            def __init__(self, tree):
                pass

            def result(self):
                return {}
        fingerprint.PendingSums, fingerprint.restored_sums = NoSums, lambda tree: {}
    try:
        ckpt = manager.Checkpointer(ckpt_dir, 1, 1)
        start = time.perf_counter()
        ckpt.save(step, state, {"next_index": step}, force=True)
        blocked = time.perf_counter() - start
        ckpt.close()
        committed = time.perf_counter() - start
        ckpt = manager.Checkpointer(ckpt_dir, 1, 1, read_only=True)
        start = time.perf_counter()
        restored, _ = ckpt.restore(step, target)
        jax.block_until_ready(restored)
        restore = time.perf_counter() - start
        ckpt.abandon()
    finally:
        fingerprint.PendingSums, fingerprint.restored_sums = real
    return {"save": blocked, "committed": committed, "restore": restore}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="bert_base", choices=sorted(harness.SHAPES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp folder)")
    records.add_arguments(ap)
    args = ap.parse_args()
    import jax
    from kjax.checkpoint import fingerprint
    from kjax.parallel.mesh import make_mesh
    from kjax.train.state import abstract_state, init_state, make_model, make_optimizer
    preset = "bert_base" if args.shape == "bert_base" else "uknow_small"
    config = harness.preset_config(preset, 128, 8, "float32", ["--config.mesh.data=1"])
    mesh = make_mesh(config, jax.devices()[:1])
    model, tx = make_model(config, False), make_optimizer(config.train)
    state, _ = init_state(config, mesh, model, tx)
    target, _ = abstract_state(config, mesh, model, tx)
    nbytes = sum(x.nbytes for x in jax.tree.leaves(state))
    root = args.dir or tempfile.mkdtemp(prefix="kjax-ckpt-bench-")
    fp_times, load_before = [], harness.load_average()

    def side(verified: bool):
        d = os.path.join(root, f"{'with' if verified else 'without'}")

        def run(_steps):
            shutil.rmtree(d, ignore_errors=True)
            return run_round(d, state, target, len(fp_times) + 1, verified)
        return run

    def sums_alone(r, got):
        start = time.perf_counter()
        fingerprint.partial_sums(state)
        fp_times.append(time.perf_counter() - start)
    try:
        from kjax.checkpoint.manager import all_finite
        all_finite(state["params"])  # warm-up: the NaN guard's eager ops compile once
        fingerprint.partial_sums(state)
        # which variant goes first alternates from round to round
        runs = harness.alternate({True: side(True), False: side(False)}, args.rounds, 1,
                                 sums_alone, swap=True)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    keys = ("save", "committed", "restore")
    med = {v: {k: statistics.median(x[k] for x in runs[v]) for k in keys} for v in runs}
    # Paired by round (the two variants ran back to back), then the median.
    paired = {k: statistics.median(w[k] - wo[k] for w, wo in zip(runs[True], runs[False]))
              for k in keys}
    fp = statistics.median(fp_times)
    rows = ["| | save (blocked) s | committed s | restore s |", "|---|---|---|---|"]
    for v, name in ((False, "without fingerprints"), (True, "with fingerprints")):
        m = med[v]
        rows.append(f"| {name} | {m['save']:.3f} | {m['committed']:.3f} | {m['restore']:.3f} |")
    rows.append("| paired difference, s | " + " | ".join(f"{paired[k]:+.3f}" for k in keys)
                + " |")
    rows.append("| … of the checkpoint time | " + " | ".join(
        f"{paired[k] / med[False]['committed' if k != 'restore' else 'restore']:+.1%}"
        for k in keys) + " |")
    notes = (f"{args.shape}: {nbytes / 1e9:.2f} GB of state ({len(jax.tree.leaves(state))} "
             f"arrays), {args.rounds} rounds per variant, medians; the differences are "
             f"medians of per-round pairs. The training loop pays the blocked-save "
             f"difference ({paired['save'] * 1e3:+.0f} ms = "
             f"{paired['save'] / med[False]['committed']:+.1%} of the checkpoint time; budget "
             f"2 %); the sums themselves ({fp * 1e3:.0f} ms alone, "
             f"{fp / med[False]['committed']:.1%} of it) run on a second thread while orbax "
             f"writes. A restore verifies synchronously: +{fp * 1e3:.0f} ms, "
             f"{fp / med[False]['restore']:.1%} of the restore. Committed and restore times are "
             f"disk-bound and noisy on a shared machine.")
    print("\n".join(rows) + "\n" + notes)
    found = [{"row": name, "figures": {f"{k}_s": round(med[v][k], 3) for k in keys}}
             for v, name in ((False, "without fingerprints"), (True, "with fingerprints"))]
    found.append({"row": "paired difference", "figures": {
        **{f"{k}_s": round(paired[k], 3) for k in keys},
        "sums_alone_s": round(fp, 3), "state_gb": round(nbytes / 1e9, 2)}})
    records.save(args, "checkpoint", found, load_before=load_before, notes=notes,
                 preset=preset)


if __name__ == "__main__":
    main()
