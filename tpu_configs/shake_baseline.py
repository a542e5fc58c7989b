r"""SHAKE RoBERTa-small, no manipulation (variant 1) — METHODS §1.5.

    kjax tokenizer train --config tpu_configs/shake_baseline.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/shake_baseline.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/shake_baseline.py --workdir gs://BUCKET/shake_baseline

The six shake_*.py files share one morph-sp vocabulary and one example set
(runs/shake_data): train the tokenizer and prepare once, then pretrain each.
Expected (what the thesis reported): the reference: evaluation MLM loss above
the bf = ±0.3 models and close to the random-token model (SHAKE Fig. 2).

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
256 (32 per core) the train step needs 7.12 GiB per core of 16 (arguments 0.10,
temporaries 7.01): fits. XLA compiled its program once for it and
roberta_small_shake.py (the same up to floating-point constants).
`kjax compile --config tpu_configs/shake_baseline.py --topology v3-8` says it
again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).
"""
from kjax.config.presets import shake_config


def get_config():
    return shake_config("baseline")
