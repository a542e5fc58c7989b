r"""A small modern Korean encoder (ModernBERT's recipe, kjax/model/modern.py): 6
layers, 256 hidden, 4 heads, GeGLU 384, RoPE, 128-token local attention with a
global layer every third, no biases, MLM alone at 30 % masking; trained on
rows of 1024, runs contexts up to 8192.

    kjax tokenizer train --config tpu_configs/modern_small.py --config.data.corpus='corpus/*.txt'
    kjax prepare --config tpu_configs/modern_small.py --config.data.corpus='corpus/*.txt'
    kjax train   --config tpu_configs/modern_small.py --workdir runs/modern_small
    kjax export  --config tpu_configs/modern_small.py --workdir runs/modern_small --out hf/

Expected: 11.6 M parameters (8.2 M of them the 32k embedding); `kjax export`
writes a transformers ModernBertForMaskedLM folder, logits verified ≤ 1e-5.
Any tokenizer scheme and input mode trains (multihot: --config.model.input_mode=
multihot, one-hot modes export); shaking adds --config.model.shake_factor=0.3
--config.shake.variant=pos. CPU timings: benchmarks/results/modern.jsonl.

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
256 (32 per core) the train step needs 3.94 GiB per core of 16 (arguments 0.02,
temporaries 3.92): fits.
`kjax compile --config tpu_configs/modern_small.py --topology v3-8` says it
again; with `--fit-batch`, also the largest batch that compiles
(docs/TPU.md §15).
"""
from kjax.config.presets import modern_config


def get_config():
    return modern_config("modern_small", "small", max_seq_len=1024)
