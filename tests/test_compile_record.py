"""Compile verdicts keyed by the program (compile_checks/record.py,
.ci/tpu_check.py). The checks' compilers (libtpu, the CUDA plugin)
are not in the test venv: the case is lowered for real on the 8 CPU devices
(`--topology local`, the same code path) and compiled by a scripted compiler
that counts its calls."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil

import pytest

from conftest import ROOT
from compile_checks import record as cr
from compile_checks.targets import h100_target
from kjax.pretrain import aot


def load_check(name: str = "tpu_check"):
    """.ci/NAME.py as a module (the check scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(f"{name}_record",
                                                  os.path.join(ROOT, ".ci", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def check(tmp_path, monkeypatch):
    """tpu_check with its presets in tmp_path (the demo, to be edited) and a
    compiler that answers "fits, peak = 1 MiB × layers" and counts calls."""
    module = load_check()
    configs = tmp_path / "configs"
    configs.mkdir()
    shutil.copy(os.path.join(ROOT, "tpu_configs", "demo.py"), configs / "demo.py")
    monkeypatch.setattr(module, "CONFIGS", str(configs))
    module.CACHE.clear()
    calls = []

    def compile_step(config, devices, step="train", cache=None, lowered=None):
        assert lowered is not None   # the lowering the hash was taken of
        calls.append(config.model.num_layers)
        return aot.StepCompile(step, config.train.batch_size, 1.0, True, arguments=7,
                               temporaries=config.model.num_layers << 20,
                               peak=7 + (config.model.num_layers << 20))
    monkeypatch.setattr(aot, "compile_step", compile_step)
    module.calls, module.preset_file = calls, configs / "demo.py"
    module.record_path = str(tmp_path / "record.json")
    return module


def run(check, mode):
    """One case through the check, as a worker runs it (a fresh read of the record)."""
    record = cr.Record(check.record_path)
    with cr.without_locations():
        report = check.run_case("demo", "local", [], False, record, mode)
    if mode != "check" and report["entry"]:
        record.put(report["entry"])
        record.save("tpu")
    return report


def test_a_recorded_program_is_not_compiled_and_a_changed_preset_is(check):
    written = run(check, "write")
    assert written["status"] == "compiled" and check.calls == [2] and written["failure"] is None
    again = run(check, "check")            # CI: lowered, looked up, not compiled
    assert again["status"] == "recorded" and check.calls == [2] and again["failure"] is None
    assert again["steps"]["train"].peak == written["steps"]["train"].peak == 7 + (2 << 20)
    text = check.preset_file.read_text().replace("num_layers=2", "num_layers=3")
    check.preset_file.write_text(text)     # the preset changed: another program
    changed = run(check, "check")
    assert changed["status"] == "compiled" and check.calls == [2, 3]
    assert changed["steps"]["train"].peak == 7 + (3 << 20)   # what XLA says now
    assert changed["failure"] == ("record stale: the lowered program changed for tpu demo "
                                  f"local: run `make tpu-check RECORD=write` and commit "
                                  f"{os.path.relpath(check.record_path)}")
    run(check, "write")                    # rewritten: recorded again
    assert run(check, "check")["status"] == "recorded" and check.calls == [2, 3, 3]


def test_a_hand_edited_verdict_for_a_changed_program_does_not_pass(check):
    run(check, "write")
    check.preset_file.write_text(check.preset_file.read_text().replace("num_layers=2",
                                                                       "num_layers=3"))
    with open(check.record_path) as f:
        rows = json.load(f)
    rows[0]["verdict"]["temporaries"] = 3 << 20   # what the new preset "needs", by hand
    rows[0]["verdict"]["peak"] = 7 + (3 << 20)
    with open(check.record_path, "w") as f:
        json.dump(rows, f)
    report = run(check, "check")
    assert report["status"] == "compiled" and check.calls == [2, 3]
    assert report["failure"].startswith("record stale: the lowered program changed")


def test_another_compiler_version_compiles_again(check, monkeypatch):
    run(check, "write")
    versions = cr.compiler_versions("tpu")
    monkeypatch.setattr(cr, "compiler_versions",
                        lambda kind, target=None: {**versions, "libtpu": "9.9.9"})
    report = run(check, "check")
    assert report["status"] == "compiled" and check.calls == [2, 2]
    assert f"libtpu {versions['libtpu']} → 9.9.9" in report["failure"]
    assert run(check, "refresh")["status"] == "compiled" and check.calls == [2, 2, 2]


def test_an_absent_case_fails_the_check_and_write_keeps_one_case_a_line(check, tmp_path):
    report = run(check, "check")
    assert report["failure"].startswith("record absent for tpu demo local: run `make tpu-check")
    assert not os.path.exists(check.record_path)   # check mode never writes
    record = cr.Record(check.record_path)
    for name in ("tpu b x", "gpu a y", "tpu a x"):
        record.put(cr.make_entry(name, "p", "t", [], "sha256:0", {}, {}, "2026-11-26"))
    record.save("tpu", keep={"tpu a x"})           # tpu b: no longer a case; gpu a: stays
    lines = open(check.record_path).read().splitlines()
    assert lines[0] == "[" and lines[-1] == "]" and len(lines) == 4
    assert [json.loads(line.rstrip(","))["case"] for line in lines[1:-1]] == ["gpu a y", "tpu a x"]


def test_a_broken_record_is_one_line(tmp_path):
    path = tmp_path / "record.json"
    path.write_text("[{")
    with pytest.raises(ValueError, match=r"is not the compile record's JSON .*RECORD=write"):
        cr.Record(str(path))
    with pytest.raises(ValueError, match="record mode 'fast'"):
        cr.settle(cr.Record(str(tmp_path / "none.json")), "c", "p", {}, "fast", dict)


KERNEL = '''
def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0
def f(x):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
'''


def test_the_hash_names_no_file():
    """A Pallas kernel lowered for TPU carries its Mosaic body as serialized
    MLIR with locations: the same kernel from another folder, or moved down a
    few lines, must hash the same (a CI clone lives elsewhere)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def lowered(filename, lines_above):
        namespace = {"pl": pl, "jax": jax}
        exec(compile("\n" * lines_above + KERNEL, filename, "exec"), namespace)
        x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
        return jax.jit(namespace["f"]).trace(x).lower(lowering_platforms=("tpu",))

    with cr.without_locations():
        here, there = lowered("/a/kjax/k.py", 0), lowered("/elsewhere/kjax/k.py", 3)
        assert "tpu_custom_call" in here.as_text()
        assert cr.program_hash(here) == cr.program_hash(there)
    # the guard is needed: with locations the two bodies differ
    assert cr.program_hash(lowered("/a/kjax/k.py", 0)) != \
        cr.program_hash(lowered("/elsewhere/kjax/k.py", 3))
    assert jax.config.jax_traceback_in_locations_limit != 0   # restored


def test_the_committed_record_is_well_formed():
    """One case a line, sorted; every entry names the compiler and a hash."""
    record = cr.Record(os.path.join(ROOT, ".ci", "compile_record.json"))
    assert record.entries, "the compile record is empty"
    text = open(record.path, encoding="utf-8").read()
    assert len(text.splitlines()) == len(record.entries) + 2
    assert list(record.entries) == sorted(record.entries)
    for case, entry in record.entries.items():
        kind = case.split()[0]
        assert case == cr.case_id(kind, entry["preset"], entry["topology"], entry["overrides"])
        assert set(cr.COMPILERS[kind]) <= set(entry["versions"]), case
        assert entry["program"].startswith("sha256:") and len(entry["program"]) == 71
    target = "sha256:" + hashlib.sha256(h100_target().encode()).hexdigest()[:16]
    assert all(e["versions"]["target"] == target for c, e in record.entries.items()
               if c.startswith("gpu ")), "the H100 target changed: run `make gpu-check RECORD=write`"

