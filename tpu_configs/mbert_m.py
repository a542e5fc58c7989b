r"""mBERT-m (METHODS §2.5, Table 22): multi-hot morpheme input, MLM only (Eq. 7-9 loss).

    kjax tokenizer train --config tpu_configs/mbert_m.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/mbert_m.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/mbert_m.py --workdir gs://BUCKET/mbert_m

Expected (what the thesis reported): the multi-hot input alone; compare with mBERT-S for the effect of NSP.
Knowledge resources default to the samples shipped in kjax/knowledge/data; point
knowledge.hypernyms / sense_vectors / case_frames at your own files.

Compiled for a v3-8 (`kjax compile --config tpu_configs/mbert_m.py --topology
v3-8`; libtpu 0.0.42.1, no TPU, 2026-11-27, `make tpu-check`): at batch 128 (16
per core) the train step needs 0.90 GiB per core of 16 (arguments 0.13,
temporaries 0.77): fits. With `--fit-batch` (2026-11-26) the largest batch that
compiles is 3576 (447 per core; 3680 is refused), its memory as XLA reports it
20.71 GiB.
"""
from kjax.config.presets import uknow_config


def get_config():
    return uknow_config("mbert_m", "small", multihot=True, objectives=("mlm",))
