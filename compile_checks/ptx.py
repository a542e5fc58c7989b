"""What ptxas says of a GPU program's kernels: registers, spills, serialized wgmma.

XLA compiles a program for a described GPU on a CPU-only host (deviceless:
.ci/h100_sxm.txtpb) and, with `xla_dump_to`, writes the PTX of each kernel it
generated, Pallas' Triton kernels included. ptxas, shipped with jax's CUDA
wheels, assembles that PTX for the card's architecture and reports per
kernel (`-v`): registers per thread, bytes spilled to local memory, and
whether Hopper's asynchronous matrix products (wgmma) had to be serialized for
lack of registers. No timing, but a kernel that spills inside its inner loop
or serializes its wgmma is slow on every GPU of that architecture: this is
what `make gpu-check` refuses and benchmarks/kernels/flash_tiles.py tabulates.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([A-Za-z_$][\w$]*)", re.M)
_COMPILING = re.compile(r"Compiling entry function '([^']+)'")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")
_SERIALIZED = re.compile(r"wgmma\.mma_async instructions are serialized.*?function '([^']+)'")


def find_ptxas() -> str | None:
    """ptxas of jax's CUDA wheels (nvidia/cu13 or nvidia/cuda_nvcc), else on PATH."""
    try:
        import nvidia   # namespace package of the CUDA wheels
        roots = list(nvidia.__path__)
    except ImportError:
        roots = []
    for root in roots:
        for sub in ("cu13", "cu12", "cuda_nvcc"):
            path = os.path.join(root, sub, "bin", "ptxas")
            if os.access(path, os.X_OK):
                return path
    return shutil.which("ptxas")


def parse_ptxas(report: str) -> dict[str, dict]:
    """{kernel: {registers, spill_stores, spill_loads, wgmma_serialized}} from
    `ptxas -v`'s report (its stderr)."""
    kernels: dict[str, dict] = {}

    def kernel(name: str) -> dict:
        return kernels.setdefault(name, {"registers": 0, "spill_stores": 0, "spill_loads": 0,
                                         "wgmma_serialized": False})
    current = None
    for line in report.splitlines():
        if m := _COMPILING.search(line):
            current = kernel(m.group(1))
        elif current is not None and (m := _SPILLS.search(line)):
            current["spill_stores"], current["spill_loads"] = int(m.group(1)), int(m.group(2))
        elif current is not None and (m := _REGISTERS.search(line)):
            current["registers"] = int(m.group(1))
    for name in _SERIALIZED.findall(report):
        kernel(name)["wgmma_serialized"] = True
    return kernels


def assemble(ptx_path: str, ptxas: str, arch: str = "sm_90a") -> dict[str, dict]:
    """ptxas' report on one PTX file, parsed; each kernel also counts its wgmma."""
    run = subprocess.run([ptxas, "-v", "--gpu-name", arch, ptx_path, "-o", os.devnull],
                         capture_output=True, text=True, check=False)
    if run.returncode:
        raise RuntimeError(f"ptxas failed on {ptx_path}: {run.stderr.strip()[:400]}")
    kernels = parse_ptxas(run.stderr)
    with open(ptx_path, encoding="utf-8") as f:
        wgmma = f.read().count("wgmma.mma_async.")
    for info in kernels.values():
        info["wgmma"] = wgmma if len(kernels) == 1 else None   # per file, not per kernel
    return kernels


def dumped_kernels(dump_dir: str, ptxas: str, prefix: str = "", arch: str = "sm_90a") -> dict:
    """Every kernel whose name starts with `prefix` in the PTX files XLA dumped."""
    found: dict[str, dict] = {}
    for path in sorted(glob.glob(os.path.join(dump_dir, "*.ptx"))):
        with open(path, encoding="utf-8") as f:
            names = ENTRY.findall(f.read())
        if any(n.startswith(prefix) for n in names):
            found.update({n: v for n, v in assemble(path, ptxas, arch).items()
                          if n.startswith(prefix)})
    return found


def findings(kernels: dict) -> list[str]:
    """One line per kernel that spills registers or serializes its wgmma."""
    lines = []
    for name, k in sorted(kernels.items()):
        if k["spill_stores"] or k["spill_loads"]:
            lines.append(f"{name} spills registers ({k['spill_stores']} bytes stored, "
                         f"{k['spill_loads']} loaded; {k['registers']} registers)")
        if k["wgmma_serialized"]:
            lines.append(f"{name}: ptxas serializes its wgmma for lack of registers")
    return lines
