r"""BERT-base, phase-1 style (sequences of 128), on a TPU v2-8 (one host,
4 chips × 2 TensorCores = 8 JAX devices, 8 GiB each): mesh data=8, batch
256 (32 per core), bf16 compute with fp32 params and Adam state, no remat.
For the thesis' v2 model, UKNOW-small, use tpu_configs/uknow_small.py with
--config.mesh.data=8 (it is small enough to be bound by the input pipeline).

    launch/create.sh --accelerator v2-8 --spot && launch/setup.sh
    launch/run.sh --run bert-v2-8 -- train --config tpu_configs/v2_8.py \
      --config.tokenizer.path="gs://$BUCKET/tokenizer/sp" \
      --config.data.dir="gs://$BUCKET/examples128" --workdir "gs://$BUCKET/runs/bert-v2-8"

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v2-8 (jax 0.10.2, libtpu 0.0.42.1, no TPU), at batch
256 (32 per core) the train step needs 3.29 GiB per core of 8 (arguments 0.17,
temporaries 3.12): fits.
`kjax compile --config tpu_configs/v2_8.py --topology v2-8` says it again; with
`--fit-batch`, also the largest batch that compiles (docs/TPU.md §15).

Throughput — a PROJECTION, not a measurement (nobody here has a TPU): 70
GFLOP per example (kjax.train.step.flops_per_example); datasheet bf16 peak
4 chips × 45 = 180 TFLOP/s (22.5 per core); at the ~40 % MFU measured on CPU
against the matmul peak (benchmarks/results: 39.5–46.9 %) ~1000
examples/s, ~130k tokens/s, ~0.25 s per step (30–50 % MFU: 0.2–0.33 s),
~35 h for the 500k steps. A checkpoint every 2000 steps (~8 min).
"""
from kjax.config.presets import slice_config

SLICE = "v2-8"  # accelerator type: 8 devices (tests/test_tpu_configs.py checks the mesh)


def get_config():
    return slice_config("v2-8", devices=8, batch_size=256, num_steps=500_000, learning_rate=1e-4,
                        seq_len=128)
