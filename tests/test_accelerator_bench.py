"""benchmarks/gpu/suite.py and the scripts it runs, at --tiny sizes on CPU,
so the one command a GPU user runs cannot rot: every part runs (or says why
not) and prints its rows as it measures them, the run's compilation cache is
shared by its parts, the per-kernel profile adds up, the train/kill/resume
run ends where an uninterrupted one does, and the modern_base compile probe
prints every phase of every variant."""
import gzip
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "step"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import profile_step  # noqa: E402

TINY = ["--config.model.num_layers=2", "--config.model.hidden_size=64",
        "--config.model.num_heads=2", "--config.model.intermediate_size=128",
        "--config.model.vocab_size=512"]
ROW = re.compile(r"^\| ([\d.]+) \| ([\d.]+)% \| ([\d.]+) \| (\S[^|]*) \| ([^|]*) \|$", re.M)


def bench(*args, timeout=1100):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "1",
           "PYTHONPATH": ROOT}
    before = results()
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=timeout)
    assert results() == before, "a check of a script wrote records into benchmarks/results"
    return proc


def results():
    """The committed records' files and sizes: a --tiny check must leave them alone."""
    folder = os.path.join(ROOT, "benchmarks", "results")
    return {n: os.path.getsize(os.path.join(folder, n)) for n in sorted(os.listdir(folder))} \
        if os.path.isdir(folder) else {}


def write_trace(path, events, procs, threads):
    meta = [{"ph": "M", "pid": p, "name": "process_name", "args": {"name": n}}
            for p, n in procs.items()]
    meta += [{"ph": "M", "pid": p, "tid": t, "name": "thread_name", "args": {"name": n}}
             for (p, t), n in threads.items()]
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump({"traceEvents": meta + events}, f)


def x(pid, tid, ts, dur, name, op=None):
    return {"ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur, "name": name,
            "args": {"hlo_op": op, "hlo_module": "jit_step"} if op else {}}


def test_gpu_trace_counts_stream_kernels_once(tmp_path):
    """Kernels come from the device's stream lines only (the derived "XLA Ops"
    line repeats their time), grouped per kernel with their HLO op."""
    events = []
    for step in range(2):
        t = 1000 * step
        events += [x(2, 7, t, 300, "input_scatter_fusion_2", "input_scatter_fusion.2"),
                   x(2, 7, t + 300, 50, "nvjet_sm90_tst", "custom-call.3"),
                   x(2, 7, t + 350, 50, "nvjet_sm90_tst", "custom-call.4"),
                   x(2, 7, t + 400, 100, "Memset 0"),
                   x(2, 9, t, 500, "input_scatter_fusion.2", "input_scatter_fusion.2")]
    path = tmp_path / "h.trace.json.gz"
    write_trace(path, events, {1: "/host:CPU", 2: "/device:GPU:0"},
                {(2, 7): "Stream #14(Compute)", (2, 9): "XLA Ops"})
    found, where = profile_step.kernel_events(str(path))
    assert len(found) == 8 and "Stream #14" in where
    rows = profile_step.aggregate(found, 2)
    assert [r["name"] for r in rows] == ["input_scatter_fusion_2", "nvjet_sm90_tst", "Memset 0"]
    assert rows[0]["ms_step"] == pytest.approx(0.3) and rows[0]["share"] == pytest.approx(0.6)
    assert rows[1]["per_step"] == 2
    hlo = profile_step.hlo_index(
        "fused_computation.2 {\n  p = bf16[16384,768]{1,0} parameter(0)\n"
        "  ROOT s.1 = bf16[2,768]{1,0} scatter(a, b, p), to_apply=add\n}\n\n"
        "ENTRY main {\n  %input_scatter_fusion.2 = bf16[2,768]{1,0} fusion(x, y), kind=kInput, "
        "calls=fused_computation.2\n  custom-call.3 = (bf16[8,8]{1,0}, s8[0]{0}) custom-call(a, b), "
        'custom_call_target="__cublas$lt$matmul"\n}\n')
    assert hlo["input_scatter_fusion.2"] == "scatter fusion → bf16[2,768]"
    assert hlo["custom-call.3"].startswith("custom-call __cublas$lt$matmul → (bf16[8,8]")
    text = profile_step.tables(rows, 2, hlo, top=2, by="kernel")
    shares = [float(m[1]) for m in ROW.findall(text)]
    assert len(shares) == 3 and sum(shares) == pytest.approx(100, abs=0.2)   # 2 + "(1 more)"
    assert "scatter fusion → bf16[2,768]" in text and "| scatter | 0.300 | 60.0% |" in text


def test_cpu_trace_counts_leaf_thunks(tmp_path):
    """On CPU a `while` thunk spans its body's thunks: only the leaves count."""
    events = [x(1, 3, 0, 100, "while.1", "while.1"), x(1, 3, 10, 40, "dot.2", "dot.2"),
              x(1, 3, 60, 30, "add_fusion", "add_fusion"), x(1, 4, 0, 20, "copy.5", "copy.5"),
              x(1, 3, 200, 5, "end: dot.2")]
    path = tmp_path / "c.trace.json.gz"
    write_trace(path, events, {1: "/host:CPU"}, {(1, 3): "python", (1, 4): "pool"})
    found, where = profile_step.kernel_events(str(path))
    assert sorted(e["name"] for e in found) == ["add_fusion", "copy.5", "dot.2"]
    assert "host threads" in where


