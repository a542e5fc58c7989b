"""Every slice config loads, validates, and its mesh fills its slice exactly."""
import glob
import importlib.util
import os
import re

import pytest

from conftest import ROOT
from kjax.config import load_config, validate
from kjax.parallel.mesh import check_mesh

# JAX devices per accelerator type: v2/v3 expose each TensorCore (2 per chip),
# v4 and later one device per chip (megacore). Hosts: 8 cores / 4 chips each.
SLICE_DEVICES = {"v2-8": 8, "v3-8": 8, "v3-32": 32, "v4-8": 4}
SLICE_HOSTS = {"v2-8": 1, "v3-8": 1, "v3-32": 4, "v4-8": 1}
SLICE_CONFIGS = sorted(glob.glob(os.path.join(ROOT, "tpu_configs", "v*_*.py")))


def slice_of(path: str) -> str:
    spec = importlib.util.spec_from_file_location("slice_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SLICE


def test_the_four_slices_have_configs():
    assert sorted(slice_of(p) for p in SLICE_CONFIGS) == sorted(SLICE_DEVICES)


@pytest.mark.parametrize("path", SLICE_CONFIGS, ids=os.path.basename)
def test_slice_config_loads_and_fills_its_slice(path):
    config = load_config(path)
    validate(config)
    name = slice_of(path)
    devices, hosts = SLICE_DEVICES[name], SLICE_HOSTS[name]
    sizes = [config.mesh[a] for a in ("data", "fsdp", "tensor")]
    assert -1 not in sizes and sizes[0] * sizes[1] * sizes[2] == devices
    assert check_mesh(config, devices, hosts) == tuple(sizes)
    assert config.model.dtype == "bfloat16" and config.model.param_dtype == "float32"
    assert config.train.batch_size // hosts % (devices // hosts) == 0  # per-core rows
    assert config.data.dir.startswith("gs://") and config.tokenizer.path.startswith("gs://")
    with open(path, encoding="utf-8") as f:
        header = f.read().split('"""')[1]
    assert "PROJECTION" in header and f"--config tpu_configs/{os.path.basename(path)}" in header
    # memory: compiled (kjax compile, docs/TPU.md §15; tests/test_compile_figures.py)
    if re.search(r"is enough|\bfits\b|needs [\d.]+ GiB", header):
        assert "kjax compile" in header, "a memory claim without its compile"
    assert re.search(r"\d+ %", header) and "tokens/s" in header


def test_a_mesh_that_misses_the_slice_is_a_clear_error():
    from kjax.errors import KjaxError
    config = load_config(os.path.join(ROOT, "tpu_configs", "v3_32.py"), ["--config.mesh.data=16"])
    with pytest.raises(KjaxError, match="= 16 but there are 32 devices"):
        check_mesh(config, 32, 4)


def _tpu_check():
    spec = importlib.util.spec_from_file_location("tpu_check",
                                                  os.path.join(ROOT, ".ci", "tpu_check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ci_compiles_every_preset():
    """`make tpu-check` (CI) has a case for every file in tpu_configs/, the
    one its header's memory paragraph quotes (compile_checks/cases.py)."""
    module = _tpu_check()
    presets = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "tpu_configs",
                                                                        "*.py"))}
    assert presets <= {case[0] for case in module.CASES if case[4]}
    from compile_checks.cases import header_case
    assert all(header_case(p, module.CASES)[4] for p in presets)   # alone on its slice: fits



def test_tpu_check_compiles_no_more_at_once_than_memory_holds():
    """Lowering takes every core; compiling (write, refresh) at most one
    largest compile per COMPILE_GIB of available memory, and never none."""
    module = _tpu_check()
    gib = module.COMPILE_GIB << 20   # in KiB, as /proc/meminfo counts
    assert module.default_jobs("check", cores=8, available_kib=gib) == 8
    assert module.default_jobs("write", cores=2, available_kib=23 * (1 << 20)) == 1
    assert module.default_jobs("refresh", cores=8, available_kib=3 * gib) == 3
    assert module.default_jobs("write", cores=2, available_kib=100 * gib) == 2
    assert module.default_jobs("write", cores=2, available_kib=gib // 2) == 1
