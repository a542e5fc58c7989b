"""`kjax finetune`: fine-tune and evaluate a pretrained kjax encoder.

    kjax finetune --task pair --train klue-nli-v1.1_train.json --dev klue-nli-v1.1_dev.json \\
        --init runs/demo --config tpu_configs/demo.py --out runs/ft/nli
    kjax finetune --task ner --train klue-ner-v1.1_dev.tsv --init runs/demo \\
        --config tpu_configs/demo.py --out runs/ft/ner --seeds 1,2,3 --sweep \\
        --config.finetune.epochs=2 --config.finetune.shake.variant=random
    kjax finetune --task qa --train KorQuAD_v1.0_train.json --dev KorQuAD_v1.0_dev.json ...
    kjax finetune --task qa ... --init runs/demo --every-checkpoint --seeds 1,2,3 \\
        --out runs/ft/progress --compare runs/ft/progress_other   # score vs pretraining step

--config gives the model, tokenizer and mesh (the pretraining config: the
run's recorded WORKDIR/kjax_config.py when left out) and the fine-tuning
settings, its `finetune` section (below): set them in the file
(c.finetune.KEY = VALUE) or as --config.finetune.KEY=VALUE. See
docs/FINETUNE.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from kjax.cli.common import add_weights
from kjax.config import leaves
from kjax.finetune.registry import TASKS
from kjax.finetune.readers import FORMATS


def settings_help() -> str:
    """The finetune section's keys, defaults and meanings (the schema's)."""
    rows = [f"  --config.{key}={node.default!r}\n      {node.meaning} ({node.allowed()})"
            for key, node in leaves().items() if key.startswith("finetune.")]
    return "fine-tuning settings (--config.finetune.KEY=VALUE):\n" + "\n".join(rows)


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give integers, e.g. 1,2,3") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give distinct integers >= 0, "
                                         f"e.g. 1,2,3")
    return seeds


def register(verbs, add_config) -> None:
    p = verbs.add_parser(
        "finetune", help="fine-tune a pretrained encoder on a classification, pair, "
        "regression, NER, extractive QA or multiple-choice task (KLUE, KorQuAD, NIKL, NSMC "
        "formats); SHAKE combinations, seeds, progress over pretraining steps",
        description=__doc__, epilog=settings_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    add_config(p, required=False)
    p.add_argument("--task", required=True, choices=list(TASKS))
    p.add_argument("--train", required=True, metavar="FILE", help="training data")
    p.add_argument("--dev", metavar="FILE", help="dev data (default: carved from --train "
                   "by finetune.split, seeded)")
    p.add_argument("--test", metavar="FILE", help="test data (default: carved from --train "
                   "when neither --dev nor --test is given)")
    p.add_argument("--format", default="auto", choices=FORMATS, help="data format (default: "
                   "by extension and JSON keys)")
    p.add_argument("--init", required=True, metavar="WORKDIR_OR_CKPT",
                   help="pretraining workdir, its checkpoints/ or checkpoints/STEP; "
                   "'none' = random weights")
    add_weights(p, "the --init run (sets finetune.init_weights)", default=None)
    p.add_argument("--out", required=True, metavar="DIR", help="metrics, predictions, "
                   "checkpoints (a killed run resumes from here)")
    p.add_argument("--seeds", type=parse_seeds, default=None, metavar="1,2,3",
                   help="one run per seed; reports mean ± std")
    p.add_argument("--stop-at", type=int, default=None, metavar="STEP",
                   help="checkpoint each run at this step and stop (run again to resume)")
    p.add_argument("--sweep", action="store_true", help="fine-tune bf in "
                   "finetune.shake.sweep_train × inference bf in sweep_infer (the four SHAKE "
                   "combinations by default)")
    p.add_argument("--every-checkpoint", action="store_true",
                   help="fine-tune every saved step of the --init run (with --seeds) and plot "
                   "the dev score vs pretraining step: OUT/progress.json, progress.png")
    p.add_argument("--compare", default="", metavar="DIR,DIR",
                   help="with --every-checkpoint: earlier progress runs (their --out) drawn "
                   "in the same progress.png")
    p.set_defaults(handler=handle, before_load=weights_override)


def weights_override(args) -> None:
    """--weights is finetune.init_weights: an override of the config as it loads
    (the loader's config is frozen: kjax/pretrain/run_load.py)."""
    if args.weights:
        args.overrides = [*args.overrides, f"--config.finetune.init_weights={args.weights}"]


def check_init_weights(args, config) -> None:
    """--weights (finetune.init_weights) against the --init run, in one line."""
    from kjax.checkpoint.restore import check_weights
    from kjax.errors import KjaxError
    from kjax.finetune.pretrained import NO_INIT
    weights = config.finetune.init_weights
    if weights != "params" and args.init.lower() in NO_INIT:
        raise KjaxError(f"--weights {weights}: it picks the weights of the --init run, and "
                        f"--init {args.init} starts from random weights; name a run with --init")
    check_weights(config, weights, args.init)


def handle(args, config) -> int:
    from kjax.parallel.mesh import maybe_initialize_distributed
    check_init_weights(args, config)
    maybe_initialize_distributed()
    if args.every_checkpoint:
        return _progress(args, config)
    if args.compare:
        from kjax.errors import KjaxError
        raise KjaxError("--compare draws progress curves; use it with --every-checkpoint")
    from kjax.finetune.experiment import results_lines, run_experiment
    summary = run_experiment(config, config.finetune, args.task, args.train, args.dev, args.test,
                             args.init, args.out, args.seeds, args.sweep, args.format,
                             stop_at=args.stop_at)
    if summary.get("preempted"):
        return _preempted(summary)
    print(json.dumps({k: summary[k] for k in ("task", "init", "metric", "examples", "seeds",
                                              "sweep", "learning_rate")}, ensure_ascii=False))
    print(summary["table"])
    for line in results_lines(summary):   # every metric, not only the table's
        print(line)
    if summary["note"]:
        print(summary["note"])
    if summary["unfinished"]:
        print(f"stopped at step {args.stop_at}: {', '.join(summary['unfinished'])}; "
              f"run the same command again to resume")
    shown = args.out if "://" in args.out else os.path.abspath(args.out)
    print(f"results in {shown} (summary.json, metrics.json, predictions, "
          f"learning_curve.png)")
    return 0


def _preempted(result: dict) -> int:
    """One line and 143 (128 + SIGTERM), so a supervisor restarts the same command."""
    import jax
    who = f"process {jax.process_index()}: " if jax.process_count() > 1 else ""
    print(f"kjax: {who}{result['message']}", file=sys.stderr, flush=True)
    return result["exit_code"]


def _progress(args, config) -> int:
    from kjax.finetune.scores_by_step import run_progress
    if args.stop_at is not None:
        from kjax.errors import KjaxError
        raise KjaxError("--stop-at and --every-checkpoint do not combine; rerun the same "
                        "command to resume an interrupted progress run instead")
    compare = [c for c in args.compare.split(",") if c.strip()]
    result = run_progress(config, config.finetune, args.task, args.train, args.dev, args.test,
                          args.init, args.out, args.seeds, args.sweep, args.format, compare)
    if result.get("preempted"):
        return _preempted(result)
    print(f"| pretraining step | bf fine-tune | bf inference | dev {result['metric']} | seeds |")
    print("|---|---|---|---|---|")
    for p in result["points"]:
        value = "undefined" if p["mean"] is None else f"{p['mean']:.4f} ± {p['std']:.4f}"
        print(f"| {p['step']} | {p['bf_train']:+g} | {p['bf_infer']:+g} | {value} | {p['n']} |")
    print(f"progress curve: {result.get('png')} (data: progress.json)")
    return 0
