"""`kjax average`: the mean of chosen checkpoints, written as a run that the
other verbs take (kjax/pretrain/average.py says what OUT holds).

    kjax average --workdir W --steps 3000,4000,5000 --out W_avg
    kjax average --workdir W --last 3 --out W_avg [--weights ema]
    kjax average --workdir A/checkpoints/9000 --workdir B/checkpoints/9000 --out AB
    kjax average --workdir A --workdir B --last 1 --out AB   (runs of one model)
"""
from __future__ import annotations

import argparse

from kjax.cli.common import add_weights, print_json


def parse_steps(text: str) -> list[int]:
    try:
        steps = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        steps = []
    if not steps or len(set(steps)) != len(steps) or min(steps) < 0:
        raise argparse.ArgumentTypeError(f"--steps {text!r}: give distinct steps >= 0, e.g. "
                                         f"3000,4000,5000")
    return steps


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--last {text!r}: give a count of 1 or more")
    return int(text)


def register(verbs, add_config) -> None:
    p = verbs.add_parser(
        "average", help="the mean of chosen checkpoints (of one run, or of runs of one "
        "model) written as a run: eval, export, fill-mask, finetune --init and train "
        "--init-from take it",
        description="Averages the weights of chosen checkpoints and writes OUT as a run: "
        "OUT/checkpoints/STEP (the last checkpoint named, its params replaced by the mean, "
        "summed in float64), OUT/kjax_config.py (that run's config, train.ema_decay=0) and "
        "OUT/lineage.json (every source's run, step and fingerprint). The sources are only "
        "read. See docs/PRETRAINING.md, \"Weight averaging\".")
    p.add_argument("--workdir", action="append", required=True, metavar="RUN",
                   help="a run (its checkpoints chosen by --steps or --last) or "
                   "RUN/checkpoints/STEP; repeat it to average runs of one model")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--steps", type=parse_steps, default=None, metavar="S1,S2,...",
                       help="these steps of each --workdir run")
    which.add_argument("--last", type=positive, default=None, metavar="N",
                       help="the last N checkpoints of each --workdir run")
    add_weights(p, "each checkpoint to average")
    p.add_argument("--out", required=True, metavar="OUT",
                   help="the run folder to write (new, or without checkpoints)")
    p.set_defaults(handler=run, own_config=True)


def run(args, config) -> int:
    from kjax.pretrain.average import average
    print_json(average(args.workdir, args.out, args.steps, args.last, args.weights))
    return 0
