r"""SHAKE RoBERTa-small, no manipulation (variant 1) — METHODS §1.5.

    kjax tokenizer train --config tpu_configs/shake_baseline.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/shake_baseline.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/shake_baseline.py --workdir gs://BUCKET/shake_baseline

The six shake_*.py files share one morph-sp vocabulary and one example set
(runs/shake_data): train the tokenizer and prepare once, then pretrain each.
Expected (what the thesis reported): the reference: evaluation MLM loss above
the bf = ±0.3 models and close to the random-token model (SHAKE Fig. 2).
"""
from kjax.config.presets import shake_config


def get_config():
    return shake_config("baseline")
