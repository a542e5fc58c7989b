r"""UKNOW-small (METHODS §2.6, Table 13): 4 layers, 256 hidden, 4 heads,
sequences of 256, batch 128, lr 1e-4, 1M steps (the thesis ran it on TPU v2).

    kjax tokenizer train --config tpu_configs/uknow_small.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/uknow_small.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/uknow_small.py --workdir runs/uknow_small

Expected: one-hot BERT-S of the thesis (49 MB of fp32 params with a 32k
vocabulary here); the MLM loss falls below 3 within ~100k steps on a
newspaper-scale corpus. On this 2-core CPU: see docs/PERFORMANCE.md.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
128 (16 per core) the train step needs 0.52 GiB per core of 16 (arguments 0.02,
temporaries 0.50): fits.
`kjax compile --config tpu_configs/uknow_small.py --topology v3-8` says it
again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).
"""
from kjax.config import defaults


def get_config():
    c = defaults()   # the full tree; set only what differs
    c.name = "uknow_small"
    c.model.update(vocab_size=32000, hidden_size=256, num_layers=4, num_heads=4,
                   intermediate_size=1024, max_position_embeddings=256)
    c.tokenizer.update(vocab_size=32000, path="runs/uknow_small_data/tokenizer/sp")
    c.data.update(dir="runs/uknow_small_data/examples", max_seq_len=256,
                  max_predictions_per_seq=40)
    c.train.update(batch_size=128, num_steps=1_000_000, learning_rate=1e-4,
                   warmup_steps=10_000)
    return c
