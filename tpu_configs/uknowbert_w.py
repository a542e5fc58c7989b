r"""UKnowBERT-w (METHODS §2.5, Table 22): multi-hot input, MLM + NSP + hypernym + sense vector.

    kjax tokenizer train --config tpu_configs/uknowbert_w.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/uknowbert_w.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/uknowbert_w.py --workdir gs://BUCKET/uknowbert_w

Expected (what the thesis reported): the word-knowledge objectives alone on top of mBERT-S.
Knowledge resources default to the samples shipped in kjax/knowledge/data; point
knowledge.hypernyms / sense_vectors / case_frames at your own files.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
128 (16 per core) the train step needs 0.78 GiB per core of 16 (arguments 0.02,
temporaries 0.76): fits.
`kjax compile --config tpu_configs/uknowbert_w.py --topology v3-8` says it
again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).
"""
from kjax.config.presets import uknow_config


def get_config():
    return uknow_config("uknowbert_w", "small", multihot=True, objectives=("mlm", "nsp", "hypernym", "sense"))
