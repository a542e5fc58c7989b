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
    # memory: compiled (kjax compile, docs/TPU.md §15) or not claimed at all
    if re.search(r"is enough|\bfits\b|needs [\d.]+ GiB", header):
        assert "kjax compile" in header, "a memory claim without its compile"
    assert re.search(r"\d+ %", header) and "tokens/s" in header


def test_a_mesh_that_misses_the_slice_is_a_clear_error():
    from kjax.errors import KjaxError
    config = load_config(os.path.join(ROOT, "tpu_configs", "v3_32.py"), ["--config.mesh.data=16"])
    with pytest.raises(KjaxError, match="= 16 but there are 32 devices"):
        check_mesh(config, 32, 4)


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "tpu_configs", "*.py"))),
                         ids=os.path.basename)
def test_every_preset_header_states_its_compiled_memory(path):
    """Issue 25: a preset's memory is what XLA said for its slice (`make
    tpu-check` compiles every one), with the command that says it again."""
    with open(path, encoding="utf-8") as f:
        header = " ".join(f.read().split('"""')[1].split())
    name = os.path.basename(path)
    assert re.search(rf"Compiled for a (v\d-\d+)[^`]* \(`kjax compile --config "
                     rf"tpu_configs/{name} --topology v\d-\d+`", header), \
        "no compiled memory in the header"
    assert re.search(r"needs [\d.]+ GiB per (core|chip) of \d+ \(arguments [\d.]+, "
                     r"temporaries [\d.]+\): fits", header)
    assert re.search(r"largest batch", header, re.I)   # found, or said not searched


def test_ci_compiles_every_preset():
    """`make tpu-check` (CI) has a case for every file in tpu_configs/."""
    spec = importlib.util.spec_from_file_location("tpu_check",
                                                  os.path.join(ROOT, ".ci", "tpu_check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    presets = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "tpu_configs",
                                                                        "*.py"))}
    assert presets <= {case[0] for case in module.CASES if case[4]}


HEADER_FIGURES = re.compile(
    r"Compiled for a v\d-\d+[^`]* \(`kjax compile --config tpu_configs/(\w+)\.py --topology "
    r"(v\d-\d+)`; libtpu ([\d.]+),[^)]*\):.*?needs ([\d.]+) GiB per (?:core|chip) of \d+ "
    r"\(arguments ([\d.]+), temporaries ([\d.]+)\): fits")
DOCS_ROW = re.compile(r"^\| `(\w+)\.py`(?: \+ ([^|]+?))? \| (v\d-\d+) \(\d+\) \| \d+ \| [^|]* \| "
                      r"[^|]* \| ([\d.]+|—) \| ([\d.]+|—) \| ([\d.]+|—) \| \d+ \| ([^|]*) \|$")


def test_headers_and_docs_quote_the_compile_record():
    """Issue 35: what a preset's header and docs/TPU.md's table quote — XLA's
    verdict and memory, the libtpu that gave them — is what the committed
    record says (.ci/compile_record.json, the verdicts `make tpu-check`
    checks), to the hundredth of a GiB. A case the record lacks fails CI's
    tpu-check itself; here every quoted figure of a recorded case is held to it."""
    from kjax.compile_checks.record import Record, case_id
    spec = importlib.util.spec_from_file_location("tpu_check_quotes",
                                                  os.path.join(ROOT, ".ci", "tpu_check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    record = Record(os.path.join(ROOT, ".ci", "compile_record.json")).entries
    gib = lambda b: f"{b / 2**30:.2f}"  # noqa: E731
    wrong, compared = [], 0
    for path in sorted(glob.glob(os.path.join(ROOT, "tpu_configs", "*.py"))):
        with open(path, encoding="utf-8") as f:
            header = " ".join(f.read().split('"""')[1].split())
        name, topology, libtpu, peak, arguments, temporaries = HEADER_FIGURES.search(
            header).groups()
        entry = record.get(case_id("tpu", name, topology))
        if entry:
            v, compared = entry["verdict"], compared + 1
            want = (entry["versions"]["libtpu"], gib(v["peak"]), gib(v["arguments"]),
                    gib(v["temporaries"]))
            if (libtpu, peak, arguments, temporaries) != want or not v["fits"]:
                wrong.append(f"{name}.py's header: libtpu {libtpu}, {peak} GiB (arguments "
                             f"{arguments}, temporaries {temporaries}); the record: libtpu "
                             f"{want[0]}, {want[1]} GiB ({want[2]}, {want[3]}), fits {v['fits']}")
    with open(os.path.join(ROOT, "docs", "TPU.md"), encoding="utf-8") as f:
        docs = f.read()
    notes = {(c[0], c[3], c[1]): module.case_key(c) for c in module.CASES}
    for line in docs.splitlines():
        m = DOCS_ROW.match(line)
        entry = m and record.get(notes.get((m.group(1), m.group(2) or "", m.group(3)), ""))
        if not entry:
            continue   # a change no case makes (history: "before the fix")
        v, compared = entry["verdict"], compared + 1
        figures = (m.group(4), m.group(5), m.group(6), m.group(7).startswith("yes"))
        want = (gib(v["arguments"]) if v["fits"] else "—",
                gib(v["temporaries"]) if v["fits"] else "—", gib(v["peak"]) if v["fits"] else "—",
                v["fits"])
        if figures != want:
            wrong.append(f"docs/TPU.md's row {line[:60]}...: {figures}; the record: {want}")
    quoted = re.search(r"jax ([\d.]+) \+ libtpu ([\d.]+)", docs).groups()
    for case, entry in record.items():
        if case.startswith("tpu ") and (entry["versions"]["jax"],
                                        entry["versions"]["libtpu"]) != quoted:
            wrong.append(f"docs/TPU.md quotes jax {quoted[0]} + libtpu {quoted[1]}; {case} was "
                         f"compiled with {entry['versions']}")
    assert not wrong, "\n".join(wrong)
    assert compared, "no header or docs row quotes a recorded case"
