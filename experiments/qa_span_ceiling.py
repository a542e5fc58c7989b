"""The ceiling the answer-span mapping leaves on KorQuAD: logits that point
exactly at each window's labels (the answer's first/last token, moved to the
input mode's positions) are decoded like a model's, and scored with the
official EM/F1. What is lost is where an answer edge cuts a token (or a
merged position). Needs a pretraining run's recorded config (its tokenizer
and input mode) and the KorQuAD 1.0 dev set (where to get it, its version
and licence: docs/DATA.md), as a data folder or the file itself:

    python experiments/qa_span_ceiling.py runs/demo --data DIR            # one-hot, sentencepiece
    python experiments/qa_span_ceiling.py runs/demo_multihot --data DIR   # multi-hot morphemes

Readings (2026-11-24, first 400 questions per split of the article split
(0.5, 0.5), max_seq_len 128, doc_stride 64): docs/FINETUNE.md.
"""
import argparse
import os

import numpy as np

from kjax.config import load_config
from kjax.finetune.experiment import make_tuner
from kjax.finetune.qa import decode_answers, gold_answers
from kjax.finetune.qa_metrics import qa_metrics


def main(workdir: str, data: str) -> None:
    config = load_config(f"{workdir}/kjax_config.py", [
        "--config.finetune.max_examples=400", "--config.finetune.split=(0.5,0.5)",
        "--config.finetune.doc_stride=64"])
    tuner = make_tuner(config, config.finetune, "qa", data, init="none")
    for split in ("train", "dev"):
        feats, examples = tuner.data.features[split], tuner.data.examples[split]
        outputs = []
        for row in range(len(feats)):
            logits = np.full((feats.input_ids.shape[1], 2), -5.0)
            logits[feats.labels[row, 0], 0] = logits[feats.labels[row, 1], 1] = 5.0
            outputs.append(logits)
        scores = qa_metrics(gold_answers(examples), decode_answers(feats, outputs, examples))
        print(workdir, split, f"{len(examples)} questions, {len(feats)} windows",
              {k: round(v, 4) for k, v in scores.items()})


KORQUAD_DEV = os.path.join("korquad", "KorQuAD_v1.0_dev.json")   # docs/DATA.md's layout


def korquad_file(data: str) -> str:
    """--data names the data folder (docs/DATA.md) or the KorQuAD file itself."""
    return os.path.join(data, KORQUAD_DEV) if os.path.isdir(data) else data


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Data: docs/DATA.md (KorQuAD 1.0, CC BY-ND 2.0 KR).")
    parser.add_argument("workdir", help="a pretraining run (its kjax_config.py)")
    parser.add_argument("--data", required=True,
                        help=f"data folder holding {KORQUAD_DEV}, or that JSON file")
    args = parser.parse_args()
    main(args.workdir, korquad_file(args.data))
