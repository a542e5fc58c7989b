r"""SHAKE RoBERTa-small, POS pairs, bf = -0.3 (variant 3) — METHODS §1.5.

    kjax tokenizer train --config tpu_configs/shake_pos_minus.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/shake_pos_minus.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/shake_pos_minus.py --workdir gs://BUCKET/shake_pos_minus

The six shake_*.py files share one morph-sp vocabulary and one example set
(runs/shake_data): train the tokenizer and prepare once, then pretrain each.
Expected (what the thesis reported): evaluation MLM loss as low as bf = +0.3
(Fig. 2); smaller downstream gains than +0.3.
"""
from kjax.config.presets import shake_config


def get_config():
    return shake_config("pos_minus")
