"""The figures written from the compile record (compile_checks/figures.py):
what is committed in the presets' headers and the tables of docs/TPU.md and
docs/GPU.md is what the committed record writes, and the writing itself,
on a small record made here."""
from __future__ import annotations

import glob
import json
import os

import pytest

from conftest import ROOT
from compile_checks import figures
from compile_checks.record import case_id
from compile_checks.targets import H100_TOPOLOGY

GENERATED = sorted(glob.glob(os.path.join(ROOT, "tpu_configs", "*.py"))) + [
    os.path.join(ROOT, "docs", "TPU.md"), os.path.join(ROOT, "docs", "GPU.md")]
GIB = 1 << 30
MIB = 1 << 20


@pytest.fixture(scope="module")
def written():
    return figures.render()


@pytest.mark.parametrize("path", GENERATED, ids=lambda p: os.path.relpath(p, ROOT))
def test_the_committed_figures_are_what_the_record_writes(written, path):
    with open(path, encoding="utf-8") as f:
        committed = f.read()
    assert committed == written[path], (
        f"{os.path.relpath(path, ROOT)} quotes other figures than .ci/compile_record.json: "
        f"run `python -m compile_checks.figures` and commit it")


def entry(preset, topology, overrides=(), kind="tpu", **verdict):
    v = {"batch_size": 128, "seconds": 12.4, "cpu_s": 30.6, "fits": True, "error": "",
         "same_as": "", "arguments": GIB + GIB // 4, "temporaries": 7 * GIB, "outputs": 0,
         "aliased": 0, **verdict}
    v["peak"] = v.get("peak", v["arguments"] + v["temporaries"]) if v["fits"] else 0
    versions = {"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": "0.0.42.1"}
    return {"case": case_id(kind, preset, topology, list(overrides)), "preset": preset,
            "topology": topology, "overrides": list(overrides), "program": "sha256:0",
            "versions": versions, "verdict": v, "date": ""}


REFUSED = ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
           "temporaries (17.80G) exceeds available HBM (15.48G).")


def test_a_header_paragraph_names_the_slice_the_memory_and_the_command():
    lines = figures.header_paragraph("tiny", entry("tiny", "v3-32", batch_size=512))
    assert " ".join(lines) == (
        "Memory, from .ci/compile_record.json (`make tpu-check RECORD=write` writes this "
        "paragraph): compiled for a v3-32 as its 4 hosts would (jax 0.10.2, libtpu 0.0.42.1, "
        "no TPU), at batch 512 (16 per core) the train step needs 8.25 GiB per core of 16 "
        "(arguments 1.25, temporaries 7.00): fits. `kjax compile --config tpu_configs/tiny.py "
        "--topology v3-32` says it again; with `--fit-batch`, also the largest batch that "
        "compiles (docs/TPU.md §15).")
    assert all(len(line) <= figures.WIDTH for line in lines)
    assert any("`kjax compile --config tpu_configs/tiny.py --topology v3-32`" in line
               for line in lines)   # a command is never broken across lines
    chip = " ".join(figures.header_paragraph("tiny", entry("tiny", "v4-8", batch_size=256)))
    assert "at batch 256 (64 per chip)" in chip and "per chip of 32" in chip


def test_a_header_says_a_refusal_and_a_shared_program():
    refused = " ".join(figures.header_paragraph("tiny", entry("tiny", "v3-8", fits=False,
                                                              error=REFUSED)))
    assert "the train step does not fit: temporaries 17.80 GiB needed of 15.48 usable." in refused
    shared = " ".join(figures.header_paragraph("shake_random", entry(
        "shake_random", "v3-8", same_as="shake_pos_plus")))
    assert ("XLA compiled its program once for it and shake_pos_plus.py (the same up to "
            "floating-point constants).") in shared


