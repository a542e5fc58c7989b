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
"""
from kjax.config.presets import modern_config


def get_config():
    return modern_config("modern_base", "base", max_seq_len=1024)
