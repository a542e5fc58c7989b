r"""ModernBERT-base's recipe for Korean (Warner et al. 2024;
kjax/model/modern.py): 22 layers, 768 hidden, 12 heads, GeGLU 1152, RoPE θ
160k global / 10k local, 128-token local attention with a global layer every
third, bias-free, MLM alone at 30 % masking, rows of 1024 positions,
contexts up to 8192; trained as ModernBERT is, in three phases of one run
(docs/PRETRAINING.md, "Runs in phases"), with its optimizer, StableAdamW
(β 0.9/0.98, eps 1e-6), and its warmup-stable-decay schedule:

- `stable1024`: 170k steps of 256 × 1024 tokens with global RoPE θ 10k, the
  rate held at the peak 8e-4 after 3000 warmup steps (schedule constant);
- `extend8192`: the context extension, 25k steps of 32 × 8192 (the same tokens
  a step) with global θ 160k, the optimizer's moments carried over
  (init.optimizer=keep; RoPE has no position table, so every shape stays);
- `decay8192`: a decay branch of `extend8192` (init.mode=continue,
  docs/PRETRAINING.md "Decay branches"): its steps 25,001–30,000, with its
  optimizer state and data position, the rate decaying to 0 by the factor
  1 − √progress over those 5k steps (wsd with decay_steps 5000;
  AnswerDotAI/ModernBERT src/scheduler.py).

Its weight decay of 1e-5 is not multiplied by the learning rate; kjax's is,
so it is set as 1e-5 / 8e-4 = 0.0125 (docs/PRETRAINING.md, "Optimizers"). The
step counts and batches are this preset's, not ModernBERT's (1.7T, 250B and
50B tokens).

    kjax tokenizer train --config tpu_configs/modern_base.py --config.data.corpus='gs://B/corpus/*'
    kjax prepare --config tpu_configs/modern_base.py --config.data.corpus='gs://B/corpus/*'
    kjax prepare --config tpu_configs/modern_base.py --config.data.corpus='gs://B/corpus/*' \
        --config.data.max_seq_len=8192 --config.data.dir=runs/modern_base_data/examples_8192
    kjax train   --config tpu_configs/modern_base.py --workdir gs://B/runs/modern_base \
        --config.mesh.data=8
    kjax compile --config tpu_configs/modern_base.py --topology v3-8 [--phase extend8192]
    kjax export  --config tpu_configs/modern_base.py --workdir gs://B/runs/modern_base/phases/decay8192 --out hf/
    kjax train   --workdir gs://B/runs/modern_base_decay20k --config.train.schedule=wsd \
        --decay-from gs://B/runs/modern_base/phases/extend8192/checkpoints/20000 \
        --config.train.num_steps=25000      # another decay, of an earlier stable checkpoint

Expected: ~135 M parameters with a 32k vocabulary (ModernBERT-base has 149 M
with 50k); the exported folder loads with transformers' ModernBertForMaskedLM.
A decay branch logs its parent's step counter on (the decay of step 20,000:
steps 20,001–25,000), its first learning rate the peak 8e-4, and names its
parent and step in its lineage.json; the parent is only read.
The base config (no phase) is the first phase's shapes: the compile checks and
benchmarks that name modern_base run it.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
256 (32 per core) the train step needs 14.20 GiB per core of 16 (arguments
0.21, temporaries 13.98): fits.
`kjax compile --config tpu_configs/modern_base.py --topology v3-8` says it
again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).

It fits with remat 'dots_with_no_batch_dims_saveable' (set below): without
it XLA refuses the step at this batch on a v3-8 core.
"""
from kjax.config.presets import modern_config


def get_config():
    c = modern_config("modern_base", "base", max_seq_len=1024)
    # Without remat XLA refuses the step on a v3 core (`kjax compile`): matmul
    # outputs are kept, the rest recomputed.
    c.model.remat_policy = "dots_with_no_batch_dims_saveable"
    # ModernBERT's weight decay (1e-5) is not scaled by the rate and kjax's is: divide by the peak.
    c.train.update(optimizer="stable_adamw", b1=0.9, b2=0.98, eps=1e-6,
                   weight_decay=1e-5 / c.train.learning_rate, schedule="wsd",
                   decay_shape="sqrt")
    # ModernBERT's three phases (docs/PRETRAINING.md, "Runs in phases"): the
    # stable phase at 1024 with global RoPE θ 10k, the context extension to
    # 8192 at θ 160k, then the 1 − √ decay there, a branch that continues the
    # extension's run (its step counter, optimizer, data position); the
    # optimizer's moments carry over (same shapes: RoPE has no position table),
    # the rate stays at the peak until the decay. The same tokens per step:
    # 256 × 1024 = 32 × 8192.
    long = {"data.max_seq_len": 8192, "data.dir": "runs/modern_base_data/examples_8192",
            "model.rope_theta": 160_000.0, "model.remat_policy": "full",
            "train.batch_size": 32, "init.optimizer": "keep", "train.warmup_steps": 0}
    c.phases = (
        {"name": "stable1024", "overrides": {"model.rope_theta": 10_000.0,
                                             "train.schedule": "constant",
                                             "train.num_steps": 170_000}},
        {"name": "extend8192", "overrides": {**long, "train.schedule": "constant",
                                             "train.num_steps": 25_000}},
        {"name": "decay8192", "overrides": {**long, "init.mode": "continue",
                                            "train.decay_steps": 5_000,
                                            "train.num_steps": 30_000}},
    )
    return c
