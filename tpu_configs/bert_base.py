r"""BERT-base (METHODS §4): 12 layers, 768 hidden, 12 heads, 3072 FFN,
sequences of 512 (UKNOW base, Table 13: batch 128, lr 1e-4, 1M steps, TPU v3).

    kjax tokenizer train --config tpu_configs/bert_base.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/bert_base.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/bert_base.py --workdir gs://BUCKET/bert_base

Expected: ~110M parameters (436 MB fp32, as Table 13's one-hot base); the
thesis' BERT-B reached KorQuAD F1 84.11 / NER 88.45 / NSMC 86.98 after
fine-tuning (Table 27). Use remat_policy='dots_with_no_batch_dims_saveable'
when memory is short.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
128 (16 per core) the train step needs 6.72 GiB per core of 16 (arguments 0.17,
temporaries 6.56): fits. XLA compiled its program once for it and v3_8.py (the
same up to floating-point constants).
`kjax compile --config tpu_configs/bert_base.py --topology v3-8` says it again;
with `--fit-batch`, also the largest batch that compiles (docs/TPU.md §15).
"""
from kjax.config import defaults


def get_config():
    c = defaults()   # the full tree; set only what differs
    c.name = "bert_base"
    c.model.update(vocab_size=32000, hidden_size=768, num_layers=12, num_heads=12,
                   intermediate_size=3072, max_position_embeddings=512)
    c.tokenizer.update(vocab_size=32000, path="runs/bert_base_data/tokenizer/sp")
    c.data.update(dir="runs/bert_base_data/examples", max_seq_len=512,
                  max_predictions_per_seq=80)
    c.train.update(batch_size=128, num_steps=1_000_000, learning_rate=1e-4,
                   warmup_steps=10_000)
    return c
