"""`kjax` command line. Every verb takes `--config FILE` (a Python file from
tpu_configs/) and any number of `--config.key=value` overrides.

    kjax tokenizer train --config tpu_configs/demo.py
    kjax prepare         --config tpu_configs/demo.py [--workers N]
    kjax train           --config tpu_configs/demo.py --workdir runs/demo
    kjax eval            --workdir runs/demo [--step N]   (the run's recorded config)
    kjax demo            [--workdir runs/demo]   (all of the above on the demo corpus)

Verbs that work on a run (train, eval, export, analyze, finetune --init,
inspect --workdir) read WORKDIR/kjax_config.py, which `kjax train` records,
when no --config is given (kjax/run_config.py). Paths may be local or URLs
(gs://bucket/...): kjax/paths.py.

Failures and what to do about them: docs/RECOVERY.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from kjax.errors import KjaxError

# Feature modules that add verbs: each has `register(verbs, add_config)` that
# adds subparsers with `set_defaults(handler=fn)`; fn(args, config) runs the verb.
VERB_MODULES: tuple[str, ...] = ("kjax.inspect_text", "kjax.examples.beam_prepare",
                                 "kjax.finetune.cli",
                                 "kjax.export.cli",
                                 "kjax.analysis.cli",
                                 "kjax.knowledge.cli")

DEMO_CONFIG = "tpu_configs/demo.py"   # shipped in the wheel too (config.resolve_config_path)
# Verbs whose --config defaults to the one recorded in their run's workdir.
RUN_VERBS = ("train", "eval", "export", "analyze", "finetune", "inspect")


def _add_config(p: argparse.ArgumentParser, required: bool = True) -> None:
    help_text = "Python config file (tpu_configs/*.py)" if required else \
        "Python config file (tpu_configs/*.py; default: the run's WORKDIR/kjax_config.py)"
    p.add_argument("--config", required=required, help=help_text)
    p.add_argument("overrides", nargs="*", default=[], metavar="--config.KEY=VALUE",
                   help="override any config key, e.g. --config.train.num_steps=1000")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kjax", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    tok = verbs.add_parser("tokenizer", help="train a tokenizer vocabulary, or measure one "
                           "(stats)")
    tok_verbs = tok.add_subparsers(dest="tokenizer_verb", required=True, metavar="ACTION")
    tt = tok_verbs.add_parser("train", help="train the vocabulary of tokenizer.scheme on "
                              "data.corpus; writes tokenizer.path(.model/.vocab)")
    _add_config(tt)
    ts = tok_verbs.add_parser("stats", help="[UNK] rate and the share of morphemes split "
                              "into several tokens (by POS class) on a corpus")
    _add_config(ts)
    ts.add_argument("--corpus", default=None, metavar="SPEC",
                    help="files/globs or tfds:NAME/CONFIG:SPLIT (default data.corpus)")
    ts.add_argument("--json", default=None, metavar="OUT", help="also write the figures here")
    ts.add_argument("--max-sentences", type=int, default=None, metavar="N",
                    help="stop after N sentences")

    prep = verbs.add_parser("prepare", help="corpus → NSP/MLM examples as ArrayRecord shards "
                            "in data.dir (streamed; a killed job resumes)")
    _add_config(prep)
    prep.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")

    tr = verbs.add_parser("train", help="pretrain (MLM + NSP); resumes from the latest "
                          "checkpoint in --workdir")
    _add_config(tr, required=False)
    tr.add_argument("--workdir", required=True, help="checkpoints, metrics, TensorBoard, plots")
    tr.add_argument("--stop-at", type=int, default=None, metavar="STEP",
                    help="checkpoint and stop at this step (the schedule stays that of "
                    "train.num_steps); run again to continue")

    ev = verbs.add_parser("eval", help="MLM/NSP loss and accuracy of a checkpoint on the "
                          "held-out examples")
    _add_config(ev, required=False)
    ev.add_argument("--workdir", required=True)
    ev.add_argument("--step", type=int, default=None, help="checkpoint step (default: the "
                    "newest that verifies; a damaged --step is refused)")

    demo = verbs.add_parser("demo", help="tokenizer + prepare + train + eval of the tiny model "
                            "on the embedded Korean corpus (what `make demo` runs)")
    _add_config(demo, required=False)
    demo.add_argument("--workdir", default=None,
                      help="default runs/demo (runs/demo_uknowbert with --uknowbert, "
                      "runs/demo_SCHEME with --scheme); an existing demo run is continued, "
                      "never deleted")
    demo.add_argument("--scheme", default=None, choices=("sentencepiece", "morph-sp", "multihot"),
                      help="tokenizer scheme (default: the config's, sentencepiece)")
    demo.add_argument("--uknowbert", action="store_true",
                      help="UKnowBERT-S at demo size: multi-hot input, Eq. 7-9 MLM, NSP and the "
                      "three knowledge objectives from the samples in kjax/knowledge/data")
    import importlib
    for name in VERB_MODULES:
        importlib.import_module(name).register(verbs, _add_config)
    return parser


def _split_overrides(args, parser) -> list[str]:
    bad = [o for o in args.overrides if not o.startswith("--config.")]
    if bad:
        parser.error(f"unrecognized arguments: {' '.join(bad)} (overrides look like "
                     f"--config.train.num_steps=100)")
    return args.overrides


def run_workdir(args) -> str | None:
    """The run a verb works on (its recorded config is the default --config)."""
    if args.verb == "finetune":
        from kjax.finetune.pretrained import NO_INIT
        return None if (args.init or "").lower() in NO_INIT else args.init
    return getattr(args, "workdir", None)


def _load(args, parser):
    from kjax.config import load_config
    overrides = _split_overrides(args, parser)
    if args.verb not in RUN_VERBS or (args.verb == "train" and args.config):
        # (train notes a changed config itself, when it records the new one)
        return load_config(args.config or DEMO_CONFIG, overrides)
    from kjax.run_config import load_run_config
    return load_run_config(args.config, overrides, run_workdir(args))


def _print(result: dict) -> None:
    print(json.dumps(result, ensure_ascii=False, indent=2, default=str))


def run(argv: list[str]) -> int:
    parser = build_parser()
    # Overrides may come anywhere after the verb; argparse sees them as positionals.
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        if hasattr(args, "overrides"):
            args.overrides = list(args.overrides) + unknown
        else:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.verb == "demo":
        args.overrides = [*demo_overrides(args.scheme, args.uknowbert), *args.overrides]
        args.workdir = args.workdir or demo_workdir(args.scheme, args.uknowbert)
    config = _load(args, parser)
    if args.verb in ("train", "eval", "demo"):
        from kjax.parallel.mesh import maybe_initialize_distributed
        maybe_initialize_distributed()
    if args.verb == "tokenizer" and args.tokenizer_verb == "stats":
        from kjax.tokens.stats import run_stats
        run_stats(config, args.corpus, args.json, args.max_sentences)
    elif args.verb == "tokenizer":
        from kjax.tokens.factory import train_tokenizer, vocabulary_report
        path, stats = train_tokenizer(config)
        print(f"tokenizer written to {path}\ncorpus: {stats.summary()}\n"
              f"{vocabulary_report(config)}")
    elif args.verb == "prepare":
        from kjax.examples.prepare import prepare
        _print(prepare(config, num_workers=args.workers))
    elif args.verb == "train":
        from kjax.train.trainer import train
        result = train(config, args.workdir, stop_at=args.stop_at)
        _print(result)
        return result.get("exit_code", 0)  # 143: stopped by SIGTERM after a clean save
    elif args.verb == "eval":
        from kjax.train.trainer import evaluate
        _print(evaluate(config, args.workdir, args.step))
    elif args.verb == "demo":
        run_demo(config, args.workdir)
    else:
        return args.handler(args, config) or 0
    return 0


def demo_overrides(scheme: str | None, uknowbert: bool) -> list[str]:
    if uknowbert:
        if scheme not in (None, "multihot"):
            raise KjaxError(f"demo --uknowbert uses the multihot scheme, not --scheme {scheme}")
        scheme = "multihot"
    out = [f"--config.tokenizer.scheme={scheme}"] if scheme else []
    if scheme == "multihot":  # the UKnowBERT input and loss (METHODS §2.3–2.4)
        out += ["--config.model.input_mode=multihot", "--config.train.mlm_loss=eq9",
                "--config.data.mask_unit=morpheme"]
    if uknowbert:  # the objectives of §2.5, with the shipped sample resources
        out += [f"--config.knowledge.{k}_weight=1.0" for k in ("hypernym", "sense", "verb")]
    if scheme:  # own data folders, so demos of different schemes never clobber each other
        data = f"runs/demo_data_{'uknowbert' if uknowbert else scheme}"
        out += [f"--config.tokenizer.path={data}/tokenizer/sp",
                f"--config.data.dir={data}/examples"]
    return out


DEMO_HEADS = (("mlm_accuracy", "mlm_acc"), ("nsp_accuracy", "nsp_acc"),
              ("hypernym_top1", "hyp_top1"), ("sense_cosine", "sense_cos"),
              ("verb_accuracy", "verb_acc"))


def demo_workdir(scheme: str | None, uknowbert: bool) -> str:
    """Each demo its own run folder, as its own data folders (demo_overrides)."""
    if uknowbert:
        return "runs/demo_uknowbert"
    return f"runs/demo_{scheme}" if scheme else "runs/demo"


def check_demo_workdir(config, workdir: str, compare: bool = True) -> bool:
    """True when `workdir` holds this very demo's run (continue it), False
    when it is new or empty; an error for anything else. Nothing is deleted.
    `compare=False`: only that it is empty or a kjax run (the config is
    compared once the vocabulary size is known)."""
    from kjax import paths
    from kjax.run_config import config_differences, recorded_config_path
    if not paths.listdir(workdir):
        return False
    recorded = recorded_config_path(workdir)
    if not paths.isfile(recorded):
        raise KjaxError(f"{workdir} exists and is not a kjax demo run (no kjax_config.py); "
                        f"pass another --workdir (kjax demo never deletes anything)")
    if not compare:
        return True
    from kjax.config import load_config
    diffs = config_differences(load_config(recorded), config)
    if diffs:
        raise KjaxError(f"{workdir} holds a run with another config ({'; '.join(diffs[:4])}); "
                        f"pass another --workdir to start a new demo, or `kjax train --workdir "
                        f"{workdir}` to continue that run (nothing was deleted)")
    return True


def run_demo(config, workdir: str) -> None:
    from kjax import paths
    from kjax.examples.prepare import prepare
    from kjax.config import apply_override
    from kjax.tokens.factory import open_tokenizer, tokenizer_file, train_tokenizer
    from kjax.train.logdir import read_run_metrics
    from kjax.train.trainer import train
    start = time.time()
    # Never deletes: an existing run of this demo is continued, its tokenizer
    # and examples reused (prepare resumes; a mismatch is a one-line error).
    check_demo_workdir(config, workdir, compare=False)
    if paths.isfile(tokenizer_file(config)):
        path, summary = tokenizer_file(config), "(reused; delete it to train a new one)"
    else:
        path, stats = train_tokenizer(config)
        summary = stats.summary()
    vocab = open_tokenizer(config).vocab_size
    if vocab != config.model.vocab_size:  # multihot's final size is known only now
        apply_override(config, f"--config.model.vocab_size={vocab}")
    if check_demo_workdir(config, workdir):
        print(f"[0/3] {workdir} holds this demo's run: continuing it (pass another --workdir "
              f"to start a new one)")
    print(f"[1/3] {config.tokenizer.scheme} tokenizer {path} ({vocab} tokens) {summary}")
    meta = prepare(config)
    print(f"[2/3] {meta['train_examples']} train / {meta['eval_examples']} eval examples "
          f"in {config.data.dir} ({meta['chunks_reused']} of {meta['chunks']} chunks reused)")
    result = train(config, workdir)
    curve = [r for r in read_run_metrics(workdir) if r["split"] == "train"]
    print("[3/3] training loss (all objectives) by step:")
    for r in curve:
        heads = "  ".join(f"{short} {r[key]:.3f}" for key, short in DEMO_HEADS if key in r)
        print(f"  step {r['step']:5d}  loss {r['loss']:.3f}  {heads}")
    if len(curve) >= 2 and "peak_source" in result:
        print(f"loss fell from {curve[0]['loss']:.3f} to {curve[-1]['loss']:.3f}; "
              f"{result.get('tokens_per_sec', 0):.0f} tokens/s, MFU {result.get('mfu', 0):.1%} "
              f"(vs {result['peak_source']})")
    if "message" in result:
        print(f"{workdir}: {result['message']}")
    print(f"checkpoints in {workdir}/checkpoints, curve {result.get('loss_curve')}; "
          f"demo took {time.time() - start:.0f} s")


def main(argv: list[str] | None = None) -> int:
    """Runs a verb; a KjaxError (bad input, a damaged checkpoint, a full or
    read-only disk) is one stderr line and exit 2. The echoes such failures
    leave in orbax's threads (log records with tracebacks, asyncio's "Event
    loop is closed") are kept off stderr; KJAX_DEBUG=1 shows them all."""
    from kjax.checkpoint import quiet, storage
    quiet.install()
    storage.quiet_library_logs()
    from kjax.run_config import flush_notes, take_notes
    try:
        code = run(sys.argv[1:] if argv is None else argv)
        flush_notes()
        return code
    except KjaxError as e:
        notes = take_notes()   # e.g. "this config differs from the recorded one": the likely cause
        message = " ".join(str(e).split())  # one line, whatever the message held
        if notes:
            message += " (note: " + " ".join("; ".join(notes).split()) + ")"
        print(f"kjax: error: {message}", file=sys.stderr, flush=True)
        quiet.reported()
        return 2


if __name__ == "__main__":
    sys.exit(main())
