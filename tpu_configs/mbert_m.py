r"""mBERT-m (METHODS §2.5, Table 22): multi-hot morpheme input, MLM only (Eq. 7-9 loss).

    kjax tokenizer train --config tpu_configs/mbert_m.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/mbert_m.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/mbert_m.py --workdir gs://BUCKET/mbert_m

Expected (what the thesis reported): the multi-hot input alone; compare with mBERT-S for the effect of NSP.
Knowledge resources default to the samples shipped in kjax/knowledge/data; point
knowledge.hypernyms / sense_vectors / case_frames at your own files.
"""
from kjax.config.presets import uknow_config


def get_config():
    return uknow_config("mbert_m", "small", multihot=True, objectives=("mlm",))
