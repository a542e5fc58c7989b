"""TPU slices without a TPU: the devices of a topology, for ahead-of-time
compilation on any machine (`kjax compile`, kjax/pretrain/aot.py).

libtpu (the `kjax[tpu]` extra) describes a slice that is not there:
`jax.experimental.topologies.get_topology_desc` gives its devices, each
with its host's process index, and XLA:TPU compiles for them exactly as on
the pod, out-of-memory verdict included. An accelerator type names the
slice as Cloud TPU does (v3-32: 32 TensorCores, 16 chips on 4 hosts);
libtpu wants the chip grid (v3:4x4), which is derived here.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import re

from kjax.errors import KjaxError

GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Chip:
    """Per JAX device: v2/v3 expose each of a chip's two TensorCores as one
    device; v4 and later one device per chip (megacore). Datasheet figures."""
    cores_per_device_name: int   # TensorCores counted by the accelerator type per chip
    devices_per_chip: int
    hbm_bytes: int               # per device
    hbm_bytes_per_s: float       # per device
    grid_dims: int               # 2: v2/v3 torus; 3: v4 and later
    ici_bytes_per_s: float       # per device: the chip's interconnect share


# v2: 16 GiB and 700 GB/s per chip; v3: 32 GiB, 900 GB/s; v4: 32 GiB, 1.2 TB/s.
# Interconnect: the datasheets' all-reduce bandwidth per pod over its chips
# (https://cloud.google.com/tpu/docs/v3: 340 TB/s for 1024 chips, 332 GB/s a
# chip; https://cloud.google.com/tpu/docs/v4: 1.1 PB/s for 4096, 269 GB/s);
# v2's page gives none: its chip's 4 links of 496 Gbit/s (Jouppi et al. 2020,
# "A Domain-Specific Supercomputer for Training Deep Neural Networks", CACM).
CHIPS = {"v2": Chip(2, 2, 8 * GIB, 350e9, 2, 4 * 496e9 / 8 / 2),
         "v3": Chip(2, 2, 16 * GIB, 450e9, 2, 340e12 / 1024 / 2),
         "v4": Chip(2, 1, 32 * GIB, 1200e9, 3, 1.1e15 / 4096)}
CHIPS_PER_HOST = 4               # (2, 2, 1): every v2/v3/v4 host
ACCELERATOR = re.compile(r"^(v[234])-(\d+)$")
GRID = re.compile(r"^(v[234]):(\d+(?:x\d+){1,2})$")


@dataclasses.dataclass(frozen=True)
class Topology:
    accelerator: str      # v3-32
    generation: str       # v3
    grid: tuple[int, ...]  # chips per torus axis: (4, 4)

    @property
    def name(self) -> str:          # what libtpu calls it: v3:4x4
        return f"{self.generation}:{'x'.join(map(str, self.grid))}"

    @property
    def chips(self) -> int:
        n = 1
        for g in self.grid:
            n *= g
        return n

    @property
    def chip(self) -> Chip:
        return CHIPS[self.generation]

    @property
    def num_devices(self) -> int:
        return self.chips * self.chip.devices_per_chip

    @property
    def hosts(self) -> int:
        return max(1, self.chips // CHIPS_PER_HOST)


def _grid(chips: int, dims: int) -> tuple[int, ...]:
    """The slice's chip grid: start from one host's (2x2, or 2x2x1) and double
    the smallest axis (the last of equals) until it holds `chips`."""
    grid = [2, 2] if dims == 2 else [2, 2, 1]
    while _product(grid) < chips:
        small = min(grid)
        i = max(j for j, g in enumerate(grid) if g == small)
        grid[i] *= 2
    return tuple(grid)


def _product(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def parse_topology(text: str) -> Topology:
    """`v3-32` (accelerator type) or `v3:4x4` (chip grid) → Topology; one-line
    error otherwise."""
    name = text.strip().lower()
    if m := ACCELERATOR.match(name):
        gen, cores = m.group(1), int(m.group(2))
        chip = CHIPS[gen]
        chips = cores // chip.cores_per_device_name
        ok = cores % chip.cores_per_device_name == 0 and chips >= 4 and chips & (chips - 1) == 0
        if ok:
            return Topology(name, gen, _grid(chips, chip.grid_dims))
    elif m := GRID.match(name):
        gen, grid = m.group(1), tuple(int(x) for x in m.group(2).split("x"))
        if len(grid) == CHIPS[gen].grid_dims and _product(grid) >= 1:
            chips = _product(grid)
            cores = chips * CHIPS[gen].cores_per_device_name
            return Topology(f"{gen}-{cores}", gen, grid)
    raise KjaxError(f"--topology {text!r}: unknown TPU topology; give an accelerator type "
                    f"(v2-8, v3-8, v3-32, v3-128, v4-8, v4-32: a power of two ≥ 8 TensorCores) "
                    f"or a chip grid (v3:4x4, v4:2x2x1)")


def libtpu_available() -> bool:
    return importlib.util.find_spec("libtpu") is not None


def topology_devices(topology: Topology) -> list:
    """The slice's devices (jax.Device-like, with process_index), from libtpu."""
    if not libtpu_available():
        raise KjaxError("compiling for a TPU needs libtpu, which is not installed; "
                        "run `pip install 'kjax[tpu]'` (about 700 MB; no TPU needed)")
    from jax.experimental import topologies
    # Off a TPU VM libtpu looks for the VM's metadata and warns (on stderr,
    # several lines) that it found none; these say what it would have found.
    # No chip is opened, so several compiling processes may share libtpu
    # (its lockfile would refuse the second one).
    quiet = {"TPU_ACCELERATOR_TYPE": topology.accelerator, "TPU_WORKER_HOSTNAMES": "localhost",
             "TPU_SKIP_MDS_QUERY": "1", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    saved = {k: os.environ.get(k) for k in quiet}
    os.environ.update({k: v for k, v in quiet.items() if saved[k] is None})
    # libtpu's "default" chip config shows each TensorCore as a device; v4's
    # TPU VMs run megacore (one device per chip), which is "megacore" here.
    chip_config = "megacore" if topology.chip.devices_per_chip == 1 else "default"
    try:
        desc = topologies.get_topology_desc(
            platform="tpu", topology_name=topology.name, chip_config_name=chip_config,
            chips_per_host_bounds=(2, 2, 1), num_slices=1)
    except Exception as e:  # noqa: BLE001 - libtpu's errors are not a stable type
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise KjaxError(f"libtpu cannot describe topology {topology.name} "
                        f"({topology.accelerator}): {first}") from None
    finally:   # (so that nothing later takes this machine for a TPU VM)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
    devices = list(desc.devices)
    if len(devices) != topology.num_devices:
        raise KjaxError(f"libtpu gave {len(devices)} devices for {topology.name}, expected "
                        f"{topology.num_devices}; report this with `pip show libtpu jax`")
    return devices
