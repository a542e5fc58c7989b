r"""BERT-large (METHODS §4): 24 layers, 1024 hidden, 16 heads, 4096 FFN.

    kjax train --config tpu_configs/bert_large.py --workdir gs://BUCKET/bert_large

Expected: ~335M parameters. Compile time with scan stays close to that of
BERT-base (the "CPU s" column of docs/TPU.md §15's table).

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
256 (32 per core) the train step needs 12.41 GiB per core of 16 (arguments
0.47, temporaries 11.94): fits.
`kjax compile --config tpu_configs/bert_large.py --topology v3-8` says it
again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).

With the remat policy below and no FSDP the margin is thin: XLA's own
accounting decides what fits (docs/TPU.md §15). For a bigger batch shard the
params and Adam state (--config.mesh.fsdp=8 --config.mesh.data=1), which the
arguments are.
"""
from kjax.config import defaults


def get_config():
    c = defaults()   # the full tree; set only what differs
    c.name = "bert_large"
    c.model.update(vocab_size=32000, hidden_size=1024, num_layers=24, num_heads=16,
                   intermediate_size=4096, max_position_embeddings=512,
                   remat_policy="dots_with_no_batch_dims_saveable")
    c.tokenizer.update(vocab_size=32000, path="runs/bert_large_data/tokenizer/sp")
    c.data.update(dir="runs/bert_large_data/examples", max_seq_len=512,
                  max_predictions_per_seq=80)
    c.train.update(batch_size=256, num_steps=1_000_000, learning_rate=1e-4,
                   warmup_steps=10_000)
    return c
