r"""SHAKE RoBERTa-small, POS pairs, bf = +0.3 (variant 2) — METHODS §1.5.

    kjax tokenizer train --config tpu_configs/shake_pos_plus.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/shake_pos_plus.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/shake_pos_plus.py --workdir gs://BUCKET/shake_pos_plus

The six shake_*.py files share one morph-sp vocabulary and one example set
(runs/shake_data): train the tokenizer and prepare once, then pretrain each.
Expected (what the thesis reported): among the lowest evaluation MLM loss (Fig.
2); the best downstream model: gains on most KLUE/NIKL tasks except BoolQ, most
on CoPA, even fine-tuned without shaking; the gain grows with pretraining length
(Fig. 4).

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
256 (32 per core) the train step needs 7.18 GiB per core of 16 (arguments 0.11,
temporaries 7.07): fits.
`kjax compile --config tpu_configs/shake_pos_plus.py --topology v3-8` says it
again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).
"""
from kjax.config.presets import shake_config


def get_config():
    return shake_config("pos_plus")
