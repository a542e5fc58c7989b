"""The tables of docs/EXPERIMENTS.md's "ELECTRA vs MLM-only BERT at equal
pretraining compute" section, from the runs of experiments/electra_vs_mlm.sh.
Three tables, mean ± sample std (ddof 1) with n:
  1. pretraining per arm, over the pretraining seeds: steps and FLOPs
     (compute.json), wall and in-step seconds (goodput.json), the last held-out
     eval of metrics.jsonl (BERT's MLM; ELECTRA's generator MLM and
     discriminator RTD, next to answering "original" everywhere);
  2. fine-tuning per arm (dev scores of each run's ft/TASK_RUN/metrics.json)
     over the pretraining seeds, the whole-file NER also over pretraining ×
     fine-tuning seeds (ft/nerall_ftseeds_RUN/seed<n>), the no-model baselines
     and the random-weights control (ft/TASK_random/summary.json, over its
     fine-tuning seeds);
  3. one row per run.
A missing fine-tuning is "not run", a pretraining still under way "not finished".

    .venv/bin/python experiments/electra_vs_mlm_table.py [runs/electra_vs_mlm]
"""
from __future__ import annotations

import collections
import json
import os
import statistics
import sys

ARMS = (("bert", "BERT, MLM only"), ("electra", "ELECTRA (its discriminator)"))
METRIC = {"nli": "accuracy", "ner": "entity_f1", "nerall": "entity_f1"}


def load(path: str):
    return json.load(open(path)) if os.path.isfile(path) else None


def pretraining(run: str, steps) -> dict | None:
    """The last held-out eval of a run; None when it has none or has not
    reached `steps` (a run still training)."""
    path = os.path.join(run, "metrics.jsonl")
    if not os.path.isfile(path):
        return None
    evals = [r for r in map(json.loads, open(path)) if r["split"] == "eval"]
    if not evals or (steps is not None and evals[-1]["step"] != steps):
        return None
    last = evals[-1]
    out = {"step": last["step"], "mlm_accuracy": last["mlm_accuracy"],
           "mlm_loss": last["mlm_loss"]}
    if "rtd_accuracy" in last:
        out.update(rtd_accuracy=last["rtd_accuracy"], prior=1 - last["replaced_share"],
                   rtd_precision=last["rtd_precision"], rtd_recall=last["rtd_recall"])
    goodput = load(os.path.join(run, "goodput.json"))
    if goodput:
        out.update(wall=goodput["seconds"]["wall"], step_seconds=goodput["seconds"]["step"])
    return out


def finetuned(root: str, task: str, run: str) -> dict | None:
    """The dev metric of one fine-tuning (NLI: also macro F1 and the share of
    dev pairs given the commonest answer)."""
    folder = os.path.join(root, "ft", f"{task}_{run}")
    metrics = load(os.path.join(folder, "metrics.json"))
    if metrics is None:
        return None
    dev = metrics["results"]["+0"]["dev"]
    out = {"value": dev[METRIC[task]], "baseline": metrics["baseline"]["dev"][METRIC[task]]}
    predictions = os.path.join(folder, "predictions_dev.jsonl")
    if task == "nli" and os.path.isfile(predictions):
        labels = collections.Counter(json.loads(line)["pred"] for line in open(predictions))
        (label, count), = labels.most_common(1)
        out.update(macro_f1=dev["macro_f1"], label=label, count=count,
                   total=sum(labels.values()))
    return out


def ner_all_seeds(root: str, run: str) -> list[float]:
    """Whole-file NER dev entity F1: fine-tuning seed 0 (nerall_RUN), then the
    ftseeds stage's seeds (nerall_ftseeds_RUN/seed<n>)."""
    first = finetuned(root, "nerall", run)
    values = [first["value"]] if first else []
    extra = os.path.join(root, "ft", f"nerall_ftseeds_{run}")
    for seed in sorted(os.listdir(extra)) if os.path.isdir(extra) else []:
        metrics = load(os.path.join(extra, seed, "metrics.json"))
        if metrics:
            values.append(metrics["results"]["+0"]["dev"]["entity_f1"])
    return values


def mean_std(values: list[float], digits: int = 4) -> str:
    if not values:
        return "not run"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.{digits}f} ± {std:.{digits}f} (n={len(values)})"


