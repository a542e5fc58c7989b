r"""BERT-large pretrained with LAMB at batch 64k, phase 1 of 2 (You et al. 2020,
"Large Batch Optimization for Deep Learning: Training BERT in 76 minutes",
with the settings of NVIDIA DeepLearningExamples' BERT run_pretraining.sh):
24 layers, 1024 hidden, 16 heads, 4096 FFN, MLM + NSP on sequences of 128
(20 predictions), batch 65536, LAMB (β 0.9/0.999, eps 1e-6, weight decay
0.01, no decay or trust ratio on biases and LayerNorm), peak lr 6e-3 after
2000 warmup steps (NVIDIA: 28.43 % of 7038), then linear decay to 0 at step
7038 (NVIDIA's polynomial decay of power 1).

    kjax tokenizer train --config tpu_configs/bert_large_lamb.py --config.data.corpus='gs://YOUR_BUCKET/corpus/*'
    kjax prepare --config tpu_configs/bert_large_lamb.py --config.data.corpus='gs://YOUR_BUCKET/corpus/*'
    launch/create.sh --accelerator v3-32 --spot && launch/setup.sh
    launch/autorestart.sh --accelerator v3-32 --spot --run bert-large-lamb -- train \
      --config tpu_configs/bert_large_lamb.py --workdir gs://YOUR_BUCKET/runs/bert_large_lamb
    kjax compile --config tpu_configs/bert_large_lamb.py --topology v3-32

gs://YOUR_BUCKET stands for your bucket: replace it in the file, or override
tokenizer.path and data.dir on each command (a pod's 4 hosts read one copy).

Expected: ~335M parameters; `kjax compile` on a v3-32 (4 hosts) reports
batch 65536 in 32 microbatches of 2048 (64 per core) and says whether it fits
(the paragraph below). You et al. report SQuAD v1.1 dev F1 90.584 for
64k/32k in 8599 iterations (their first table), after both phases, in
English; phase 1 alone is a model of 128 positions.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-32 as its 4 hosts would (jax 0.10.2, libtpu
0.0.42.1, no TPU), at batch 65536 (2048 per core) the train step needs 9.92 GiB
per core of 16 (arguments 0.16, temporaries 9.77): fits.
`kjax compile --config tpu_configs/bert_large_lamb.py --topology v3-32` says it
again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).

Phase 2 (NVIDIA: sequences of 512 with 80 predictions, batch 32768, lr 4e-3,
warmup 12.8 % of 1563 steps) continues from phase 1's weights on a schedule
of its own: a new phase (docs/PRETRAINING.md, "Runs in phases"),

    kjax train --config tpu_configs/bert_large_lamb.py --workdir gs://B/runs/lamb_p2 \
        --init-from gs://B/runs/lamb_p1 --config.data.max_seq_len=512 \
        --config.data.max_predictions_per_seq=80 --config.data.dir=gs://B/ex512 \
        --config.train.batch_size=32768 --config.train.learning_rate=4e-3 \
        --config.train.warmup_steps=200 --config.train.num_steps=1563 \
        --config.train.microbatches=64

(`kjax compile` with the same overrides says whether 64 microbatches of 512
rows fit the slice first).

Batch 65536 on a v3-32 (32 cores of 16 GiB, pure data parallelism) is 2048
rows per core a step: train.microbatches=32 runs it as microbatches of 64
rows per core, 8192 tokens, half the tokens of bert_large.py's 32 rows of
512, which fits a v3 core only thinly with the same remat policy
('dots_with_no_batch_dims_saveable': the matmul outputs kept, the rest
recomputed); the fp32 gradient sum adds 1.25 GiB per core, the parameters
and LAMB state (3.78 GiB) are kept sliced over the 32 cores
(mesh.shard_update), gathered once a step. 16 microbatches (the tokens of bert_large.py)
would double the activations on top of that sum; `kjax compile --fit-batch`
names the fewest microbatches that fit. On a v3-128 keep 64 rows per core:
--config.train.microbatches=8.

Time — a PROJECTION, not a measurement (the remat recomputation is not
counted): 241 GFLOP per example (kjax.train.step.flops_per_example) × 65536
a step against the v3-32's 16 chips × 123 TFLOP/s bf16 peak is ~20 s a step
at 40 % MFU (30–50 %: 16–27 s), ~39 h for the 7038 steps. Each host feeds
16384 rows a step (~820 a second): watch `data_wait_fraction`, and raise
train.loader_workers if it grows. Checkpoints every 100 steps (~33 min).
"""
from kjax.config import defaults


def get_config():
    c = defaults()   # the full tree; set only what differs
    c.name = "bert_large_lamb"
    c.model.update(vocab_size=32000, hidden_size=1024, num_layers=24, num_heads=16,
                   intermediate_size=4096, max_position_embeddings=512,
                   remat_policy="dots_with_no_batch_dims_saveable")
    c.tokenizer.update(vocab_size=32000, path="gs://YOUR_BUCKET/tokenizer/sp")
    c.data.update(dir="gs://YOUR_BUCKET/examples128", max_seq_len=128,
                  max_predictions_per_seq=20)
    c.train.update(batch_size=65536, microbatches=32, num_steps=7038, learning_rate=6e-3,
                   warmup_steps=2000, schedule="linear", optimizer="lamb", b1=0.9, b2=0.999,
                   eps=1e-6, weight_decay=0.01, grad_clip_norm=1.0, nsp_weight=1.0)
    # A step takes ~20 s, not the slice presets' 0.2 s: log, evaluate and save in steps of it.
    c.train.update(log_every=10, eval_every=500, checkpoint_every=100)
    return c
