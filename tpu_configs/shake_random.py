r"""SHAKE RoBERTa-small, random tokens, p = 8 %, bf = 0.2 (variant 4) — METHODS §1.5.

    kjax tokenizer train --config tpu_configs/shake_random.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/shake_random.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/shake_random.py --workdir gs://BUCKET/shake_random

The six shake_*.py files share one morph-sp vocabulary and one example set
(runs/shake_data): train the tokenizer and prepare once, then pretrain each.
Expected (what the thesis reported): evaluation MLM loss close to the baseline;
acts like a regulariser.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
256 (32 per core) the train step needs 7.18 GiB per core of 16 (arguments 0.11,
temporaries 7.07): fits. XLA compiled its program once for it and
shake_pos_plus.py (the same up to floating-point constants).
`kjax compile --config tpu_configs/shake_random.py --topology v3-8` says it
again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).
"""
from kjax.config.presets import shake_config


def get_config():
    return shake_config("random")