@pytest.mark.slow
def test_profile_step_on_cpu_adds_up(tmp_path):
    proc = bench("benchmarks/step/profile_step.py", "--config", "bert_base", "--seq", "32",
                 "--batch", "2", "--dtype", "float32", "--steps", "2", "--top", "10",
                 "--out", str(tmp_path), "--results", str(tmp_path / "results"), *TINY,
                 timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = ROW.findall(proc.stdout)
    assert len(rows) == 11 and rows[-1][3].startswith("(") and "more)" in rows[-1][3]
    assert sum(float(r[1]) for r in rows) == pytest.approx(100, abs=0.5)
    assert any(" fusion → f32[" in r[4] for r in rows)      # HLO ops resolved
    assert open(tmp_path / "profile.md", encoding="utf-8").read().strip() in proc.stdout
    assert (tmp_path / "step.hlo.txt.gz").is_file()
    # one record per kernel family, its shares those of the summary table
    families = [json.loads(x) for x in open(tmp_path / "results" / "profile_step.jsonl")]
    assert {r["benchmark"] for r in families} == {"profile_step"}
    assert sum(r["figures"]["share"] for r in families) == pytest.approx(1, abs=0.01)
    assert all(r["shape"] == {"seq": 32, "batch": 2, "dtype": "float32"} for r in families)


@pytest.mark.slow
def test_gpu_suite_runs_at_tiny_sizes(tmp_path):
    out = tmp_path / "out"
    proc = bench("benchmarks/gpu/suite.py", "--tiny", "--parts", "abcdeg", "--out", str(out),
                 "--peer-venv", str(tmp_path / "no_peer"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = open(out / "gpu_suite.md", encoding="utf-8").read()
    assert "a check of the script" in text   # --tiny: in OUT, no record (bench() checks)
    for key in "abcdeg":
        assert f"#### ({key})" in text
        assert f"#### ({key})" in proc.stdout
    # (a): the HF Flax peer is not in this environment: said, not failed
    assert re.search(r"#### \(a\).*\n\nnot run: .*no transformers 4\.57", text)
    # (b)-(d): a row per variant with compile, cache, first step, step time, tokens/s, MFU
    rows = re.findall(r"^\| ([^|]+) \| ([\d.]+|–) \| (hit|miss|–) \| ([\d.]+) \| (yes|NO) \| "
                      r"([\d.]+) \| (\d+) \| ([\d.]+%|–) \|", text, re.M)
    names = [r[0] for r in rows]
    assert any(n.startswith("preset with the CPU/TPU defaults") for n in names)
    assert any("auto: scan_unroll=0 + dropout_rng=rbg" in n for n in names)
    assert any(n.startswith("torch ") and "eager" in n for n in names)
    assert all(float(r[5]) > 0 and int(r[6]) > 0 for r in rows)
    for r in rows:   # every row was printed as it was measured (the md is not printed)
        assert f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |" in proc.stdout
    assert "not reached" not in text and "cut off" not in text
    assert "--tiny: two variants" in text and "torch.compile not run" in text
    assert "kjax (auto (cuDNN on GPU)) / PyTorch eager tokens/s" in text
    assert re.search(r"#### \(e\)[\s\S]*\| xla \|", text)
    # (g): the preset's per-kernel table; its program came from (b) through the run's cache
    assert re.search(r"#### \(g\)[\s\S]*\| ms/step \| share \| launches/step \|", text)
    assert {"profile.md", "step.hlo.txt.gz"} <= set(os.listdir(out / "profile"))
    assert re.search(r"#### \(g\)[^\n]*\n\n`bert_base`.*compile ([\d.]+) s", text)


@pytest.mark.slow
def test_train_kill_resume_ends_where_a_straight_run_does(tmp_path):
    proc = bench("benchmarks/system/train_resume.py", "--tiny", "--out", str(tmp_path),
                 timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"\| resumed, SIGTERM at step ≥ 3 \| 143 \|", proc.stdout)
    assert re.search(r"\| resumed, SIGKILL at step ≥ 9 \| -9 \|", proc.stdout)
    assert "resumed run's 12 (of 12)" in proc.stdout and "**identical**" in proc.stdout


@pytest.mark.slow
def test_modern_compile_prints_every_phase(tmp_path):
    proc = bench("benchmarks/step/modern_compile.py", "--tiny", "--out", str(tmp_path),
                 timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = re.findall(r"^\| ([^|]+) \|((?: [\d.]+ \|){7}) ([\d.]+) \| (yes|NO) \| ([^|]*) \|",
                      proc.stdout, re.M)
    assert len(rows) == 4, proc.stdout
    assert rows[0][4].strip() == "miss (written)" and rows[1][4].strip() == "hit"
    assert rows[2][4].strip() == "off" and "Longest host events while compiling" in proc.stdout
    for phase in ("start", "init", "batch", "lower", "compile", "step 1", "step 2"):
        assert f"] {phase}: s " in proc.stdout
