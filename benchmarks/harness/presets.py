"""Configs and batches the benchmarks time: a tpu_configs preset at a chosen
sequence length, batch and dtype (15 % predictions, a 1000-step schedule),
and synthetic batches of exactly the shapes the loader yields."""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# The two model shapes the peer comparisons use (tpu_configs presets).
SHAPES = {
    "uknow_small": dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024),
    "bert_base": dict(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072),
}
# A model small enough to compile and run in seconds on a CPU: the GPU
# scripts' --tiny check of themselves (no speed).
TINY_MODEL = ["--config.model.num_layers=2", "--config.model.hidden_size=64",
              "--config.model.num_heads=2", "--config.model.intermediate_size=128",
              "--config.model.vocab_size=512"]


def preset_config(preset: str, seq: int, batch: int, dtype: str | None = None,
                  extra: list[str] | None = None):
    """tpu_configs/<preset>.py at `seq` × `batch`, 15% predictions, a 1000-step
    schedule (the LR value does not change the cost of a step)."""
    from kjax.config import load_config
    overrides = [f"--config.data.max_seq_len={seq}", f"--config.train.batch_size={batch}",
                 "--config.train.num_steps=1000", "--config.train.warmup_steps=10",
                 f"--config.data.max_predictions_per_seq={max(1, round(seq * 0.15))}"]
    if dtype:
        overrides.append(f"--config.model.dtype={dtype}")
    path = os.path.join(ROOT, "tpu_configs", f"{preset}.py")
    base = load_config(path)
    if seq > base.model.max_position_embeddings:  # longer than the preset's table
        overrides.append(f"--config.model.max_position_embeddings={seq}")
    return load_config(path, overrides + list(extra or []))


def overrides_of(extra: list[str]) -> list[str]:
    """'--config.a.b=v' → 'a.b=v': how records name a variant's overrides."""
    return [e.removeprefix("--config.") for e in extra]


def synthetic_batch(config, rng, batch_size: int | None = None) -> dict:
    from kjax.batches.synthetic import synthetic_batch as make
    return make(config, rng, batch_size)