def test_the_tpu_table_has_a_row_per_case_in_the_checks_order():
    cases = [("tiny", "v2-8", [], "", True),
             ("tiny", "v3-8", ["train.batch_size=9"], "batch 9: refused", False)]
    entries = {e["case"]: e for e in (
        entry("tiny", "v2-8", collectives={"all-reduce": 300 * MIB, "all-gather": 420 * MIB,
                                           "in_loops": 100 * MIB}),
        entry("tiny", "v3-8", ["train.batch_size=9"], batch_size=9, fits=False, error=REFUSED))}
    lines = figures.tpu_table(entries, cases)
    assert lines[0].startswith("Recorded with jax 0.10.2, libtpu 0.0.42.1; per device;")
    assert lines[-2:] == [
        "| `tiny.py` | v2-8 (1) | 128 | 12 | 31 | 1.25 | 7.00 | 8.25 | 8 | 300 / 420 / 0 "
        "(100 in loops) | yes |",
        "| `tiny.py` + batch 9: refused | v3-8 (1) | 9 | 12 | 31 | — | — | — | 16 | — | **no**: "
        "temporaries 17.80 GiB needed of 15.48 usable |"]
    with pytest.raises(figures.MissingFigures, match=r"no verdict for `tpu tiny v4-8`: run "
                                                     r"`make tpu-check RECORD=write`"):
        figures.tpu_table(entries, cases + [("tiny", "v4-8", [], "", True)])


def test_the_gpu_table_counts_findings_and_names_the_attention():
    clean = entry("tiny", H100_TOPOLOGY, ["train.batch_size=8"], kind="gpu", compiled=True,
                  hlo_findings=[], cudnn_attention=True, pallas_attention=True,
                  ptx_findings=[], kernels={"shake_flash_forward": {}, "shake_flash_dq": {}})
    bad = entry("tiny", H100_TOPOLOGY, ["train.batch_size=9"], kind="gpu", compiled=True,
                hlo_findings=["a", "b"], cudnn_attention=False, ptx_findings=["spills"],
                kernels={"shake_flash_dkv": {}})
    for e in (clean, bad):
        e["versions"] = {"jax": "0.10.2", "jax-cuda13-plugin": "0.10.2",
                         "nvidia-cuda-nvcc": "13.5.37", "nvidia-cudnn-cu13": "9.28.1.4"}
    lines = figures.gpu_table({clean["case"]: clean, bad["case"]: bad}, 80 * GIB,
                              [("tiny", ["train.batch_size=8"], "8×8"),
                               ("tiny", ["train.batch_size=9"], "8×9")])
    assert lines[0].startswith("Recorded with jax 0.10.2, jax-cuda13-plugin 0.10.2, "
                               "nvidia-cuda-nvcc 13.5.37, nvidia-cudnn-cu13 9.28.1.4")
    assert lines[-2:] == [
        "| tiny | 8×8 | 12 | 31 | 1.25 | 7.00 | 8.25 | 80 | — | clean; 2 Pallas kernels, no "
        "spills (ptxas) | Pallas + cuDNN |",
        "| tiny | 8×9 | 12 | 31 | 1.25 | 7.00 | 8.25 | 80 | — | **2 scatter(s)**; 1 Pallas "
        "kernels, **1 spill/wgmma finding(s)** | XLA |"]


PRESET = '''r"""A tiny preset.

{paragraph}

Throughput: kept as it is.
"""
from kjax.config import defaults
'''
MARKS = ("<!-- {name}: written from .ci/compile_record.json by `python -m "
         "compile_checks.figures` (make tpu-check / gpu-check RECORD=write run it); edit "
         "the record, not this -->\n{body}\n<!-- end of {name} -->")


def checkout(tmp_path, paragraph, body="| stale |"):
    """A checkout with one preset, both docs (their tables stale) and a record."""
    (tmp_path / "tpu_configs").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "tpu_configs" / "tiny.py").write_text(PRESET.format(paragraph=paragraph))
    for doc, name in (("TPU.md", figures.TPU_TABLE), ("GPU.md", figures.GPU_TABLE)):
        (tmp_path / "docs" / doc).write_text(
            f"# {doc}\n\nBefore.\n\n{MARKS.format(name=name, body=body)}\n\nAfter.\n")
    gpu = entry("tiny", H100_TOPOLOGY, ["train.batch_size=8"], kind="gpu", compiled=True,
                hlo_findings=[], cudnn_attention=False)
    rows = [entry("tiny", "v3-8"), gpu]
    (tmp_path / "record.json").write_text(json.dumps(rows))
    return dict(tpu_cases=[("tiny", "v3-8", [], "", True)],
                gpu_cases=[("tiny", ["train.batch_size=8"], "8×8")])


