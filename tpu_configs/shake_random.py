r"""SHAKE RoBERTa-small, random tokens, p = 8 %, bf = 0.2 (variant 4) — METHODS §1.5.

    kjax tokenizer train --config tpu_configs/shake_random.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/shake_random.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/shake_random.py --workdir gs://BUCKET/shake_random

The six shake_*.py files share one morph-sp vocabulary and one example set
(runs/shake_data): train the tokenizer and prepare once, then pretrain each.
Expected (what the thesis reported): evaluation MLM loss close to the baseline;
acts like a regulariser.
"""
from kjax.config.presets import shake_config


def get_config():
    return shake_config("random")
