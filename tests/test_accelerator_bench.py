"""benchmarks/gpu/suite.py and the scripts it runs, at --tiny sizes on CPU,
so the one command a GPU user runs cannot rot: every part runs (or says why
not) and prints its rows as it measures them, the run's compilation cache is
shared by its parts, the per-kernel profile adds up, the train/kill/resume
run ends where an uninterrupted one does, the modern_base compile probe
prints every phase of every variant, and the call that settles the
attention questions (--settle) prints its step rows, its grid and its
verdict."""
import argparse
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
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "gpu"))
import profile_step  # noqa: E402
import settle  # noqa: E402

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


def test_settle_verdict_turns_a_flag_only_on_a_win_in_every_round():
    ms = {"flash-dropout": [36.0, 36.5, 35.9], "explicit-dropout": [39.5, 39.0, 39.8],
          "pairs-flash-dropout": [44.0, 46.0, 44.5],
          "pairs-explicit-dropout": [45.0, 45.5, 45.1]}
    off = {"dropout": False, "shake": False}
    line, figures = settle.verdict(ms, off)
    assert line.startswith('verdict: GPU_FLASH_FASTER = {"dropout": true, "shake": false} '
                           '(now {"dropout": false, "shake": false}; change kjax/model/')
    assert "faster in 3/3 rounds" in line and "faster in 2/3 rounds" in line
    assert figures["flag_dropout"] is True and figures["flag_shake"] is False
    assert figures["dropout_fused_ms"] == 36.0 and figures["shake_explicit_ms"] == 45.1
    # flags already on: the explicit rows are pinned, so a flag can turn off again
    line, figures = settle.verdict(ms, {"dropout": True, "shake": True})
    assert line.startswith('verdict: GPU_FLASH_FASTER = {"dropout": true, "shake": false} '
                           '(now {"dropout": true, "shake": true}; change')
    assert figures["shake_fused_wins"] == 2
    line, figures = settle.verdict({"explicit-dropout": [39.0]}, off)
    assert line.count("not decided (a row is missing)") == 2 and figures == \
        {"flag_dropout": False, "flag_shake": False}


def test_settle_steps_print_ratios_and_record_the_verdict(tmp_path, monkeypatch):
    """Part (s) of --settle from a child's lines (faked): each row ÷ the cuDNN
    baseline from the rounds taking turns, the verdict, one record per row."""
    names = {k: n for k, n, _ in settle.BERT_VARIANTS}
    base_ms = {"cudnn-hidden-dropout": 32.7, "explicit-dropout": 39.5, "flash-dropout": 36.0,
               "pairs-explicit-dropout": 45.0, "pairs-flash-dropout": 44.0, "no-dropout": 30.4}

    def child(kind, spec, limit, log, wanted, on_other):
        assert [n for n, _ in spec["variants"]] == wanted == [names[k] for k, _ in
                                                             settle.STEP_ROWS]
        assert spec["alternate"] == settle.ROUNDS and spec["tuning_budget_s"] == 10.0
        on_other({"flash_faster": {"dropout": False, "shake": False}})
        for r in range(3):
            on_other({"round": r, "ms": {names[k]: v + r / 10 for k, v in base_ms.items()}})
        rows = [{"name": names[k], "overrides": [], "ms": v, "tokens_per_s": 1, "mfu": 0.3,
                 **({"tiles": {"s512_dropout": "128,64,8,2/128,64,8,2/64,128,8,2"}}
                    if "flash" in k else {})} for k, v in base_ms.items()]
        return rows, "(table)"
    monkeypatch.setattr(settle, "child", child)
    printed, sections = [], []
    monkeypatch.setattr(settle, "say", printed.append)
    ctx = argparse.Namespace(
        args=argparse.Namespace(no_record=False, results=str(tmp_path)), tiny=False,
        bert=dict(preset="bert_base", seq=512, batch=32, dtype="bfloat16", rounds=2, steps=5),
        limit={"s": 250}, log=lambda key: str(tmp_path / f"{key}.log"),
        part=lambda key, title: sections.append(title), body=sections.append,
        keep_records=[], load_before=None)
    settle.steps(ctx)
    text = "\n".join(printed)
    assert "| flash-dropout | the preset on the fused path | 36.10 | 1.10× | s512_dropout: " \
        in text
    assert "| no-dropout | no dropout at all | 30.50 | 0.93× | – |" in text
    assert 'verdict: GPU_FLASH_FASTER = {"dropout": true, "shake": true}' in text
    recs = [json.loads(x) for x in open(tmp_path / "gpu_suite.jsonl", encoding="utf-8")]
    assert len(recs) == 7 and {r["part"] for r in recs[:6]} == {"b"}
    assert recs[0]["figures"]["ms_turns"] == 32.8 and recs[2]["figures"]["vs_baseline"] == 1.101
    assert recs[-1]["row"] == "verdict: GPU_FLASH_FASTER" and recs[-1]["figures"]["flag_shake"]


