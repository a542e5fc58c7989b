r"""BERT-base as the BERT paper trains it (Devlin et al. 2019, Appendix A.2):
batch 256, peak lr 1e-4 after 10k warmup steps, linear decay; 90 % of the 1M
steps on sequences of 128, the last 10 % on 512 — two phases of one run
(docs/PRETRAINING.md, "Runs in phases"), on one v3-8.

    kjax tokenizer train --config tpu_configs/bert_base_phases.py --config.data.corpus='gs://B/corpus/*'
    kjax prepare --config tpu_configs/bert_base_phases.py --config.data.corpus='gs://B/corpus/*'
    kjax prepare --config tpu_configs/bert_base_phases.py --config.data.corpus='gs://B/corpus/*' \
        --config.data.max_seq_len=512 --config.data.max_predictions_per_seq=80 \
        --config.data.dir=gs://B/bert_base_phases/examples_512
    kjax train   --config tpu_configs/bert_base_phases.py --workdir gs://B/runs/bert_base_phases
    kjax compile --config tpu_configs/bert_base_phases.py --topology v3-8 [--phase seq512]

Phase `seq128` (WORKDIR/phases/seq128): 900k steps of 256 × 128 tokens, the
paper's warmup and peak. Phase `seq512` (WORKDIR/phases/seq512) starts from
its last checkpoint: 100k steps of 256 × 512, in 2 microbatches a step (one
pass of 256 × 512 does not fit a v3-8 core without remat; the accumulated step
is the same step). The paper's one schedule is at 1e-5 when phase 2 begins;
here phase 2 has its own: it re-warms to that 1e-5 over 1,000 steps and decays
linearly to 0 (NVIDIA's BERT re-warms its phase 2 the same way), with a fresh
optimizer state. The position table has 512 rows in both phases (phase 1
trains the first 128). The same `kjax train` command continues whichever
phase it was in.

Expected: the paper's BERT-base reached MNLI 84.6 and SQuAD 1.1 F1 88.5 after
fine-tuning; ~110M parameters (436 MB fp32). Phase 2's memory is bert_base's
batch 256 in 2 microbatches (docs/TPU.md §15).

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
256 (32 per core) the train step needs 3.29 GiB per core of 16 (arguments 0.17,
temporaries 3.12): fits.
`kjax compile --config tpu_configs/bert_base_phases.py --topology v3-8` says it
again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).
"""
from kjax.config import defaults


def get_config():
    c = defaults()   # the full tree; set only what differs
    c.name = "bert_base_phases"
    c.model.update(vocab_size=32000, hidden_size=768, num_layers=12, num_heads=12,
                   intermediate_size=3072, max_position_embeddings=512)
    c.tokenizer.update(vocab_size=32000, path="runs/bert_base_phases/tokenizer/sp")
    # phase 1's data; phase 2 reads the 512-token shards prepared beside them
    c.data.update(dir="runs/bert_base_phases/examples", max_seq_len=128,
                  max_predictions_per_seq=20)
    c.train.update(batch_size=256, num_steps=900_000, learning_rate=1e-4,
                   warmup_steps=10_000, checkpoint_every=5000)
    c.phases = (
        {"name": "seq128", "overrides": {}},
        {"name": "seq512", "overrides": {
            "data.max_seq_len": 512, "data.max_predictions_per_seq": 80,
            "data.dir": "runs/bert_base_phases/examples_512", "train.num_steps": 100_000,
            "train.microbatches": 2, "train.learning_rate": 1e-5, "train.warmup_steps": 1000}},
    )
    return c