def test_a_model_change_is_one_write_and_nothing_else_moves(tmp_path):
    cases = checkout(tmp_path, "Memory, from .ci/compile_record.json: 3.00 GiB, by hand\n"
                               "on two lines.")
    root, record = str(tmp_path), str(tmp_path / "record.json")
    preset, tpu_md = tmp_path / "tpu_configs" / "tiny.py", tmp_path / "docs" / "TPU.md"
    assert sorted(figures.stale(root, record, **cases)) == sorted(
        str(p) for p in (preset, tpu_md, tmp_path / "docs" / "GPU.md"))
    assert len(figures.write(root, record, **cases)) == 3
    text = preset.read_text()
    assert "needs 8.25 GiB per core of 16" in text and "by hand" not in text
    assert text.startswith('r"""A tiny preset.\n\nMemory, from') and \
        text.endswith("docs/TPU.md §15).\n\nThroughput: kept as it is.\n\"\"\"\nfrom kjax.config import defaults\n")
    doc = tpu_md.read_text()
    assert doc.startswith("# TPU.md\n\nBefore.\n\n<!--") and doc.endswith("-->\n\nAfter.\n")
    assert "| `tiny.py` | v3-8 (1) | 128 |" in doc and "| stale |" not in doc
    assert figures.write(root, record, **cases) == []        # written: nothing differs
    rows = json.loads((tmp_path / "record.json").read_text())
    rows[0]["verdict"].update(temporaries=9 * GIB, peak=10 * GIB + GIB // 4)   # re-recorded
    (tmp_path / "record.json").write_text(json.dumps(rows))
    assert sorted(figures.write(root, record, **cases)) == sorted([str(preset), str(tpu_md)])
    assert "needs 10.25 GiB per core of 16 (arguments 1.25, temporaries 9.00)" in " ".join(
        preset.read_text().split())
    assert "| 1.25 | 9.00 | 10.25 | 16 | — | yes |" in tpu_md.read_text()


def test_a_file_without_its_marks_is_one_line(tmp_path):
    cases = checkout(tmp_path, "Compiled for a v3-8: 3.00 GiB, by hand.")
    with pytest.raises(figures.MissingFigures, match=r"tiny.py: its docstring has no paragraph "
                                                     r"beginning 'Memory, from"):
        figures.render(str(tmp_path), str(tmp_path / "record.json"), **cases)
    cases = checkout(tmp_path / "b", "Memory, from .ci/compile_record.json", body="")
    (tmp_path / "b" / "docs" / "GPU.md").write_text("# GPU.md\n\nNo marks.\n")
    with pytest.raises(figures.MissingFigures, match="GPU.md: no one pair of marks "
                                                     r"\(<!-- the gpu-check table: written"):
        figures.render(str(tmp_path / "b"), str(tmp_path / "b" / "record.json"), **cases)


def test_the_command_checks_and_writes(tmp_path, monkeypatch, capsys):
    cases = checkout(tmp_path, "Memory, from .ci/compile_record.json")
    monkeypatch.setattr(figures, "CHECKOUT", str(tmp_path))
    monkeypatch.setattr(figures, "TPU_CASES", cases["tpu_cases"])
    monkeypatch.setattr(figures, "GPU_CASES", cases["gpu_cases"])
    record = ["--record-file", str(tmp_path / "record.json")]
    assert figures.main(["--check", *record]) == 1
    err = capsys.readouterr().err
    assert "figures: differs from the record" in err and "tiny.py" in err
    assert "run `python -m compile_checks.figures` and commit the files" in err
    assert figures.main(record) == 0 and figures.main(["--check", *record]) == 0
    (tmp_path / "record.json").write_text("[{")
    assert figures.main(["--check", *record]) == 2
    assert "is not the compile record's JSON" in capsys.readouterr().err
