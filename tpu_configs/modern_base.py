r"""ModernBERT-base's recipe for Korean (Warner et al. 2024;
kjax/model/modern.py): 22 layers, 768 hidden, 12 heads, GeGLU 1152, RoPE θ
160k global / 10k local, 128-token local attention with a global layer every
third, bias-free, MLM alone at 30 % masking, rows of 1024 positions,
contexts up to 8192; trained with ModernBERT's optimizer and schedule:
StableAdamW (β 0.9/0.98, eps 1e-6) and warmup-stable-decay, peak 8e-4 after
3000 warmup steps, held, then the last 10 % of the 200k steps decay by the
factor 1 − √progress (AnswerDotAI/ModernBERT src/scheduler.py). Its weight
decay of 1e-5 is not multiplied by the learning rate; kjax's is, so it is set
as 1e-5 / 8e-4 = 0.0125 (docs/PRETRAINING.md, "Optimizers"). The decay's
share (10 %), the batch and the step count are this preset's, not
ModernBERT's.

    kjax tokenizer train --config tpu_configs/modern_base.py --config.data.corpus='gs://B/corpus/*'
    kjax prepare --config tpu_configs/modern_base.py --config.data.corpus='gs://B/corpus/*'
    kjax train   --config tpu_configs/modern_base.py --workdir gs://B/runs/modern_base \
        --config.mesh.data=8
    kjax export  --config tpu_configs/modern_base.py --workdir gs://B/runs/modern_base --out hf/

Expected: ~135 M parameters with a 32k vocabulary (ModernBERT-base has 149 M
with 50k); the exported folder loads with transformers' ModernBertForMaskedLM.
For 8192-token rows set data.max_seq_len=8192 and model.remat_policy=full.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
256 (32 per core) the train step needs 12.65 GiB per core of 16 (arguments
1.52, temporaries 11.14): fits.
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
    return c
