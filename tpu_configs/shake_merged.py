r"""SHAKE RoBERTa-small, substantive + postposition as one position, embedding = sum of the two (variant 6) — METHODS §1.5.

    kjax tokenizer train --config tpu_configs/shake_merged.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/shake_merged.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/shake_merged.py --workdir gs://BUCKET/shake_merged

The six shake_*.py files share one morph-sp vocabulary and one example set
(runs/shake_data): train the tokenizer and prepare once, then pretrain each.
Expected (what the thesis reported): no gain reported over the POS-pair models;
kept as the thesis's ablation. MLM loss is Eq. 7-9 because a merged position has
several target tokens.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
256 (32 per core) the train step needs 6.81 GiB per core of 16 (arguments 0.10,
temporaries 6.70): fits.
`kjax compile --config tpu_configs/shake_merged.py --topology v3-8` says it
again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).
"""
from kjax.config.presets import shake_config


def get_config():
    return shake_config("merged")
