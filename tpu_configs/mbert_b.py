r"""mBERT-B (METHODS §2.5, Table 22): multi-hot input, MLM + NSP, base size.

    kjax tokenizer train --config tpu_configs/mbert_b.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/mbert_b.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/mbert_b.py --workdir gs://BUCKET/mbert_b

Expected (what the thesis reported): KorQuAD F1 83.89 / NER 89.23 / NSMC 88.34 (Table 27).
Knowledge resources default to the samples shipped in kjax/knowledge/data; point
knowledge.hypernyms / sense_vectors / case_frames at your own files.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
128 (16 per core) the train step needs 3.43 GiB per core of 16 (arguments 0.17,
temporaries 3.26): fits.
`kjax compile --config tpu_configs/mbert_b.py --topology v3-8` says it again;
with `--fit-batch`, also the largest batch that compiles (docs/TPU.md §15).
"""
from kjax.config.presets import uknow_config


def get_config():
    return uknow_config("mbert_b", "base", multihot=True, objectives=("mlm", "nsp"))
