"""The deviceless H100: XLA's description of an H100 SXM (.ci/h100_sxm.txtpb:
SMs, shared memory, HBM, cuDNN version) handed to jax's CUDA plugin as a
topology, so a CPU host compiles for the card without one (`make gpu-check`,
the benchmarks that compile for it). Programs compile for its device;
nothing runs."""
from __future__ import annotations

import os
import re

from compile_checks.record import CHECKOUT

H100_TARGET = os.path.join(CHECKOUT, ".ci", "h100_sxm.txtpb")
H100_TOPOLOGY = "h100_sxm 1x1x1"   # the name its cases carry in the record


def h100_topology(gpus: int = 1) -> str:
    """The record's name of `gpus` H100s on one host ("h100_sxm 1x1x8")."""
    return f"h100_sxm 1x1x{gpus}"


def h100_target(path: str = H100_TARGET) -> str:
    """The target config's text (its hash is part of every GPU verdict)."""
    with open(path, encoding="utf-8") as f:
        return f.read()


def device_memory(target_text: str) -> int:
    """The card's HBM in bytes (`device_memory_size`)."""
    m = re.search(r"device_memory_size:\s*(\d+)", target_text)
    if not m:
        raise ValueError(f"{os.path.relpath(H100_TARGET)} names no device_memory_size; "
                         f"restore it with git")
    return int(m.group(1))


def h100_devices(target_text: str | None = None, gpus: int = 1):
    """The devices of `gpus` H100s on one host (an 8-GPU node: 8), described
    to this host (needs jax's CUDA plugin, `pip install 'kjax[cuda]'`; no GPU)."""
    from jax.experimental import topologies
    text = h100_target() if target_text is None else target_text
    return topologies.get_topology_desc(platform="cuda", topology=f"1x1x{gpus}",
                                        target_config=text).devices
