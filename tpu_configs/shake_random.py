r"""SHAKE RoBERTa-small, random tokens, p = 8 %, bf = 0.2 (variant 4) — METHODS §1.5.

    kjax tokenizer train --config tpu_configs/shake_random.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/shake_random.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/shake_random.py --workdir gs://BUCKET/shake_random

The six shake_*.py files share one morph-sp vocabulary and one example set
(runs/shake_data): train the tokenizer and prepare once, then pretrain each.
Expected (what the thesis reported): evaluation MLM loss close to the baseline;
acts like a regulariser.

Compiled for a v3-8 (`kjax compile --config tpu_configs/shake_random.py
--topology v3-8`; libtpu 0.0.42.1, no TPU, 2026-11-27, `make tpu-check`): at
batch 256 (32 per core) the train step needs 10.30 GiB per core of 16 (arguments
0.78, temporaries 9.53): fits. Its program is shake_pos_plus's up to SHAKE's bf
constant, so it was compiled once for both. The largest batch that compiles is
384 (48 per core; 392 is refused): `--fit-batch` on shake_pos_plus.py, the same
program (2026-11-26).
"""
from kjax.config.presets import shake_config


def get_config():
    return shake_config("random")
