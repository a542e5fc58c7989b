r"""BERT-large (METHODS §4): 24 layers, 1024 hidden, 16 heads, 4096 FFN.

    kjax train --config tpu_configs/bert_large.py --workdir gs://BUCKET/bert_large \
        --config.mesh.fsdp=8

Expected: ~335M parameters; needs FSDP (mesh.fsdp > 1) and remat on 16 GB
TPU v3 cores. Compile time with scan stays close to that of BERT-base.
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
