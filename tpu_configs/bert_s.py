r"""BERT-S (METHODS §2.5, Table 22): one-hot (morph-sp) input, MLM + NSP.

    kjax tokenizer train --config tpu_configs/bert_s.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/bert_s.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/bert_s.py --workdir gs://BUCKET/bert_s

Expected (what the thesis reported): KorQuAD F1 65.04 with 10 % of the fine-tuning data (Table 28), the baseline UKnowBERT-S beats.
Knowledge resources default to the samples shipped in kjax/knowledge/data; point
knowledge.hypernyms / sense_vectors / case_frames at your own files.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
128 (16 per core) the train step needs 0.51 GiB per core of 16 (arguments 0.02,
temporaries 0.50): fits.
`kjax compile --config tpu_configs/bert_s.py --topology v3-8` says it again;
with `--fit-batch`, also the largest batch that compiles (docs/TPU.md §15).
"""
from kjax.config.presets import uknow_config


def get_config():
    return uknow_config("bert_s", "small", multihot=False, objectives=("mlm", "nsp"))
