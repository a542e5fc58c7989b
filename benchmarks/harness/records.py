"""Benchmark results as data: one JSON object per measured row, appended to
benchmarks/results/<benchmark>.jsonl. A record says what was measured (the
benchmark, the row, the preset and its overrides, the shape), where (the
machine, its devices, CPU cores and load average), with what (library
versions, the kjax commit and whether the tree had uncommitted changes),
when, and the figures. No benchmark writes a document: docs/PERFORMANCE.md's
tables are generated from these files (`make docs`, benchmarks/report.py).

Kinds: "measurement" (a figure a run produced), "prediction" (a figure
argued before a device measured it; `check` names the command that will),
"projection" (arithmetic for hardware nobody ran on).
"""
from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys

from harness.presets import ROOT

RESULTS = os.path.join(ROOT, "benchmarks", "results")
KINDS = ("measurement", "prediction", "projection")
REQUIRED = ("benchmark", "row", "kind", "date", "figures")
LIBRARIES = ("jax", "jaxlib", "flax", "optax")


def add_arguments(ap) -> None:
    """--no-record and --results, the same in every benchmark."""
    ap.add_argument("--no-record", action="store_true",
                    help="print only; write no record")
    ap.add_argument("--results", default=RESULTS,
                    help="folder of the records (default benchmarks/results)")


def git_state(root: str = ROOT) -> tuple[str | None, bool | None]:
    """(short commit, whether tracked files differ from it), None outside a
    checkout. The results folder itself is left out: a run that writes
    records must not call the next run's tree dirty."""
    def git(*args):
        return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True,
                              timeout=30)
    try:
        head = git("rev-parse", "--short=7", "HEAD")
        if head.returncode:
            return None, None
        status = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                     ":(exclude)benchmarks/results")
        return head.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


def versions(extra: dict | None = None) -> dict:
    """Python, kjax and the JAX stack as installed (no import needed)."""
    out = {"python": platform.python_version()}
    try:   # the checkout's own version (an editable install's metadata may lag it)
        import kjax
        out["kjax"] = kjax.__version__
    except ImportError:
        pass
    for name in LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return {**out, **(extra or {})}


def hardware(load_before=None) -> dict:
    """The machine: host name, CPU cores, the devices JAX uses (when the
    benchmark imported jax) and the load average before and after the run."""
    from harness.proc import load_average
    out = {"machine": platform.node() or "host", "cpu_cores": os.cpu_count()}
    if "jax" in sys.modules:
        import jax
        d = jax.devices()
        out.update(platform=d[0].platform, device=d[0].device_kind, devices=len(d))
    else:
        out.update(platform="cpu", device="cpu", devices=1)
    if load_before is not None:
        out["load_average"] = {"before": load_before, "after": load_average()}
    return out


def provenance(load_before=None, extra_versions: dict | None = None) -> dict:
    """What every row of one run shares; `run` (the UTC time it was written) ties
    a kjax row to its peer's."""
    commit, dirty = git_state()
    now = datetime.datetime.now(datetime.timezone.utc)
    return {"hardware": hardware(load_before), "versions": versions(extra_versions),
            "commit": commit, "dirty": dirty, "date": now.date().isoformat(),
            "run": now.strftime("%Y-%m-%dT%H:%M:%SZ")}


def check(record: dict) -> None:
    """Raise ValueError naming what a record lacks or has wrong."""
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        raise ValueError(f"record {record.get('benchmark')}/{record.get('row')}: "
                         f"missing {', '.join(missing)}")
    if record["kind"] not in KINDS:
        raise ValueError(f"record {record['benchmark']}/{record['row']}: kind "
                         f"{record['kind']!r}; choose one of {', '.join(KINDS)}")
    if not isinstance(record["figures"], dict) or not record["figures"]:
        raise ValueError(f"record {record['benchmark']}/{record['row']}: no figures")
    datetime.date.fromisoformat(record["date"])


def line(record: dict) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=False)


def write(benchmark: str, rows: list[dict], folder: str = RESULTS, **context) -> str:
    """Append `rows` (each: row, figures and what else it knows: preset,
    overrides, shape, peer, notes, kind) to folder/<benchmark>.jsonl with
    this run's provenance; `context`: load_before, extra_versions, and
    fields every row shares (notes, preset, shape, ...). Returns the path."""
    base = provenance(context.pop("load_before", None), context.pop("extra_versions", None))
    records = []
    for row in rows:
        record = {"benchmark": benchmark, "kind": "measurement", **base, **context, **row}
        check(record)
        records.append(record)
    return add(os.path.join(folder, f"{benchmark}.jsonl"), records)


def add(path: str, records: list[dict]) -> str:
    """Merge `records` into the file at `path`: kept sorted by date (stable:
    rows of one day stay in the order they were written), one line each, an
    identical line only once, so writing the same records twice changes
    nothing."""
    old = read_file(path) if os.path.exists(path) else []
    seen, merged = set(), []
    for record in old + records:
        text = line(record)
        if text not in seen:
            seen.add(text)
            merged.append(record)
    merged.sort(key=lambda r: r["date"])
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line(r) + "\n" for r in merged))
    return path


def read_file(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(x) for x in f if x.strip()]


def read(folder: str = RESULTS) -> list[dict]:
    """Every record under `folder`, file by file in name order."""
    out = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(".jsonl"):
            out += read_file(os.path.join(folder, name))
    return out


def save(args, benchmark: str, rows: list[dict], **context) -> None:
    """write() unless --no-record; says where the records went."""
    if args.no_record:
        return
    path = write(benchmark, rows, args.results, **context)
    print(f"records: {len(rows)} row(s) added to {os.path.relpath(path)}", flush=True)