@pytest.mark.slow
def test_gpu_suite_runs_at_tiny_sizes(tmp_path):
    """The full set's parts and --settle's (s) and (t) in one run (one compile
    cache: (b) reads what (s) compiled); --settle's (m) and (f) are their
    scripts' tests below with --variants 1 and --signals KILL left out."""
    out = tmp_path / "out"
    proc = bench("benchmarks/gpu/suite.py", "--tiny", "--settle", "--parts", "abcdegst",
                 "--out", str(out), "--peer-venv", str(tmp_path / "no_peer"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = open(out / "gpu_suite.md", encoding="utf-8").read()
    assert "a check of the script" in text   # --tiny: in OUT, no record (bench() checks)
    for key in "abcdegst":
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
    assert "kjax (auto (GPU: local layers on the flash kernel, global ones on cuDNN)) / " \
        "PyTorch eager tokens/s" in text
    assert re.search(r"#### \(e\)[\s\S]*\| xla \|", text)
    # (g): the preset's per-kernel table; its program came from (b) through the run's cache
    assert re.search(r"#### \(g\)[\s\S]*\| ms/step \| share \| launches/step \|", text)
    assert {"profile.md", "step.hlo.txt.gz"} <= set(os.listdir(out / "profile"))
    assert re.search(r"#### \(g\)[^\n]*\n\n`bert_base`.*compile ([\d.]+) s", text)
    # --settle (s): the six step rows, the rounds taking turns, the ratios, the verdict
    assert "settle: (s) six step rows + verdict" in proc.stdout
    for key, why in settle.STEP_ROWS:
        assert re.search(rf"^\| {key} \| {re.escape(why)} \| [\d.]+ \| [\d.]+× \|", proc.stdout,
                         re.M), key
    assert re.search(r"^round 2: cudnn-hidden-dropout [\d.]+ ms, explicit-dropout", proc.stdout,
                     re.M)
    assert re.search(r'^verdict: GPU_FLASH_FASTER = \{"dropout": (true|false), "shake": '
                     r'(true|false), "local": true\} \(now \{"dropout": true, "shake": true, '
                     r'"local": true\}; .*with dropout: '
                     r"fused [\d.]+ ms vs explicit [\d.]+ ms .*with pairs B \(and dropout\): "
                     r"fused", proc.stdout, re.M)
    # (t): the grid (cuDNN says it needs a GPU), the alternate tilings, Mosaic, per seq
    grid = proc.stdout.split("#### (t)")[1]
    assert "| cudnn | 0.0 | none | 64 | 2 | skipped: needs a GPU |" in grid
    for impl in ("flash", "xla"):
        for rate in ("0.0", "0.1"):
            for b in ("none", "pos", "random"):
                assert re.search(rf"^\| {impl} \| {rate} \| {b} \| 64 \| 2 \| [\d.]+ \|", grid,
                                 re.M), (impl, rate, b)
    for label in ("table", "c1", "c2", "c3"):
        assert re.search(rf"^\| flash {label} \| 0.1 \| none \| 64 \| 2 \| [\d.]+ \|.*\| "
                         r"[\d,/]+ \|$", grid, re.M), label
    assert "| mosaic | 0.0 | none | 128 | 1 | skipped: needs a GPU |" in grid
    assert re.search(r"^- seq 64: flash ÷ cuDNN –, flash ÷ xla, dropout [\d.]+×", grid, re.M)


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


@pytest.mark.slow
def test_dropout_paths_and_accumulation_parts_run_at_tiny_sizes(tmp_path):
    """(p): every attention-dropout path has its row (cuDNN's say they need a
    GPU; kjax's explicit and flash paths are timed, each in its own child);
    (k): k = 1 against k = 2 alternating, both sides' first losses equal."""
    out = tmp_path / "out"
    proc = bench("benchmarks/gpu/suite.py", "--tiny", "--parts", "pk", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    part_p = proc.stdout.split("#### (p)")[1].split("#### (k)")[0]
    for name in ("explicit path, kjax's hashed bits", "flash kernel, kjax's hashed bits"):
        assert re.search(rf"^\| {re.escape(name)} \| 64 \| 2 \| [\d.]+ \| – \| ok \|", part_p,
                         re.M), name
    assert part_p.count("skipped: needs a GPU") == 3   # the floor and cuDNN's own dropout ×2
    losses = re.findall(r"^\| k=\d[^|]* \| [\d.]+ \| [\d.]+ \| [\d.]+× \|.* \| ([\d.]+) \|$",
                        proc.stdout.split("#### (k)")[1], re.M)
    assert len(losses) == 2 and losses[0] == losses[1], proc.stdout[-2000:]
