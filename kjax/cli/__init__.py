"""`kjax` command line. Every verb takes `--config FILE` (a Python file from
tpu_configs/) and any number of `--config.key=value` overrides.

    kjax tokenizer train --config tpu_configs/demo.py
    kjax prepare         --config tpu_configs/demo.py [--workers N]
    kjax train           --config tpu_configs/demo.py --workdir runs/demo
    kjax eval            --workdir runs/demo [--step N]   (the run's recorded config)
    kjax demo            [--workdir runs/demo]   (all of the above on the demo corpus)
    kjax fill-mask       --workdir runs/demo "오늘 날씨[MASK] 좋네요."   (the MLM head's answers)
    kjax average         --workdir runs/demo --last 3 --out runs/demo_avg   (a run: their mean)
    kjax config show     [--config C] [--diff WORKDIR]   (every key, value, meaning)
    kjax compile         --config tpu_configs/v3_32.py --topology v3-32   (will it fit? no TPU)

Verbs that work on a run (train, eval, export, analyze, fill-mask, finetune
--init, inspect --workdir) read WORKDIR/kjax_config.py, which `kjax train`
records, when no --config is given; every verb's config comes through one
loader (kjax/pretrain/run_load.py). A run is one folder: it keeps its
tokenizer inside, so it works moved or copied (kjax/pretrain/run_folder.py).
Paths may be local or URLs (gs://bucket/...): kjax/paths.py. Every key of the config, its value and
meaning: `kjax config show` (from kjax/config/schema.py).

Failures and what to do about them: docs/RECOVERY.md. The methods kjax
implements (BERT's MLM/NSP, SHAKE's Eq. 1, UKnowBERT's multi-hot input and
knowledge heads, the norm-based analysis, the modern recipe), their sources
and the functions and tests behind each equation: docs/METHODS.md in the
kjax repository.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from kjax.cli.common import DEMO_CONFIG, add_config
from kjax.cli.demo import demo_overrides, demo_workdir  # noqa: F401 (the CLI's API)
from kjax.errors import KjaxError

# The cli layer (docs/ARCHITECTURE.md): one module per verb family, each with
# `register(verbs, add_config)` adding subparsers with set_defaults(handler=fn)
# (fn(args, config) -> exit code), optionally before_load=fn(args) and
# distributed=True (jax.distributed before the verb runs).
VERB_MODULES = ("kjax.cli.pipeline", "kjax.cli.demo", "kjax.cli.inspect", "kjax.cli.knowledge",
                "kjax.cli.finetune", "kjax.cli.export", "kjax.cli.analyze",
                "kjax.cli.fill_mask", "kjax.cli.show_config", "kjax.cli.compile",
                "kjax.cli.average")
# Verbs whose --config defaults to the one recorded in their run's workdir.
RUN_VERBS = ("train", "eval", "export", "analyze", "finetune", "inspect", "fill-mask")


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is a KjaxError like every other user error:
    one line naming the argument and where the usage is (not the usage dump)."""

    def error(self, message):
        raise KjaxError(f"{message.rstrip()} (usage: `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="kjax", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for name in VERB_MODULES:
        importlib.import_module(name).register(verbs, add_config)
    return parser


def _split_overrides(args, parser) -> list[str]:
    bad = [o for o in args.overrides if not o.startswith("--config.")]
    if bad:
        parser.error(f"unrecognized arguments: {' '.join(bad)} (overrides look like "
                     f"--config.train.num_steps=100)")
    return args.overrides


def run_workdir(args) -> str | None:
    """The run a verb works on (its recorded config is the default --config)."""
    if args.verb not in RUN_VERBS:
        return None
    if args.verb == "finetune":
        from kjax.finetune.pretrained import NO_INIT
        return None if (args.init or "").lower() in NO_INIT else args.init
    return getattr(args, "workdir", None)


def load(args, parser):
    """The verb's Run (kjax/pretrain/run_load.py): its config loaded, resolved
    and checked before anything compiles; a multi-process verb's
    jax.distributed start between the checks and the first device."""
    from kjax.pretrain.run_load import load_run
    overrides = _split_overrides(args, parser)
    start = None
    if getattr(args, "distributed", False):
        from kjax.parallel.mesh import maybe_initialize_distributed
        start = maybe_initialize_distributed
    config_file = args.config
    if args.verb not in RUN_VERBS and config_file is None:
        config_file = DEMO_CONFIG
    init_from, decay_from = getattr(args, "init_from", None), getattr(args, "decay_from", None)
    if init_from and decay_from:
        raise KjaxError("give --init-from (a new phase) or --decay-from (a decay branch), "
                        "not both")
    if decay_from:   # a decay branch: its parent's run continued (kjax/pretrain/branch.py)
        init_from, overrides = decay_from, [*overrides, "--config.init.mode=continue"]
    return load_run(config_file, overrides, workdir=run_workdir(args), init_from=init_from,
                    phase=getattr(args, "phase", None), use=USES.get(args.verb, "file"),
                    start=start)


# How a verb's config is resolved (kjax/pretrain/run_load.py); verbs not named: "file".
USES = {"train": "train", "compile": "target",
        **{verb: "run" for verb in RUN_VERBS if verb != "train"}}


def run(argv: list[str]) -> int:
    parser = build_parser()
    # Overrides may come anywhere after the verb; argparse sees them as positionals.
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        if hasattr(args, "overrides"):
            args.overrides = list(args.overrides) + unknown
        else:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if getattr(args, "before_load", None):
        args.before_load(args)
    # (a verb with own_config=True loads what it shows itself: `kjax config show`)
    args.run = None if getattr(args, "own_config", False) else load(args, parser)
    if getattr(args, "distributed", False):
        from kjax.parallel.mesh import maybe_initialize_distributed
        maybe_initialize_distributed()   # (done already by load; `config show` has no run)
    code = args.handler(args, None if args.run is None else args.run.config) or 0
    from kjax.parallel import watchdog
    watchdog.finished()   # a multi-process run's peers stop waiting for this process
    return code


def main(argv: list[str] | None = None) -> int:
    """Runs a verb; a KjaxError (bad input, a damaged checkpoint, a full or
    read-only disk) is one stderr line and exit 2 (75 for an object store
    unreachable past KJAX_STORE_OUTAGE_LIMIT, 69 for a lost process, from
    kjax/parallel/watchdog.py). The echoes such failures leave in orbax's
    threads (log records with tracebacks, asyncio's "Event loop is closed")
    are kept off stderr; KJAX_DEBUG=1 shows them all."""
    from kjax.checkpoint import quiet, storage
    quiet.install()
    storage.quiet_library_logs()
    from kjax.config.recorded import flush_notes, take_notes
    from kjax.store_outage import unreachable_in
    try:
        try:
            code = run(sys.argv[1:] if argv is None else argv)
        except Exception as e:  # noqa: BLE001 - an outage past the limit, wrapped by a library
            if not isinstance(e, KjaxError):   # a lost process: its line, exit 69 (no return)
                from kjax.parallel import watchdog
                watchdog.explain(e)
            unreachable = unreachable_in(e)
            if unreachable is None:
                raise
            raise unreachable from None
        flush_notes()
        return code
    except KjaxError as e:
        notes = take_notes()   # e.g. "this config differs from the recorded one": the likely cause
        message = " ".join(str(e).split())  # one line, whatever the message held
        if notes:
            message += " (note: " + " ".join("; ".join(notes).split()) + ")"
        print(f"kjax: error: {message}", file=sys.stderr, flush=True)
        return getattr(e, "exit_code", 2)   # 75: the object store was unreachable (RECOVERY.md)


if __name__ == "__main__":
    sys.exit(main())
