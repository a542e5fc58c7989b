r"""BERT-base on a TPU v3-8 (one host, 4 chips × 2 TensorCores = 8 JAX
devices): mesh data=8, batch 128 (16 per core), sequences of 512, bf16
compute with fp32 params and Adam state, no remat ('dots_with_no_batch_dims_saveable'
if a bigger batch runs out: `kjax compile ... --fit-batch` says).
UKNOW base's setting (Table 13: batch 128, lr 1e-4, 1M steps, TPU v3).

    launch/create.sh --accelerator v3-8 --spot && launch/setup.sh
    launch/run.sh --run bert-v3-8 -- train --config tpu_configs/v3_8.py \
      --config.tokenizer.path="gs://$BUCKET/tokenizer/sp" \
      --config.data.dir="gs://$BUCKET/examples" --workdir "gs://$BUCKET/runs/bert-v3-8"

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
128 (16 per core) the train step needs 6.72 GiB per core of 16 (arguments 0.17,
temporaries 6.56): fits.
`kjax compile --config tpu_configs/v3_8.py --topology v3-8` says it again; with
`--fit-batch`, also the largest batch that compiles (docs/TPU.md §15).

Throughput — a PROJECTION, not a measurement (nobody here has a TPU): 302
GFLOP per example (kjax.train.step.flops_per_example); datasheet bf16 peak
4 chips × 123 = 492 TFLOP/s; at the ~40 % MFU measured on CPU against the
matmul peak (benchmarks/results: 39.5–46.9 %) ~650 examples/s, ~330k
tokens/s, ~0.2 s per step (30–50 % MFU: 0.16–0.26 s), ~2.3 days per 1M
steps. A checkpoint every 2000 steps (~7 min).
"""
from kjax.config.presets import slice_config

SLICE = "v3-8"  # accelerator type: 8 devices (tests/test_tpu_configs.py checks the mesh)


def get_config():
    return slice_config("v3-8", devices=8, batch_size=128, num_steps=1_000_000, learning_rate=1e-4)
