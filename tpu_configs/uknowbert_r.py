r"""UKnowBERT-r (METHODS §2.5, Table 22): multi-hot input, MLM + NSP + verb relation.

    kjax tokenizer train --config tpu_configs/uknowbert_r.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/uknowbert_r.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/uknowbert_r.py --workdir gs://BUCKET/uknowbert_r

Expected (what the thesis reported): the verb-relation objective alone on top of mBERT-S.
Knowledge resources default to the samples shipped in kjax/knowledge/data; point
knowledge.hypernyms / sense_vectors / case_frames at your own files.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
128 (16 per core) the train step needs 0.71 GiB per core of 16 (arguments 0.02,
temporaries 0.69): fits.
`kjax compile --config tpu_configs/uknowbert_r.py --topology v3-8` says it
again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).
"""
from kjax.config.presets import uknow_config


def get_config():
    return uknow_config("uknowbert_r", "small", multihot=True, objectives=("mlm", "nsp", "verb"))
