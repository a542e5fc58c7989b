"""The pretraining verbs: `kjax tokenizer train|stats`, `prepare`,
`prepare-beam`, `train`, `eval`. The work is done by the library
(kjax/tokens, kjax/pretrain); this module parses and prints."""
from __future__ import annotations

import shlex

from kjax.cli.common import add_weights, format_table, print_json
from kjax.tokens.stats import POS_CLASSES


def register(verbs, add_config) -> None:
    tok = verbs.add_parser("tokenizer", help="train a tokenizer vocabulary, or measure one "
                           "(stats)")
    tok_verbs = tok.add_subparsers(dest="tokenizer_verb", required=True, metavar="ACTION")
    tt = tok_verbs.add_parser("train", help="train the vocabulary of tokenizer.scheme on "
                              "data.corpus; writes tokenizer.path(.model/.vocab)")
    add_config(tt)
    tt.set_defaults(handler=run_tokenizer_train)
    ts = tok_verbs.add_parser("stats", help="[UNK] rate and the share of morphemes split "
                              "into several tokens (by POS class) on a corpus")
    add_config(ts)
    ts.add_argument("--corpus", default=None, metavar="SPEC",
                    help="files/globs or tfds:NAME/CONFIG:SPLIT (default data.corpus)")
    ts.add_argument("--json", default=None, metavar="OUT", help="also write the figures here")
    ts.add_argument("--max-sentences", type=int, default=None, metavar="N",
                    help="stop after N sentences")
    ts.set_defaults(handler=run_tokenizer_stats)

    prep = verbs.add_parser("prepare", help="corpus → NSP/MLM examples as ArrayRecord shards "
                            "in data.dir (streamed; a killed job resumes)")
    add_config(prep)
    prep.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    prep.set_defaults(handler=run_prepare)

    beam = verbs.add_parser("prepare-beam", help="`kjax prepare` as an Apache Beam pipeline "
                            "(DirectRunner, Dataflow, Flink, Spark); byte-identical shards")
    add_config(beam)
    beam.add_argument("--beam-options", default="", metavar="'--runner=... ...'",
                      help="Beam pipeline options as one string; write --beam-options='--runner="
                      "DataflowRunner --project=P ...' (with '='). Default: DirectRunner")
    beam.set_defaults(handler=run_prepare_beam)

    tr = verbs.add_parser("train", help="pretrain (MLM + NSP); resumes from the latest "
                          "checkpoint in --workdir")
    add_config(tr, required=False)
    tr.add_argument("--workdir", required=True, help="checkpoints, metrics, TensorBoard, plots")
    tr.add_argument("--stop-at", type=int, default=None, metavar="STEP",
                    help="checkpoint and stop at this step (the schedule stays that of "
                    "train.num_steps); run again to continue")
    tr.add_argument("--init-from", default=None, metavar="RUN",
                    help="a new phase: start from another run's parameters (its workdir, "
                    "checkpoints/ or checkpoints/STEP; a `kjax import` folder too), with this "
                    "config's data, schedule and warmup (sets init.from_run; without --config, "
                    "the config RUN recorded, the overrides on top); ignored once --workdir has "
                    "checkpoints of its own")
    tr.add_argument("--decay-from", default=None, metavar="RUN",
                    help="a decay branch: continue another run's checkpoint (its workdir, "
                    "checkpoints/ or checkpoints/STEP) — step counter, optimizer, EMA, data "
                    "position — in --workdir with this config's schedule (wsd: the decay spans "
                    "the branch; train.num_steps counts the parent's steps too). Sets "
                    "init.from_run and init.mode=continue; without --config, the config RUN "
                    "recorded, the overrides on top")
    tr.set_defaults(handler=run_train, distributed=True)

    ev = verbs.add_parser("eval", help="MLM/NSP loss and accuracy of a checkpoint on the "
                          "held-out examples")
    add_config(ev, required=False)
    ev.add_argument("--workdir", required=True)
    ev.add_argument("--step", type=int, default=None, help="checkpoint step (default: the "
                    "newest that verifies; a damaged --step is refused)")
    add_weights(ev)
    ev.set_defaults(handler=run_eval, distributed=True)


def run_tokenizer_train(args, config) -> int:
    from kjax.tokens.factory import train_tokenizer, vocabulary_report
    path, stats = train_tokenizer(config)
    print(f"tokenizer written to {path}\ncorpus: {stats.summary()}\n{vocabulary_report(config)}")
    return 0


def format_stats(s: dict) -> str:
    """`kjax tokenizer stats`' table (kjax.tokens.stats computes the figures)."""
    pct = lambda x: "—" if x is None else f"{100 * x:.2f}%"  # noqa: E731
    c = s["counts"]
    cols = [*POS_CLASSES, "all"]
    rows = [["morphemes", *(f"{c[k]['morphemes']:,}" for k in cols)],
            ["split into >= 2 tokens", *(pct(s["split_share"][k]) for k in cols)],
            ["holding [UNK]", *(pct(c[k]["with_unk"] / c[k]["morphemes"] if c[k]["morphemes"]
                                    else 0.0) for k in cols)]]
    head = (f"{s['scheme']} tokenizer {s['tokenizer']} ({s['vocab_size']:,} tokens) on "
            f"{s['corpus']}: {s['sentences']:,} sentences, {s['chars']:,} chars, "
            f"{s['tokens']:,} tokens ({s['tokens_per_morpheme']:.2f} per morpheme)")
    tail = [f"[UNK] tokens: {pct(s['unk_token_rate'])} of tokens",
            f"bare ▁ tokens: {pct(s['bare_space_share'])} of tokens",
            f"morphemes as token sets: {pct(s['token_set_share'])}",
            f"tokens crossing a morpheme boundary: {pct(s['crossing_share'])}"]
    return "\n".join([head, format_table(["", *cols], rows), *tail])


def run_tokenizer_stats(args, config) -> int:
    from kjax import paths
    from kjax.tokens.stats import corpus_stats
    result = corpus_stats(config, args.corpus, args.max_sentences)
    print(format_stats(result))
    if args.json:
        paths.write_json(args.json, result)   # local or a URL
        print(f"written to {args.json}")
    return 0


def run_prepare(args, config) -> int:
    from kjax.pretrain.prepare import prepare
    print_json(prepare(config, num_workers=args.workers))
    return 0


def run_prepare_beam(args, config) -> int:
    from kjax.pretrain.beam_prepare import prepare_beam
    print_json(prepare_beam(config, shlex.split(args.beam_options)))
    return 0


def run_train(args, config) -> int:
    from kjax.pretrain.trainer import train
    # the Run the loader made (kjax/pretrain/run_load.py: --init-from set, the
    # config resolved against the workdir), with what it read of the workdir
    result = train(args.run, args.workdir, stop_at=args.stop_at)
    print_json(result)
    return result.get("exit_code", 0)  # 143: stopped by SIGTERM after a clean save


def run_eval(args, config) -> int:
    from kjax.pretrain.trainer import evaluate
    print_json(evaluate(config, args.workdir, args.step, args.weights))
    return 0
