r"""BERT-B (METHODS §2.5, Table 22): one-hot (morph-sp) input, MLM + NSP, base size.

    kjax tokenizer train --config tpu_configs/bert_b.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/bert_b.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/bert_b.py --workdir gs://BUCKET/bert_b

Expected (what the thesis reported): KorQuAD F1 84.11 / NER 88.45 / NSMC 86.98 (Table 27).
Knowledge resources default to the samples shipped in kjax/knowledge/data; point
knowledge.hypernyms / sense_vectors / case_frames at your own files.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
128 (16 per core) the train step needs 3.48 GiB per core of 16 (arguments 0.17,
temporaries 3.31): fits.
`kjax compile --config tpu_configs/bert_b.py --topology v3-8` says it again;
with `--fit-batch`, also the largest batch that compiles (docs/TPU.md §15).
"""
from kjax.config.presets import uknow_config


def get_config():
    return uknow_config("bert_b", "base", multihot=False, objectives=("mlm", "nsp"))
