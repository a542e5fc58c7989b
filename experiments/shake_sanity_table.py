"""The SHAKE rows of docs/FINETUNE.md's sanity table, from the runs of
experiments/shake_sanity.sh: per variant, the eval MLM loss and accuracy at
the last pretraining step (metrics.jsonl) and, per fine-tuned task, the
primary dev metric (test in brackets where there is a test split) as
mean ± sample std over the seeds (summary.json). A missing run is "not run".

    .venv/bin/python experiments/shake_sanity_table.py [runs/shake_sanity]
"""
from __future__ import annotations

import json
import os
import sys

VARIANTS = (("baseline", "1 baseline"), ("pos_plus", "2 POS bf +0.3"),
            ("pos_minus", "3 POS bf −0.3"), ("random", "4 random p 8 %, bf 0.2"),
            ("shared_position", "5 shared position ids"), ("merged", "6 merged (Eq. 9 loss)"))
TASKS = (("ner", "KLUE-NER entity F1"), ("nli", "KLUE-NLI accuracy"), ("qa", "KorQuAD F1"))


def pretraining(run: str) -> str:
    rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    last = [r for r in rows if r["split"] == "eval"][-1]
    return f"{last['mlm_loss']:.4f} | {last['mlm_accuracy']:.4f}"


def finetuned(path: str) -> str:
    if not os.path.isfile(path):
        return "not run"
    summary = json.load(open(path))
    row, metric = summary["rows"][0], summary["metric"]
    text = "{mean:.4f} ± {std:.4f}".format(**row["dev"][metric])
    if "test" in row:
        text += " ({mean:.4f} ± {std:.4f})".format(**row["test"][metric])
    return text


def main(root: str) -> None:
    print("| variant | eval MLM loss | eval MLM accuracy | "
          + " | ".join(title for _, title in TASKS) + " |")
    print("|---" * (3 + len(TASKS)) + "|")
    for name, title in VARIANTS:
        cells = [finetuned(os.path.join(root, "ft", f"{task}_{name}", "summary.json"))
                 for task, _ in TASKS]
        print(f"| {title} | {pretraining(os.path.join(root, name))} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/shake_sanity")
