"""`kjax analyze`: the norm-based attention analysis of a checkpoint (METHODS §3).

    kjax analyze [--config C] --workdir W [--step N] (--texts FILE | --text "..." ...)
                 --out DIR [--bf X] [--sentence-index 0] [--max-texts N]
"""
from __future__ import annotations

import json


def register(verbs, add_config) -> None:
    p = verbs.add_parser(
        "analyze", help="norm-based attention analysis of a checkpoint: α vs ‖f(x)‖ vs "
        "‖αf(x)‖ per layer/head, class correlations, postposition→substantive shares with "
        "and without shaking; writes report.json and PNGs to --out")
    add_config(p, required=False)
    p.add_argument("--workdir", required=True, help="the training run (its checkpoints/)")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default latest)")
    p.add_argument("--texts", default=None, metavar="FILE",
                   help="UTF-8 file, one text per line (a tab separates a pair's segments)")
    p.add_argument("--text", action="append", default=[], metavar="TEXT",
                   help="a text to analyse (repeatable; combined with --texts)")
    p.add_argument("--out", required=True, metavar="DIR", help="where report.json and the "
                   "PNGs go")
    p.add_argument("--bf", type=float, default=None,
                   help="boost factor of the shaken run (default: the config's "
                   "model.shake_factor; 0 and no configured bf: no shaken run)")
    p.add_argument("--sentence-index", type=int, default=0,
                   help="which text gets the per-layer/head heatmaps (default 0)")
    p.add_argument("--max-texts", type=int, default=200,
                   help="analyse at most this many texts (default 200; 0: all)")
    p.add_argument("--batch-size", type=int, default=8, help="texts per forward pass")
    p.set_defaults(handler=run_analyze)


def run_analyze(args, config) -> int:
    from kjax import paths
    from kjax.analysis.report import analyze, read_texts
    texts = read_texts(args.texts, args.text, args.max_texts)
    with paths.staged_dir(args.out) as out:   # a gs:// --out: written here, then uploaded
        report = analyze(config, args.workdir, out, texts, step=args.step, bf=args.bf,
                         sentence_index=args.sentence_index, batch_size=args.batch_size)
    print(json.dumps(headline(report, args.out), ensure_ascii=False, indent=2))
    return 0


def headline(report: dict, out_dir: str) -> dict:
    """The few numbers worth printing; everything else is in report.json."""
    runs = {}
    for name, run in report["runs"].items():
        shares = run["postposition_to_substantive"]
        runs[name] = {
            "bf": run["bf"][0] if len(set(run["bf"])) == 1 else run["bf"],
            "fx_norm_cv": run["fx_norm_cv"]["mean"],
            "spearman": {c: v["mean"] for c, v in run["spearman"].items()},
            "postposition_share_by_weight": shares.get("by_weight", {}).get("per_layer"),
            "postposition_share_by_norm": shares.get("by_norm", {}).get("per_layer"),
        }
    return {"step": report["checkpoint"]["step"], "texts": report["texts"]["count"],
            "report": f"{out_dir}/report.json", "pictures": len(report["pictures"]),
            "runs": runs}
