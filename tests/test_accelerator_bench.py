"""benchmarks/accelerator.py, the issue-24 accelerator benchmark, at --tiny
sizes on CPU, so the one command a GPU session runs cannot rot: every part
runs (or says why not), every kjax variant line carries its figures, and the
section lands in the output folder only (--no-record)."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_accelerator_benchmark_runs_at_tiny_sizes(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "KJAX_PEER_VENV": str(tmp_path / "no_peer"),
           "JAX_NUM_CPU_DEVICES": "1"}
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "accelerator.py"),
                           "--tiny", "--parts", "abcde", "--out", str(tmp_path / "out"),
                           "--no-record", "--budget", "1000"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=1100)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = open(tmp_path / "out" / "accelerator.md", encoding="utf-8").read()
    assert "a check of the script" in text   # --no-record: in OUT, not in the docs
    assert "a check of the script" not in open(os.path.join(ROOT, "docs", "PERFORMANCE.md"),
                                               encoding="utf-8").read()
    for key in "abcde":
        assert f"#### ({key})" in text
    # (a): the HF Flax peer is not in this environment: said, not failed
    assert re.search(r"#### \(a\).*\n\nnot run: .*no transformers 4\.57", text)
    # (b)-(d): a row per variant with compile, first step, step time, tokens/s, MFU
    rows = re.findall(r"^\| ([^|]+) \| ([\d.]+|–) \| ([\d.]+) \| (yes|NO) \| ([\d.]+) \| (\d+) \| "
                      r"([\d.]+%|–) \|", text, re.M)
    names = [r[0] for r in rows]
    assert any(n.startswith("preset (dropout") for n in names)
    assert any("scan_unroll=0 + dropout_rng=rbg" in n for n in names)
    assert any(n.startswith("torch ") and "eager" in n for n in names)
    assert all(float(r[4]) > 0 and int(r[5]) > 0 for r in rows)
    assert "not reached" not in text and "cut off" not in text
    assert "--tiny: two variants" in text and "torch.compile not run" in text
    assert "kjax (auto (cuDNN on GPU)) / PyTorch eager tokens/s" in text
    # (e): attention.py's timing table
    assert re.search(r"#### \(e\)[\s\S]*\| xla \|", text)
