r"""BERT-base on a TPU v3-8 (one host, 4 chips × 2 TensorCores = 8 JAX
devices): mesh data=8, batch 128 (16 per core), sequences of 512, bf16
compute with fp32 params and Adam state, no remat (16 GiB per core is
enough; 'dots_with_no_batch_dims_saveable' if a bigger batch runs out).
UKNOW base's setting (Table 13: batch 128, lr 1e-4, 1M steps, TPU v3).

    launch/create.sh --accelerator v3-8 --spot && launch/setup.sh
    launch/run.sh --run bert-v3-8 -- train --config tpu_configs/v3_8.py \
      --config.tokenizer.path="gs://$BUCKET/tokenizer/sp" \
      --config.data.dir="gs://$BUCKET/examples" --workdir "gs://$BUCKET/runs/bert-v3-8"

Expected — a PROJECTION, not a measurement (nobody here has a TPU): 302
GFLOP per example (kjax.train.step.flops_per_example); datasheet bf16 peak
4 chips × 123 = 492 TFLOP/s; at the ~40 % MFU measured on CPU against the
matmul peak (docs/PERFORMANCE.md: 39.5–46.9 %) ~650 examples/s, ~330k
tokens/s, ~0.2 s per step (30–50 % MFU: 0.16–0.26 s), ~2.3 days per 1M
steps. A checkpoint every 2000 steps (~7 min).
"""
from kjax.config import ConfigDict

SLICE = "v3-8"  # accelerator type: 8 devices (tests/test_tpu_configs.py checks the mesh)


def get_config():
    c = ConfigDict()
    c.name = "bert_base_v3_8"
    c.model = dict(vocab_size=32000, hidden_size=768, num_layers=12, num_heads=12,
                   intermediate_size=3072, max_position_embeddings=512,
                   dtype="bfloat16", param_dtype="float32", remat_policy="none")
    c.tokenizer = dict(vocab_size=32000, path="gs://YOUR_BUCKET/tokenizer/sp")
    c.data = dict(dir="gs://YOUR_BUCKET/examples", max_seq_len=512,
                  max_predictions_per_seq=80)
    c.train = dict(batch_size=128, num_steps=1_000_000, learning_rate=1e-4,
                   warmup_steps=10_000, log_every=100, eval_every=5000,
                   checkpoint_every=2000, keep_checkpoints=3)
    c.mesh = dict(data=8, fsdp=1, tensor=1)
    return c
