r"""RoBERTa-small as pretrained in SHAKE (METHODS §1.5): 6 layers, 12 heads,
768 hidden. This is the baseline (no manipulation); the shaking variants
(POS ±0.3, random 8 %/0.2, shared position, merged embedding) set
model.shake_factor and the B source on top of it.

    kjax tokenizer train --config tpu_configs/roberta_small_shake.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/roberta_small_shake.py --config.data.corpus='corpus/*.txt'
    kjax train   --config tpu_configs/roberta_small_shake.py --workdir runs/roberta_small

Expected (SHAKE Fig. 2): baseline evaluation MLM loss above that of the
bf = ±0.3 models. RoBERTa-style here means: no NSP loss (nsp_weight 0),
dynamic masking, longer sequences; the NSP head still exists but is unused.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
256 (32 per core) the train step needs 7.12 GiB per core of 16 (arguments 0.10,
temporaries 7.01): fits.
`kjax compile --config tpu_configs/roberta_small_shake.py --topology v3-8` says
it again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).
"""
from kjax.config import defaults


def get_config():
    c = defaults()   # the full tree; set only what differs
    c.name = "roberta_small_shake"
    c.model.update(vocab_size=32000, hidden_size=768, num_layers=6, num_heads=12,
                   intermediate_size=3072, max_position_embeddings=512,
                   layer_norm_eps=1e-5)
    c.tokenizer.update(vocab_size=32000, path="runs/roberta_small_data/tokenizer/sp")
    c.data.update(dir="runs/roberta_small_data/examples", max_seq_len=512,
                  max_predictions_per_seq=80, masking="dynamic", nsp_prob=0.0)
    c.train.update(batch_size=256, num_steps=500_000, learning_rate=6e-4, warmup_steps=24_000,
                   nsp_weight=0.0, b2=0.98)
    return c
