r"""SHAKE RoBERTa-small, a postposition takes its substantive's position id (variant 5) — METHODS §1.5.

    kjax tokenizer train --config tpu_configs/shake_shared_position.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/shake_shared_position.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/shake_shared_position.py --workdir gs://BUCKET/shake_shared_position

The six shake_*.py files share one morph-sp vocabulary and one example set
(runs/shake_data): train the tokenizer and prepare once, then pretrain each.
Expected (what the thesis reported): no gain reported over the POS-pair models;
kept as the thesis's ablation.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
256 (32 per core) the train step needs 7.15 GiB per core of 16 (arguments 0.10,
temporaries 7.04): fits.
`kjax compile --config tpu_configs/shake_shared_position.py --topology v3-8`
says it again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).
"""
from kjax.config.presets import shake_config


def get_config():
    return shake_config("shared_position")
