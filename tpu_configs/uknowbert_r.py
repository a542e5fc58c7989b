r"""UKnowBERT-r (METHODS §2.5, Table 22): multi-hot input, MLM + NSP + verb relation.

    kjax tokenizer train --config tpu_configs/uknowbert_r.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/uknowbert_r.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/uknowbert_r.py --workdir gs://BUCKET/uknowbert_r

Expected (what the thesis reported): the verb-relation objective alone on top of mBERT-S.
Knowledge resources default to the samples shipped in kjax/knowledge/data; point
knowledge.hypernyms / sense_vectors / case_frames at your own files.

Compiled for a v3-8 (`kjax compile --config tpu_configs/uknowbert_r.py
--topology v3-8`; libtpu 0.0.42.1, no TPU, 2026-11-27, `make tpu-check`): at
batch 128 (16 per core) the train step needs 0.90 GiB per core of 16 (arguments
0.13, temporaries 0.77): fits. With `--fit-batch` (2026-11-26) the largest batch
that compiles is 3520 (440 per core; 3624 is refused), its memory as XLA reports
it 20.59 GiB.
"""
from kjax.config.presets import uknow_config


def get_config():
    return uknow_config("uknowbert_r", "small", multihot=True, objectives=("mlm", "nsp", "verb"))
