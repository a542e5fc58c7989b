r"""SHAKE RoBERTa-small, a postposition takes its substantive's position id (variant 5) — METHODS §1.5.

    kjax tokenizer train --config tpu_configs/shake_shared_position.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/shake_shared_position.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/shake_shared_position.py --workdir gs://BUCKET/shake_shared_position

The six shake_*.py files share one morph-sp vocabulary and one example set
(runs/shake_data): train the tokenizer and prepare once, then pretrain each.
Expected (what the thesis reported): no gain reported over the POS-pair models;
kept as the thesis's ablation.
"""
from kjax.config.presets import shake_config


def get_config():
    return shake_config("shared_position")
