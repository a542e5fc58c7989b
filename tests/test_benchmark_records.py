"""Benchmark results are data: the record writer (benchmarks/harness/records.py)
keeps each row's figures with its provenance, in a stable order, and no
benchmark writes a document; docs/PERFORMANCE.md's tables are what
benchmarks/report.py writes from the committed records (`make docs` on a
clean checkout changes nothing)."""
import ast
import datetime
import glob
import hashlib
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks")
sys.path.insert(0, os.path.join(BENCH, "gpu"))
sys.path.insert(0, BENCH)
import report  # noqa: E402
from harness import records  # noqa: E402
from harness.step import alternate, compare  # noqa: E402


def row(**over):
    return {"row": "kjax", "figures": {"ms": 10.0}, **over}


def test_a_record_carries_its_figures_and_provenance(tmp_path):
    import kjax
    path = records.write("demo_bench", [row(preset="demo", shape={"seq": 8})], str(tmp_path),
                         load_before=[0.5, 0.4, 0.3], notes="why")
    assert path == str(tmp_path / "demo_bench.jsonl")
    (rec,) = [json.loads(x) for x in open(path, encoding="utf-8")]
    assert rec["benchmark"] == "demo_bench" and rec["kind"] == "measurement"
    assert rec["row"] == "kjax" and rec["figures"] == {"ms": 10.0} and rec["notes"] == "why"
    assert rec["preset"] == "demo" and rec["shape"] == {"seq": 8}
    hw = rec["hardware"]
    assert hw["cpu_cores"] == os.cpu_count() and hw["machine"]
    assert hw["load_average"]["before"] == [0.5, 0.4, 0.3] and len(hw["load_average"]["after"]) == 3
    assert rec["versions"]["kjax"] == kjax.__version__ and "python" in rec["versions"]
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=7", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    assert rec["commit"] == head and isinstance(rec["dirty"], bool)
    assert rec["date"] == datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    assert rec["run"].startswith(rec["date"] + "T")


def test_records_stay_in_date_order_and_writing_twice_changes_nothing(tmp_path):
    path = str(tmp_path / "x.jsonl")
    new = {"benchmark": "x", "row": "b", "kind": "measurement", "date": "2026-11-27",
           "figures": {"ms": 2}}
    old = {**new, "row": "a", "date": "2026-11-21"}
    later = {**new, "row": "c"}
    records.add(path, [new, later])
    records.add(path, [old])
    assert [r["row"] for r in records.read_file(path)] == ["a", "b", "c"]   # same day: as written
    before = open(path, "rb").read()
    records.add(path, [new, old])
    assert open(path, "rb").read() == before


@pytest.mark.parametrize("bad, says", [
    ({"figures": {}}, "no figures"), ({"kind": "guess"}, "kind 'guess'"),
    ({"date": None}, "missing date")])
def test_an_incomplete_record_is_refused(bad, says):
    rec = {"benchmark": "x", "row": "r", "kind": "measurement", "date": "2026-11-27",
           "figures": {"ms": 1}, **bad}
    rec = {k: v for k, v in rec.items() if v is not None}
    with pytest.raises(ValueError, match=says):
        records.check(rec)


def test_the_results_folder_does_not_make_a_tree_dirty(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)
    os.makedirs(tmp_path / "benchmarks" / "results")
    (tmp_path / "benchmarks" / "results" / "x.jsonl").write_text("{}\n")
    (tmp_path / "code.py").write_text("a = 1\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    (tmp_path / "benchmarks" / "results" / "x.jsonl").write_text("{}\n{}\n")
    commit, dirty = records.git_state(str(tmp_path))
    assert len(commit) == 7 and dirty is False
    (tmp_path / "code.py").write_text("a = 2\n")
    assert records.git_state(str(tmp_path)) == (commit, True)


DOCUMENTS = {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))} | {
    "README.md", "CHANGELOG.md"}


def _writes_a_document(source: str) -> list[int]:
    """Lines of open(..., "w"/"a") calls whose path names docs/ or one of the
    repository's documents, directly or through a name assigned in the module
    (a run's own tables under its --out folder are outputs, not docs)."""
    tree = ast.parse(source)

    def strings(node):
        return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
                and isinstance(n.value, str)]
    assigned = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).extend(strings(node.value))
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "open"
                and node.args):
            continue
        mode = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
        mode += [k.value.value for k in node.keywords if k.arg == "mode"
                 and isinstance(k.value, ast.Constant)]
        names = strings(node.args[0]) + [s for n in ast.walk(node.args[0])
                                         if isinstance(n, ast.Name)
                                         for s in assigned.get(n.id, [])]
        if any(m and m[0] in "wa" for m in mode) and any(
                s == "docs" or s.startswith("docs/") or s in DOCUMENTS for s in names):
            found.append(node.lineno)
    return found


