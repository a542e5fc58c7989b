r"""RoBERTa-base's recipe (Liu et al. 2019, "RoBERTa: A Robustly Optimized BERT
Pretraining Approach", the appendix's pretraining hyperparameters) on a 32k
Korean vocabulary: BERT-base's shape (12 layers, 768 hidden, 12 heads, 3072
FFN, dropout 0.1), MLM alone (no NSP) on full-length rows of 512, dynamic
masking of single tokens; batch 8k sequences, Adam β 0.9/0.98, eps 1e-6,
weight decay 0.01, peak lr 6e-4 after 24k warmup steps, linear decay to 0
at 500k steps.

    kjax tokenizer train --config tpu_configs/roberta_base.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/roberta_base.py --config.data.corpus='corpus/*.txt' --workers 8
    kjax train   --config tpu_configs/roberta_base.py --workdir gs://BUCKET/roberta_base
    kjax compile --config tpu_configs/roberta_base.py --topology v3-8

Expected: ~110M parameters (RoBERTa-base has 125M with its 50k BPE
vocabulary); `kjax compile` on a v3-8 reports batch 8192 in 64 microbatches
of 128 (16 per core) and says whether it fits (the paragraph below).

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
8192 (1024 per core) the train step needs 7.59 GiB per core of 16 (arguments
0.18, temporaries 7.41): fits.
`kjax compile --config tpu_configs/roberta_base.py --topology v3-8` says it
again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).

Full-length rows, kjax's form of RoBERTa's FULL-SENTENCES: data.nsp_prob=0 and
data.short_seq_prob=0 make every example one stretch of a document filled to
512 tokens, and train.packing fills the rows a document's end leaves short
with further examples (packing needs no NSP and one-hot input). Unlike
FULL-SENTENCES, an example never crosses a document boundary, and a packed
row's examples never attend to each other. RoBERTa clips no gradient
(gradient clipping 0.0); kjax keeps its global-norm clip at 1.0.

Batch 8192 on a v3-8 (8 cores of 16 GiB) is 1024 rows per core a step:
train.microbatches=64 runs it as microbatches of 128 rows, 16 per core, the
load of v3_8.py, which fits without remat with room for the fp32 gradient
sum (0.41 GiB). The gradients are reduced once a step however many
microbatches run (kjax/train/accumulation.py: 422 MiB per core, not 64
times that), so k costs only the loop's overhead; 32 microbatches, 32 rows
per core, also compile, with no room to spare (XLA reports 16.09 GiB a
core, deviceless v3-8, 2026-12-04). The held-out
evaluation runs 8192 rows in one forward pass, which fits as well. On a
bigger slice keep 16 rows per core: v3-32 --config.train.microbatches=16,
v3-128 =4.

Time — a PROJECTION, not a measurement: 302 GFLOP per example
(kjax.train.step.flops_per_example) × 8192 a step against a v3-8's 492
TFLOP/s bf16 peak is ~12.6 s a step at 40 % MFU, ~73 days for the 500k
steps; a v3-128 divides that by 16 (as many rows per core, 16× the cores).
Checkpoints every 250 steps (~50 min) bound what a preemption loses.
"""
from kjax.config import defaults


def get_config():
    c = defaults()   # the full tree; set only what differs
    c.name = "roberta_base"
    c.model.update(vocab_size=32000, hidden_size=768, num_layers=12, num_heads=12,
                   intermediate_size=3072, max_position_embeddings=512, layer_norm_eps=1e-5,
                   dropout_rate=0.1, attention_dropout_rate=0.1)
    c.tokenizer.update(vocab_size=32000, path="runs/roberta_base_data/tokenizer/sp")
    c.data.update(dir="runs/roberta_base_data/examples", max_seq_len=512,
                  max_predictions_per_seq=80, masking="dynamic", mask_unit="token",
                  nsp_prob=0.0, short_seq_prob=0.0)
    c.train.update(batch_size=8192, microbatches=64, num_steps=500_000, learning_rate=6e-4,
                   warmup_steps=24_000, schedule="linear", optimizer="adamw", b1=0.9,
                   b2=0.98, eps=1e-6, weight_decay=0.01, nsp_weight=0.0, packing=True)
    # A step takes seconds, not the slice presets' 0.2 s: log, evaluate and save in steps of it.
    c.train.update(log_every=10, eval_every=2500, checkpoint_every=250)
    return c
