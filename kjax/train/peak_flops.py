"""The peak FLOP/s that MFU is measured against: the config's figure, the
device's datasheet bf16 peak (TPU, GPU), or on a CPU the matmul rate measured
on this host."""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp

# Datasheet dense bf16 FLOP/s per JAX device. TPU v2/v3 expose each core as a
# device (2 per chip): v2 45 and v3 123 TFLOP/s per chip.
DATASHEET_PEAKS = {
    "TPU v2": 22.5e12, "TPU v3": 61.5e12, "TPU v4": 275e12, "TPU v5 lite": 197e12,
    "TPU v5e": 197e12, "TPU v5p": 459e12, "TPU v6 lite": 918e12, "TPU v6e": 918e12,
    "H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12,
}


def measure_matmul_flops(dtype: str = "float32", n: int = 1024, reps: int = 10) -> float:
    """FLOP/s of a square matmul on this host: the CPU 'peak' for MFU. The
    fastest of `reps` runs, not their mean: a peak measured while other jobs
    share the cores would be low and put MFU above 100 %."""
    a = jnp.ones((n, n), dtype)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    fastest = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        f(a).block_until_ready()
        fastest = min(fastest, time.perf_counter() - start)
    return 2 * n ** 3 / fastest


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
