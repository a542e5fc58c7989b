r"""UKnowBERT-r (METHODS §2.5, Table 22): multi-hot input, MLM + NSP + verb relation.

    kjax tokenizer train --config tpu_configs/uknowbert_r.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/uknowbert_r.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/uknowbert_r.py --workdir gs://BUCKET/uknowbert_r

Expected (what the thesis reported): the verb-relation objective alone on top of mBERT-S.
Knowledge resources default to the samples shipped in kjax/knowledge/data; point
knowledge.hypernyms / sense_vectors / case_frames at your own files.
"""
from kjax.config.presets import uknow_config


def get_config():
    return uknow_config("uknowbert_r", "small", multihot=True, objectives=("mlm", "nsp", "verb"))
