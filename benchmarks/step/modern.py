"""The modern recipe (model.arch=modern) on this machine, three measurements,
each alternating its two sides in one invocation (rounds) so load drift hits
both alike:

    python benchmarks/step/modern.py arch      # modern vs BERT at equal parameters on the
                                               # demo corpus: tokens/s and eval MLM loss
                                               # after equal training time
    python benchmarks/step/modern.py peer      # kjax modern vs transformers 5
                                               # ModernBertForMaskedLM (PyTorch) train step,
                                               # same config, same batch
    python benchmarks/step/modern.py packing   # train.packing on vs off: real tokens/s
                                               # (loader → step), paragraphs as documents

`arch` and `packing` prepare their data under runs/bench_modern/ (the demo
corpus, embedded; the tokenizer is trained once). Each writes its records
to benchmarks/results/modern.jsonl (--no-record: print only).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import peers, records  # noqa: E402

WORK = os.path.join(harness.ROOT, "runs", "bench_modern")
# Equal encoder parameters: BERT's FFN 2·H·I = GeGLU's 3·H·I' with I' = 2/3 I.
ARCH_SIDES = {"bert": {"model.arch": "bert", "model.intermediate_size": 384},
              "modern": {"model.arch": "modern", "model.intermediate_size": 256}}


def demo_config(extra: dict):
    from kjax.config import load_config
    from kjax.config.presets import modern_overrides
    values = {**modern_overrides(128), "model.num_layers": 3, "model.local_attention": 32,
              "model.dtype": "float32", "tokenizer.path": f"{WORK}/tok/sp",
              "data.dir": f"{WORK}/examples", "train.num_steps": 100_000,
              "train.warmup_steps": 30, "train.learning_rate": 1e-3, **extra}
    return load_config(os.path.join(harness.ROOT, "tpu_configs", "demo.py"),
                       [f"--config.{k}={v}" for k, v in values.items()])


def prepared(config):
    from kjax import paths
    from kjax.pretrain.prepare import prepare
    from kjax.tokens.factory import tokenizer_file, train_tokenizer
    if not paths.isfile(tokenizer_file(config)):
        train_tokenizer(config)
    return prepare(config, progress=False)


def count_params(state) -> int:
    import jax
    return sum(x.size for x in jax.tree.leaves(state["params"]))


class Trained:
    """A side that trains on the loader's batches: `run(seconds)` trains for
    that long and counts real tokens, examples and steps."""

    def __init__(self, config, packing: bool = False):
        from kjax.batches.loader import train_dataset
        self.config, self.packing, self.it = config, packing, iter(train_dataset(config))
        self.step = harness.Step(config, batch=next(self.it))
        self.tokens = self.examples = self.steps = 0
        self.time = 0.0

    def train(self, batch):
        import numpy as np
        metrics = self.step.feed(batch)
        self.tokens += int(np.sum(batch["attention_mask"]))
        self.examples += int(np.sum(batch["segment_ids"].max(axis=1))) if self.packing \
            else len(batch["input_ids"])
        self.steps += 1
        return metrics

    def run(self, seconds: float) -> float:
        import jax
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            jax.block_until_ready(self.train(next(self.it)))
        self.time += time.perf_counter() - start
        return self.tokens / self.time

    def run_steps(self, steps: int) -> float:
        import jax
        start = time.perf_counter()
        for _ in range(steps):
            metrics = self.train(next(self.it))
        jax.block_until_ready(metrics)
        self.time += time.perf_counter() - start
        return self.tokens / self.time


def run_arch(args):
    import jax
    from kjax.batches.loader import eval_batches
    from kjax.parallel.mesh import put_batch
    from kjax.train.state import make_model
    from kjax.train.step import make_eval_step, summarize_eval
    prepared(demo_config(ARCH_SIDES["bert"]))
    sides = {name: Trained(demo_config(extra)) for name, extra in ARCH_SIDES.items()}
    load = harness.load_average()
    harness.alternate(sides, args.rounds, args.seconds, lambda r, got: print(
        f"round {r}: " + "; ".join(f"{n} {v[-1]:.0f} tok/s" for n, v in got.items()), flush=True))
    lines = ["| model | parameters | tokens/s | train time s | steps | eval MLM loss | "
             "eval MLM accuracy |", "|---|---|---|---|---|---|---|"]
    rows = []
    for name, s in sides.items():
        st = s.step
        cfg = st.config   # resolved for this platform (harness.step)
        shardings = jax.tree.map(lambda x: x.sharding, st.state["params"])
        evaluate = make_eval_step(cfg, st.mesh, make_model(cfg, True), shardings)
        sums = [evaluate(st.state["params"], put_batch(b, st.mesh))
                for b in eval_batches(cfg, cfg.train.batch_size, 0)]
        ev = summarize_eval(jax.device_get(sums))
        fig = {"parameters": count_params(st.state), "tokens_per_s": round(s.tokens / s.time),
               "train_s": round(s.time, 1), "steps": int(st.state["step"]),
               "eval_mlm_loss": round(float(ev["mlm_loss"]), 3),
               "eval_mlm_accuracy": round(float(ev["mlm_accuracy"]), 3)}
        label = f"{name} (L3 H128, FFN {cfg.model.intermediate_size})"
        lines.append(f"| {label} | {fig['parameters']:,} | {fig['tokens_per_s']} | "
                     f"{fig['train_s']:.0f} | {fig['steps']} | {fig['eval_mlm_loss']:.3f} | "
                     f"{fig['eval_mlm_accuracy']:.3f} |")
        rows.append({"row": f"equal parameters and time: {label}", "preset": "demo",
                     "overrides": [f"{k}={v}" for k, v in ARCH_SIDES[name].items()],
                     "shape": {"seq": 128, "batch": 32, "dtype": "float32"}, "figures": fig})
    notes = (f"Demo corpus (embedded), rows of 128, batch 32, fp32, MLM only at 30 % masking, "
             f"no dropout, lr 1e-3; the same examples in the same order for both; "
             f"{args.rounds} alternating rounds of {args.seconds:.0f} s each side. Equal "
             f"encoder parameters: BERT FFN 384 (2·H·I) vs GeGLU 256 (3·H·I'); BERT adds its "
             f"position table, biases and NSP head.")
    print("\n".join(lines) + "\n" + notes)
    records.save(args, "modern", rows, load_before=load, notes=notes)


def run_peer(args):
    import jax
    import numpy as np
    config = harness.preset_config("modern_small", args.seq, args.batch, "float32",
                                   [f"--config.data.max_predictions_per_seq="
                                    f"{round(0.3 * args.seq)}"])
    mine = harness.Step(config)
    torch_side = peers.TorchModernBert(config, harness.synthetic_batch(
        config, np.random.default_rng(0)))
    load = harness.load_average()
    times = harness.alternate({"kjax": mine, "torch": torch_side}, args.rounds, args.steps)
    k, t = statistics.median(times["kjax"]), statistics.median(times["torch"])
    ratio = harness.compare(times, "kjax", "torch")
    tok = args.batch * args.seq
    shape = {"seq": args.seq, "batch": args.batch, "dtype": "float32"}
    v = torch_side.versions
    lines = ["| side | versions | parameters | seq | batch | s/step | tokens/s |",
             "|---|---|---|---|---|---|---|",
             f"| kjax modern | jax {jax.__version__} | {count_params(mine.state):,} | {args.seq} | "
             f"{args.batch} | {k:.3f} | {tok / k:.0f} |",
             f"| transformers ModernBertForMaskedLM | transformers {v['transformers']}, "
             f"torch {v['torch']} ({torch_side.threads} threads, sdpa) | "
             f"{torch_side.params:,} | {args.seq} | {args.batch} | {t:.3f} | {tok / t:.0f} |"]
    notes = (f"modern_small (6 layers, H256, 4 heads, GeGLU 384, local 128 / global every 3, "
             f"32k vocabulary), fp32, 30 % predictions (sparse prediction on both sides), "
             f"AdamW + clipping, dropout 0. kjax/transformers tokens/s = "
             f"**{ratio['ratio_vs_peer']:.2f}×** (per-round {ratio['ratio_low']:.2f}–"
             f"{ratio['ratio_high']:.2f}×, {args.rounds} rounds × {args.steps} steps each side, "
             f"alternating).")
    print("\n".join(lines) + "\n" + notes)
    rows = [{"row": "kjax modern", "figures": {**mine.figures(k), **ratio,
                                               "parameters": count_params(mine.state)}},
            {"row": "transformers ModernBertForMaskedLM (PyTorch)",
             "figures": {"ms": round(1000 * t, 2), "tokens_per_s": round(tok / t),
                         "parameters": torch_side.params, "torch_threads": torch_side.threads}}]
    records.save(args, "modern", rows, load_before=load, notes=notes, preset="modern_small",
                 shape=shape, overrides=[f"data.max_predictions_per_seq={round(0.3 * args.seq)}"],
                 extra_versions={f"peer {k}": val for k, val in v.items()})


def run_packing(args):
    paragraphs = {"data.document_per_file": False, "data.dir": f"{WORK}/examples_paragraphs",
                  "model.intermediate_size": 256, "train.nsp_weight": 0.0}
    meta = prepared(demo_config(paragraphs))
    sides = {packing: Trained(demo_config({**paragraphs, "train.packing": packing}), packing)
             for packing in (False, True)}
    load = harness.load_average()
    for _ in range(args.rounds):
        for side in sides.values():
            side.run_steps(args.steps)
    rate = {p: s.tokens / s.time for p, s in sides.items()}
    lines = ["| train.packing | real tokens/s | examples/s | token fill | steps/s |",
             "|---|---|---|---|---|"]
    rows = []
    for packing, s in sides.items():
        fig = {"real_tokens_per_s": round(rate[packing]),
               "examples_per_s": round(s.examples / s.time),
               "token_fill": round(s.tokens / (s.steps * 32 * 128), 3),
               "steps_per_s": round(s.steps / s.time, 2)}
        lines.append(f"| {packing} | {fig['real_tokens_per_s']} | {fig['examples_per_s']} | "
                     f"{fig['token_fill']:.3f} | {fig['steps_per_s']:.2f} |")
        rows.append({"row": f"train.packing={packing}", "figures": fig,
                     "overrides": [f"train.packing={packing}"]})
    notes = (f"Modern demo model (L3 H128 GeGLU 256, fp32), rows of 128, batch 32, the demo "
             f"corpus with paragraphs as documents (data.document_per_file=False: "
             f"prepare's token fill {meta['token_fill']}); loader → put_batch → step, "
             f"{args.rounds} alternating rounds × {args.steps} steps. Packing's gain in real "
             f"tokens/s: **{rate[True] / rate[False]:.2f}×**.")
    print("\n".join(lines) + "\n" + notes)
    records.save(args, "modern", rows, load_before=load, notes=notes, preset="demo",
                 shape={"seq": 128, "batch": 32, "dtype": "float32"})


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("arch", "peer", "packing"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0, help="arch: seconds per side a round")
    ap.add_argument("--steps", type=int, default=5, help="peer/packing: steps per side a round")
    ap.add_argument("--seq", type=int, default=512, help="peer: sequence length")
    ap.add_argument("--batch", type=int, default=8, help="peer: batch")
    records.add_arguments(ap)
    args = ap.parse_args()
    {"arch": run_arch, "peer": run_peer, "packing": run_packing}[args.what](args)


if __name__ == "__main__":
    main()
