"""Multi-hot MLM loss ablation (METHODS §2.4, Table 14): Eq. 7-9 vs BCE vs
summed softmax CE, judged by held-out masked-morpheme accuracy after a short
pretraining of the tiny multi-hot model.

    python experiments/mlm_loss_ablation.py [--steps 300] [--seeds 0,1] \\
        [--corpus konlpy | --corpus 'text/*.txt'] [--out runs/experiments/mlm_loss]

One tokenizer and one set of examples (prepare) for all runs, so the losses
see identical data; each (loss, seed) pretrains from scratch with
`tpu_configs/demo.py` + the multihot overrides of `kjax demo --scheme
multihot`, then `kjax eval` measures the held-out examples. Prints a table
(mean ± std over seeds) and writes results.json. Masked-morpheme accuracy
counts a slot right when the top-n predictions are exactly its n target
tokens (kjax.losses.multihot.multihot_accuracy), so it does not favour any
one loss's calibration. Record readings in docs/EXPERIMENTS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOSSES = ("eq9", "bce", "summed_ce")


def config_for(out: str, corpus: str, steps: int, seed: int, loss: str, vocab: int | None):
    from kjax.cli import demo_overrides
    from kjax.config import load_config
    overrides = demo_overrides("multihot", uknowbert=False) + [
        f"--config.tokenizer.path={out}/data/tokenizer/sp",
        f"--config.data.dir={out}/data/examples",
        f"--config.data.corpus={corpus}",
        f"--config.data.document_per_file={corpus == 'konlpy'}",
        f"--config.train.num_steps={steps}", f"--config.train.seed={seed}",
        f"--config.train.mlm_loss={loss}", "--config.train.checkpoint_every=1000000",
        f"--config.train.eval_every={steps}"]
    if vocab:
        overrides.append(f"--config.model.vocab_size={vocab}")
    return load_config(os.path.join(ROOT, "tpu_configs", "demo.py"), overrides)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--corpus", default="konlpy")
    p.add_argument("--losses", default=",".join(LOSSES))
    p.add_argument("--out", default="runs/experiments/mlm_loss")
    args = p.parse_args(argv)
    from kjax.pretrain.prepare import prepare
    from kjax.tokens.factory import open_tokenizer, train_tokenizer
    from kjax.pretrain.trainer import evaluate, train
    seeds = [int(s) for s in args.seeds.split(",")]
    losses = args.losses.split(",")
    base = config_for(args.out, args.corpus, args.steps, 0, "eq9", None)
    train_tokenizer(base)
    vocab = open_tokenizer(base).vocab_size
    meta = prepare(config_for(args.out, args.corpus, args.steps, 0, "eq9", vocab), progress=False)
    results = []
    for loss in losses:
        for seed in seeds:
            config = config_for(args.out, args.corpus, args.steps, seed, loss, vocab)
            workdir = f"{args.out}/{loss}_seed{seed}"
            start = time.time()
            train(config, workdir, progress=False)
            ev = evaluate(config, workdir)
            results.append({"loss": loss, "seed": seed, "steps": args.steps,
                            "eval_mlm_accuracy": ev["mlm_accuracy"],
                            "eval_mlm_loss": ev["mlm_loss"], "seconds": time.time() - start})
            print(json.dumps(results[-1]), flush=True)
    rows = []
    for loss in losses:
        acc = [r["eval_mlm_accuracy"] for r in results if r["loss"] == loss]
        std = statistics.stdev(acc) if len(acc) > 1 else 0.0
        rows.append(f"| {loss} | {statistics.mean(acc):.4f} ± {std:.4f} | {len(acc)} |")
    table = "\n".join(["| MLM loss | held-out masked-morpheme accuracy | seeds |",
                       "|---|---|---|", *rows])
    summary = {"corpus": args.corpus, "vocab": vocab, "steps": args.steps, "seeds": seeds,
               "train_examples": meta["train_examples"], "eval_examples": meta["eval_examples"],
               "results": results, "table": table}
    os.makedirs(args.out, exist_ok=True)
    with open(f"{args.out}/results.json", "w") as f:
        json.dump(summary, f, indent=2)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
