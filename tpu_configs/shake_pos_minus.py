r"""SHAKE RoBERTa-small, POS pairs, bf = -0.3 (variant 3) — METHODS §1.5.

    kjax tokenizer train --config tpu_configs/shake_pos_minus.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/shake_pos_minus.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/shake_pos_minus.py --workdir gs://BUCKET/shake_pos_minus

The six shake_*.py files share one morph-sp vocabulary and one example set
(runs/shake_data): train the tokenizer and prepare once, then pretrain each.
Expected (what the thesis reported): evaluation MLM loss as low as bf = +0.3
(Fig. 2); smaller downstream gains than +0.3.

Compiled for a v3-8 (`kjax compile --config tpu_configs/shake_pos_minus.py
--topology v3-8`; libtpu 0.0.42.1, no TPU, 2026-11-27, `make tpu-check`): at
batch 256 (32 per core) the train step needs 10.30 GiB per core of 16 (arguments
0.78, temporaries 9.53): fits. Its program is shake_pos_plus's up to SHAKE's bf
constant, so it was compiled once for both. The largest batch that compiles is
384 (48 per core; 392 is refused): `--fit-batch` on shake_pos_plus.py, the same
program (2026-11-26).
"""
from kjax.config.presets import shake_config


def get_config():
    return shake_config("pos_minus")
