r"""SHAKE RoBERTa-small, no manipulation (variant 1) — METHODS §1.5.

    kjax tokenizer train --config tpu_configs/shake_baseline.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/shake_baseline.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/shake_baseline.py --workdir gs://BUCKET/shake_baseline

The six shake_*.py files share one morph-sp vocabulary and one example set
(runs/shake_data): train the tokenizer and prepare once, then pretrain each.
Expected (what the thesis reported): the reference: evaluation MLM loss above
the bf = ±0.3 models and close to the random-token model (SHAKE Fig. 2).

Compiled for a v3-8 (`kjax compile --config tpu_configs/shake_baseline.py
--topology v3-8`; libtpu 0.0.42.1, no TPU, 2026-11-27, `make tpu-check`): at
batch 256 (32 per core) the train step needs 9.13 GiB per core of 16 (arguments
0.77, temporaries 8.37): fits. Its program is roberta_small_shake's up to
SHAKE's bf constant, so it was compiled once for both. The largest batch that
compiles is 440 (55 per core; 448 is refused): `--fit-batch` on
roberta_small_shake.py, the same program (2026-11-26).
"""
from kjax.config.presets import shake_config


def get_config():
    return shake_config("baseline")