def main(root: str) -> None:
    compute = load(os.path.join(root, "compute.json")) or {}
    steps = compute.get("steps", {})
    runs = sorted(d for d in os.listdir(root)
                  if os.path.isfile(os.path.join(root, d, "kjax_config.py")))
    by_arm = {arm: [r for r in runs if r.startswith(arm + "_s")] for arm, _ in ARMS}

    print("| arm | steps | FLOPs / example | FLOPs in all | wall per run (s) | of it in "
          "steps (s) | held-out MLM accuracy | held-out RTD accuracy | \"nothing "
          "replaced\" |")
    print("|---" * 9 + "|")
    for arm, title in ARMS:
        pre = [p for p in (pretraining(os.path.join(root, r), steps.get(arm))
                           for r in by_arm[arm]) if p]
        fpe = compute.get("flops_per_example", {}).get(arm, float("nan"))
        total = compute.get("total_flops", {}).get(arm, float("nan"))
        mlm = mean_std([p["mlm_accuracy"] for p in pre])
        rtd = [p for p in pre if "rtd_accuracy" in p]
        print(f"| {title} | {steps.get(arm, '—')} | {fpe:.4g} | {total:.4g} | "
              f"{mean_std([p['wall'] for p in pre if 'wall' in p], 0)} | "
              f"{mean_std([p['step_seconds'] for p in pre if 'wall' in p], 0)} | "
              f"{mlm}{' (generator)' if rtd else ''} | "
              f"{mean_std([p['rtd_accuracy'] for p in rtd]) if rtd else '—'} | "
              f"{mean_std([p['prior'] for p in rtd]) if rtd else '—'} |")

    print()
    print("| model | KLUE-NLI accuracy | KLUE-NER entity F1, 400 / 400 sentences | KLUE-NER "
          "entity F1, 4,000 / 1,000 | the same, pretraining × fine-tuning seeds |")
    print("|---" * 5 + "|")
    baselines = {}
    for arm, title in ARMS:
        cells = []
        for task in METRIC:
            rows = [f for f in (finetuned(root, task, r) for r in by_arm[arm]) if f]
            baselines.update({task: rows[0]["baseline"]} if rows else {})
            text = mean_std([f["value"] for f in rows])
            one_class = sum(f["count"] >= 0.99 * f["total"] for f in rows if "count" in f)
            if one_class:
                text += f"; {one_class} of {len(rows)} answer one class for ≥ 99 % of dev"
            cells.append(text)
        cells.append(mean_std([v for r in by_arm[arm] for v in ner_all_seeds(root, r)]))
        print(f"| {title} | {' | '.join(cells)} |")
    control = [load(os.path.join(root, "ft", f"{task}_random", "summary.json"))
               for task in METRIC]
    print("| random weights (`--init none`), over fine-tuning seeds | " +
          " | ".join("not run" if c is None else
                     "{mean:.4f} ± {std:.4f} (n={n})".format(**c["rows"][0]["dev"][METRIC[t]])
                     for c, t in zip(control, METRIC)) + " | |")
    print("| baseline (no model: NLI training majority, NER all-O) | " +
          " | ".join(f"{baselines.get(t, float('nan')):.4f}" for t in METRIC) + " | |")

    print()
    print("| run | steps | wall / in steps (s) | held-out MLM loss / accuracy | RTD accuracy, "
          "precision, recall | NLI accuracy (macro F1; the commonest answer) | NER 400 | "
          "NER 4,000 (fine-tuning seeds 0, 1, 2) |")
    print("|---" * 8 + "|")
    for r in runs:
        p = pretraining(os.path.join(root, r), steps.get(r.split("_s")[0]))
        if p is None:
            print(f"| {r} | not finished | | | | | | |")
            continue
        rtd = (f"{p['rtd_accuracy']:.4f}, {p['rtd_precision']:.3f}, {p['rtd_recall']:.3f}"
               if "rtd_accuracy" in p else "—")
        nli, ner = finetuned(root, "nli", r), finetuned(root, "ner", r)
        nli = ("not run" if nli is None else
               f"{nli['value']:.4f} ({nli['macro_f1']:.3f}; {nli['count']}/{nli['total']} "
               f"{nli['label']})" if "count" in nli else f"{nli['value']:.4f}")
        ner = "not run" if ner is None else f"{ner['value']:.4f}"
        ner_all = ", ".join(f"{v:.4f}" for v in ner_all_seeds(root, r)) or "not run"
        print(f"| {r} | {p['step']} | {p.get('wall', float('nan')):.0f} / "
              f"{p.get('step_seconds', float('nan')):.0f} | {p['mlm_loss']:.4f} / "
              f"{p['mlm_accuracy']:.4f} | {rtd} | {nli} | {ner} | {ner_all} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/electra_vs_mlm")