def test_no_benchmark_opens_a_document_for_writing():
    scripts = [p for p in glob.glob(os.path.join(BENCH, "**", "*.py"), recursive=True)
               if os.path.basename(p) != "report.py"]
    assert len(scripts) > 20
    assert {os.path.relpath(p, ROOT): _writes_a_document(open(p, encoding="utf-8").read())
            for p in scripts} == {os.path.relpath(p, ROOT): [] for p in scripts}
    # the forms the benchmarks used to append with are seen, and so is the report's write
    perf = 'open(os.path.join(ROOT, "docs", "PERFORMANCE.md"), "a", encoding="utf-8")\n'
    experiments = ('path = os.path.join(ROOT, "docs", "EXPERIMENTS.md")\n'
                   'with open(path, "a", encoding="utf-8") as f:\n    pass\n')
    assert _writes_a_document(perf) == [1] and _writes_a_document(experiments) == [2]
    assert _writes_a_document(perf.replace('"a"', '"r"')) == []
    assert _writes_a_document(open(os.path.join(BENCH, "report.py"), encoding="utf-8").read())


def test_a_benchmark_run_writes_records_and_leaves_the_docs_alone(tmp_path):
    docs = {p: hashlib.sha256(open(p, "rb").read()).hexdigest()
            for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))}
    proc = subprocess.run(
        [sys.executable, os.path.join(BENCH, "kernels", "attention.py"), "--tables", "b",
         "--b-seqs", "64,128", "--results", str(tmp_path)], capture_output=True, text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"}, cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = records.read(str(tmp_path))
    assert [r["row"] for r in got] == ["B per example, seq 64", "B per example, seq 128"]
    assert all(r["figures"]["dense_bytes"] > r["figures"]["pairs_bytes"] for r in got)
    assert {p: hashlib.sha256(open(p, "rb").read()).hexdigest() for p in docs} == docs


def test_every_committed_record_is_complete():
    recs = records.read()
    assert len(recs) > 300
    for r in recs:
        records.check(r)
        assert "commit" in r and "hardware" in r and "versions" in r, r["row"]
        if r["kind"] != "measurement":
            assert r.get("check") and r.get("status"), r["row"]


def test_performance_md_is_what_the_records_write():
    """`make docs` on a clean checkout changes nothing in docs/PERFORMANCE.md."""
    with open(report.DOC, encoding="utf-8") as f:
        text = f.read()
    assert report.render(text, records.read()) == text, \
        "docs/PERFORMANCE.md differs from the records: run `make docs` and commit it"


def rec(row_name, run, load=None, ms=10.0, **over):
    hw = {"platform": "cpu", "cpu_cores": 2, "machine": "m", "device": "cpu", "devices": 1}
    if load is not None:
        hw["load_average"] = {"before": [load, 0, 0]}
    return {"benchmark": "peer", "row": row_name, "kind": "measurement", "date": run[:10],
            "run": run, "preset": "bert_base", "shape": {"seq": 128, "batch": 8,
                                                          "dtype": "float32"},
            "hardware": hw, "versions": {"jax": "0.10.2"}, "commit": "abc1234", "dirty": False,
            "figures": {"ms": ms}, **over}


def test_the_current_row_is_the_newest_quiet_run_with_its_own_peer():
    spec = report.CPU_ROWS[0]
    quiet = [rec("kjax", "2026-01-01#1", load=1.5, ms=5), rec(spec.peer, "2026-01-01#1", ms=6)]
    busy = [rec("kjax", "2026-02-01#1", load=9.0, ms=50), rec(spec.peer, "2026-02-01#1", ms=40)]
    mine, peer = report.pick(quiet + busy, spec)
    assert (mine["figures"]["ms"], peer["figures"]["ms"]) == (5, 6)   # its own run's peer
    mine, peer = report.pick(busy, spec)
    assert mine["figures"]["ms"] == 50 and "busy" in report.machine(mine)
    (line,) = report.table(busy, [spec])[2:]
    assert "**0.80×**" in line and "abc1234" in line and "2026-02-01" in line
    assert "not measured yet" in report.table([], [spec])[2]


def test_merge_adds_another_machines_records(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "peer.jsonl").write_text(json.dumps(rec("kjax", "2026-03-01#1")) + "\n")
    assert report.main(["--merge", str(tmp_path / "in"), "--results", str(tmp_path / "out")]) == 0
    assert [r["run"] for r in records.read(str(tmp_path / "out"))] == ["2026-03-01#1"]


def test_alternate_takes_turns_and_compare_reads_the_rounds():
    calls = []

    def side(name, seconds):
        return lambda steps: calls.append((name, steps)) or seconds
    got = alternate({"a": side("a", 1.0), "b": side("b", 2.0)}, 2, 3, lambda r, t: None,
                    swap=True)
    assert calls == [("a", 3), ("b", 3), ("b", 3), ("a", 3)]
    assert got == {"a": [1.0, 1.0], "b": [2.0, 2.0]}
    assert compare(got, "a", "b") == {"ratio_vs_peer": 2.0, "ratio_low": 2.0, "ratio_high": 2.0}


def test_gpu_suite_variants_are_named_by_what_they_are():
    import parts
    keys = [k for k, _, _ in parts.BERT_VARIANTS]
    assert len(set(keys)) == len(keys)
    assert [n for n, _ in parts.pick("no-dropout,3", False)] == [
        parts.BERT_VARIANTS[keys.index("no-dropout")][1], parts.BERT_VARIANTS[3][1]]
    assert len(parts.pick("", False)) == len(keys) - len(parts.IN_PEER_PART)
    with pytest.raises(SystemExit, match="'old' is not a variant"):
        parts.pick("old", False)
    assert not any("attention_logits" in o for _, _, over in parts.BERT_VARIANTS for o in over)
