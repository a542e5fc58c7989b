"""Where metrics go (JSONL + TensorBoard, process 0 only), the loss-curve
picture, and the peak FLOP/s that MFU is measured against."""
from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

# Datasheet dense bf16 FLOP/s per JAX device. TPU v2/v3 expose each core as a
# device (2 per chip): v2 45 and v3 123 TFLOP/s per chip.
DATASHEET_PEAKS = {
    "TPU v2": 22.5e12, "TPU v3": 61.5e12, "TPU v4": 275e12, "TPU v5 lite": 197e12,
    "TPU v5e": 197e12, "TPU v5p": 459e12, "TPU v6 lite": 918e12, "TPU v6e": 918e12,
    "H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12,
}


def measure_matmul_flops(dtype: str = "float32", n: int = 1024, reps: int = 5) -> float:
    """FLOP/s of a square matmul on this host: the CPU 'peak' for MFU."""
    a = jnp.ones((n, n), dtype)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    start = time.perf_counter()
    for _ in range(reps):
        f(a).block_until_ready()
    return reps * 2 * n ** 3 / (time.perf_counter() - start)


def peak_flops(config) -> tuple[float, str]:
    """Whole-mesh peak FLOP/s and where the figure came from."""
    if config.train.peak_flops > 0:
        return config.train.peak_flops * jax.device_count(), "config"
    kind = jax.devices()[0].device_kind
    for name, flops in DATASHEET_PEAKS.items():
        if name.lower() in kind.lower():
            return flops * jax.device_count(), f"datasheet {name}"
    # CPU: all fake devices share the same cores, so the machine's matmul rate
    # is the whole mesh's peak.
    return measure_matmul_flops(config.model.dtype), "measured matmul"


class MetricWriter:
    def __init__(self, workdir: str, enabled: bool = True):
        self.enabled = enabled
        self.path = os.path.join(workdir, "metrics.jsonl")
        self.tb = None
        if enabled:
            os.makedirs(workdir, exist_ok=True)
            from tensorboardX import SummaryWriter
            self.tb = SummaryWriter(os.path.join(workdir, "tensorboard"))

    def write(self, step: int, metrics: dict, prefix: str = "train") -> None:
        if not self.enabled:
            return
        row = {"step": step, "split": prefix,
               **{k: float(np.asarray(v)) for k, v in metrics.items()}}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        for k, v in row.items():
            if k not in ("step", "split"):
                self.tb.add_scalar(f"{prefix}/{k}", v, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def read_metrics(workdir: str) -> list[dict]:
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def plot_loss_curve(workdir: str) -> str | None:
    rows = read_metrics(workdir)
    if not rows:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for split, key, style in (("train", "mlm_loss", "-"), ("train", "nsp_loss", "-"),
                              ("eval", "mlm_loss", "o--"), ("eval", "nsp_loss", "o--")):
        pts = sorted({r["step"]: r[key] for r in rows if r["split"] == split and key in r}.items())
        if pts:
            ax.plot(*zip(*pts), style, label=f"{split} {key}")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(f"kjax pretraining: {os.path.basename(os.path.abspath(workdir))}")
    ax.grid(alpha=0.3)
    ax.legend()
    path = os.path.join(workdir, "loss_curve.png")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
