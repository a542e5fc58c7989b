r"""UKnowBERT-S (METHODS §2.5, Table 22): multi-hot input, all five objectives.

    kjax tokenizer train --config tpu_configs/uknowbert_s.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/uknowbert_s.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/uknowbert_s.py --workdir gs://BUCKET/uknowbert_s

Expected (what the thesis reported): KorQuAD F1 72.08 with 10 % of the fine-tuning data vs BERT-S 65.04 (Table 28); converges faster (plateau by 300k vs 600k steps, Fig. 48).
Knowledge resources default to the samples shipped in kjax/knowledge/data; point
knowledge.hypernyms / sense_vectors / case_frames at your own files.

Compiled for a v3-8 (`kjax compile --config tpu_configs/uknowbert_s.py
--topology v3-8`; libtpu 0.0.42.1, no TPU, 2026-11-27, `make tpu-check`): at
batch 128 (16 per core) the train step needs 1.02 GiB per core of 16 (arguments
0.13, temporaries 0.89): fits. With `--fit-batch` (2026-11-26) the largest batch
that compiles is 3272 (409 per core; 3368 is refused), its memory as XLA reports
it 21.09 GiB.
"""
from kjax.config.presets import uknow_config


def get_config():
    return uknow_config("uknowbert_s", "small", multihot=True, objectives=("mlm", "nsp", "hypernym", "sense", "verb"))
