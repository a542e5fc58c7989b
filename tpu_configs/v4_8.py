r"""BERT-base on a TPU v4-8 (one host, 4 chips; a v4 chip's two TensorCores
act as one JAX device, "megacore", so 4 devices with 32 GiB each): mesh
data=4, batch 256 (64 per chip), sequences of 512, bf16 compute with fp32
params and Adam state, remat 'dots_with_no_batch_dims_saveable'. An example for v4 and later: v5e/v6e slices
work the same way with their runtime image (docs/TPU.md §2).

    launch/create.sh --zone us-central2-b --accelerator v4-8 && launch/setup.sh
    launch/run.sh --run bert-v4-8 -- train --config tpu_configs/v4_8.py \
      --config.tokenizer.path="gs://$BUCKET/tokenizer/sp" \
      --config.data.dir="gs://$BUCKET/examples" --workdir "gs://$BUCKET/runs/bert-v4-8"

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v4-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
256 (64 per chip) the train step needs 9.38 GiB per chip of 32 (arguments 0.34,
temporaries 9.04): fits.
`kjax compile --config tpu_configs/v4_8.py --topology v4-8` says it again; with
`--fit-batch`, also the largest batch that compiles (docs/TPU.md §15).

It fits with the remat policy above: without it XLA refuses the step on a
v4-8 chip.

Throughput — a PROJECTION, not a measurement (nobody here has a TPU; the
remat policy's recomputation is not counted): 302
GFLOP per example (kjax.train.step.flops_per_example); datasheet bf16 peak
4 chips × 275 = 1100 TFLOP/s; at the ~40 % MFU measured on CPU against the
matmul peak (benchmarks/results: 39.5–46.9 %) ~1450 examples/s, ~750k
tokens/s, ~0.18 s per step (30–50 % MFU: 0.14–0.23 s), ~25 h for the 500k
steps. A checkpoint every 2000 steps (~6 min).
"""
from kjax.config.presets import slice_config

SLICE = "v4-8"  # accelerator type: 4 devices (tests/test_tpu_configs.py checks the mesh)


def get_config():
    c = slice_config("v4-8", devices=4, batch_size=256, num_steps=500_000, learning_rate=1.4e-4)
    # 64 sequences per device do not fit 32 GiB without remat (XLA refuses the
    # step, `kjax compile`); keeping the matmul outputs and recomputing the rest does.
    c.model.remat_policy = "dots_with_no_batch_dims_saveable"
    return c
