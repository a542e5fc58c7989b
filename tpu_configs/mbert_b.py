r"""mBERT-B (METHODS §2.5, Table 22): multi-hot input, MLM + NSP, base size.

    kjax tokenizer train --config tpu_configs/mbert_b.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/mbert_b.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/mbert_b.py --workdir gs://BUCKET/mbert_b

Expected (what the thesis reported): KorQuAD F1 83.89 / NER 89.23 / NSMC 88.34 (Table 27).
Knowledge resources default to the samples shipped in kjax/knowledge/data; point
knowledge.hypernyms / sense_vectors / case_frames at your own files.
"""
from kjax.config.presets import uknow_config


def get_config():
    return uknow_config("mbert_b", "base", multihot=True, objectives=("mlm", "nsp"))
