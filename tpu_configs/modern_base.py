r"""ModernBERT-base's recipe for Korean (kjax/model/modern.py): 22 layers, 768
hidden, 12 heads, GeGLU 1152, RoPE θ 160k global / 10k local, 128-token local
attention with a global layer every third, bias-free, MLM alone at 30 %
masking, rows of 1024 positions, contexts up to 8192.

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
    return c
