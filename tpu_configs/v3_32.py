r"""BERT-base on a TPU v3-32 pod slice: 4 hosts × 8 TensorCores = 32 JAX
devices; pure data parallelism (mesh data=32), global batch 512 = 128 per
host = 16 per core, sequences of 512, bf16 compute with fp32 params and Adam
state, no remat. The tokens of 1M steps × 128 (bert_base.py) in 250k steps.

    launch/create.sh --accelerator v3-32 --spot && launch/setup.sh
    launch/autorestart.sh --accelerator v3-32 --spot --run bert-v3-32 -- train \
      --config tpu_configs/v3_32.py --config.tokenizer.path="gs://$BUCKET/tokenizer/sp" \
      --config.data.dir="gs://$BUCKET/examples" --workdir "gs://$BUCKET/runs/bert-v3-32"

Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this
paragraph): compiled for a v3-32 as its 4 hosts would (jax 0.10.2, libtpu
0.0.42.1, no TPU), at batch 512 (16 per core) the train step needs 6.60 GiB per
core of 16 (arguments 0.05, temporaries 6.55): fits.
`kjax compile --config tpu_configs/v3_32.py --topology v3-32` says it again;
with `--fit-batch`, also the largest batch that compiles (docs/TPU.md §15).

Throughput — a PROJECTION, not a measurement (nobody here has a TPU): the step
is 302 GFLOP per example (kjax.train.step.flops_per_example, bidirectional
attention counted); the slice's datasheet bf16 peak is 16 chips × 123 =
1968 TFLOP/s. At the ~40 % MFU measured on CPU against the matmul peak
(benchmarks/results: 39.5–46.9 % for uknow_small) that is ~2600 examples/s,
~1.3M tokens/s, ~0.2 s per step (30–50 % MFU: 0.16–0.26 s), ~14 h for the
250k steps. Each host prepares ~650 examples/s; watch `data_wait_fraction`.
A checkpoint every 2000 steps (~7 min) bounds the work a preemption loses.
"""
from kjax.config.presets import slice_config

SLICE = "v3-32"  # accelerator type: 32 devices (tests/test_tpu_configs.py checks the mesh)


def get_config():
    return slice_config("v3-32", devices=32, batch_size=512, num_steps=250_000,
                        learning_rate=2e-4)
