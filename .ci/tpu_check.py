"""Every TPU preset compiled for a slice it is meant for, with libtpu and no
TPU (`make tpu-check`; CI runs it after the tests and the wheel check).

    python .ci/tpu_check.py                          # every case, as CI
    python .ci/tpu_check.py --record write           # compile what the record lacks
    python .ci/tpu_check.py --only v3_8,shake --fit-batch --jobs 1

The cases (compile_checks/cases.py), one topology per preset family:
the four slice presets on their own slice (demo also on a v3-128, 16 hosts),
every model preset on a v3-8 (8 cores, 16 GiB each: the smallest slice the
thesis used), and the features that change the compiled program on a small
model: SHAKE's B dense and as pairs, the flash kernel (on a v4-8), packing.
Two refusals keep the out-of-memory path honest. A case that does not fit,
fails to compile, or fits where XLA should refuse fails the check. Programs
that are the same up to constants (the SHAKE variants' bf) compile once
(kjax.pretrain.aot.compile_step). Prints a Markdown table of the cases.

Verdicts are keyed by the program (compile_checks/record.py): every
case is lowered and its hash looked up in .ci/compile_record.json; a case
recorded with the same program and libtpu takes the recorded verdict, any
other compiles, and in the default mode (CI) fails until the record is
rewritten (`--record write`, `make tpu-check RECORD=write`) and committed.
Writing the record also writes the figures quoted from it: the presets'
memory paragraphs and docs/TPU.md's and docs/GPU.md's tables
(compile_checks/figures.py).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)   # kjax from this checkout, also when run as a script
from compile_checks import figures  # noqa: E402  (no jax)
from compile_checks.cases import TPU_CASES as CASES, case_config, tpu_case_id  # noqa: E402
from compile_checks.record import MODES, Record  # noqa: E402

GIB = 1 << 30

CACHE = {}   # StableHLO → result: presets whose programs are identical compile once
PRESETS = {}   # config name → preset file: the record names a shared program by its preset
CONFIGS = os.path.join(ROOT, "tpu_configs")
RECORD = os.path.join(ROOT, ".ci", "compile_record.json")
VERDICT_FIELDS = ("batch_size", "seconds", "fits", "arguments", "outputs", "aliased",
                  "temporaries", "peak", "flops", "bytes_accessed", "error", "same_as",
                  "collectives")


def run_case(preset, topology, overrides, fit: bool, record=None, mode: str = "check",
             accept_growth: bool = False) -> dict:
    """Lower the case's train step; take XLA's verdict from the record when it
    holds for this program and libtpu, else compile (compile_record.settle).
    A compiled step whose collectives move more bytes than the record's entry
    for the case says is a failure, and its entry is not written unless
    `accept_growth` (kjax/pretrain/collectives.py grew)."""
    from kjax.objectives import check_config
    from compile_checks import record as cr
    from kjax.pretrain import aot
    from kjax.pretrain import memory_fit
    from kjax.pretrain.collectives import grew
    config = case_config(os.path.join(CONFIGS, f"{preset}.py"), overrides)
    check_config(config)
    devices, where, hbm, _, _ = aot.target_devices(topology)
    start = time.perf_counter()
    lowered = aot.lower(config, devices)
    lower_s = time.perf_counter() - start
    case, program = cr.case_id("tpu", preset, topology, overrides), cr.program_hash(lowered)
    versions = cr.compiler_versions("tpu")

    def compile_now() -> dict:
        cpu = time.process_time()   # all threads: the load-free cost
        PRESETS.setdefault(config.get("name", "") or "?", preset)
        s = aot.compile_step(config, devices, "train", cache=CACHE, lowered=lowered)
        verdict = {k: getattr(s, k) for k in VERDICT_FIELDS}
        verdict["same_as"] = PRESETS.get(s.same_as, s.same_as)
        return {**verdict, "seconds": round(s.seconds, 1),   # times: tenths (diffs read)
                "cpu_s": round(time.process_time() - cpu, 1)}

    record = record or cr.Record(RECORD)
    verdict, status, failure = cr.settle(record, case, program, versions, mode, compile_now)
    step = aot.StepCompile("train", **{k: verdict.get(k, {}) if k == "collectives" else verdict[k]
                                       for k in VERDICT_FIELDS})
    before = record.entries.get(case, {}).get("verdict", {}).get("collectives")
    grown = grew(before, step.collectives) if status == "compiled" and before else []
    if grown:
        failure = "; ".join(filter(None, [failure, f"{case}: its collectives grew ("
                                          f"{', '.join(grown)} a step per device); rerun with "
                                          f"--accept-growth to record them"]))
    report = {"topology": where, "devices": len(devices), "batch_size": config.train.batch_size,
              "hosts": len({d.process_index for d in devices}), "hbm_bytes": hbm,
              "steps": {"train": step}, "cpu_s": verdict["cpu_s"], "lower_s": lower_s,
              "status": status, "failure": failure,
              # a recorded entry stays as it is (its date: when XLA said it)
              "entry": None if status == "recorded" or (grown and not accept_growth)
              else cr.make_entry(
                  case, preset, topology, overrides, program, versions, verdict,
                  time.strftime("%Y-%m-%d"))}
    if fit and hbm:   # the search compiles: the record holds the preset's batch only
        largest, failing, _ = memory_fit.fit_batch(config, devices, step, progress=lambda m: print(
            "   ", m, file=sys.stderr, flush=True))
        report["fit"] = {"largest": largest, "smallest_failing": failing}
    return report


def row(preset, overrides, note, report) -> str:
    s = report["steps"]["train"]
    change = f"{preset}" + (f" + {note}" if note else "")
    fit = report.get("fit", {})
    largest = str(fit["largest"]) if fit else "—"
    peak = f"{s.peak / GIB:.2f}" if s.fits else "—"
    verdict = "yes" if s.fits else f"**no**: {s.error}"
    if s.same_as:
        verdict += f" (the program of {s.same_as}: not compiled again)"
    if report.get("status") == "recorded":
        verdict += " (recorded)"
    return (f"| {change} | {report['topology'].split(' ')[0]} | {report['hosts']} | "
            f"{report['batch_size']} | {s.seconds:.0f} | {report['cpu_s']:.0f} | "
            f"{s.arguments / GIB:.2f} | {s.temporaries / GIB:.2f} | {peak} | "
            f"{report['hbm_bytes'] / GIB:.0f} | {figures.collectives_cell(vars(s))} | "
            f"{verdict} | {largest} |")


def run_group(cases, fit: bool, record=None, mode: str = "check",
              accept_growth: bool = False) -> list[tuple]:
    """(table row, failure or None, record entry or None) for each case, in
    one process: cases that may share a program (compile_step's cache) run
    in the same one."""
    from compile_checks.record import without_locations
    with without_locations():
        return [one_case(case, fit, record, mode, accept_growth) for case in cases]


def one_case(case, fit: bool, record, mode: str, accept_growth: bool = False) -> tuple:
    from kjax.errors import KjaxError
    preset, topology, overrides, note, expected = case
    print(f"  {preset} {' '.join(overrides)} on {topology} ...", file=sys.stderr, flush=True)
    try:
        report = run_case(preset, topology, overrides, fit, record, mode, accept_growth)
    except Exception as e:  # noqa: BLE001 - one case's error is its row; the others go on
        error = str(e) if isinstance(e, KjaxError) else \
            f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
        return (f"| {preset} {note} | {topology} | | | | | | | | | | **error**: {error} | |",
                f"{preset} ({note or topology}): {error}", None)
    print(f"    {preset} on {topology}: lowered in {report['lower_s']:.1f} s, "
          f"{report['status']}", file=sys.stderr, flush=True)
    fits = report["steps"]["train"].fits
    failure = report["failure"] or (None if fits == expected else (
        f"{preset} ({note or topology}) " + ("does not fit" if expected else
                                             "fits, but XLA was expected to refuse it "
                                             "(RESOURCE_EXHAUSTED)")))
    return row(preset, overrides, note, report), failure, report["entry"]


def share(case) -> str:
    """Cases whose programs may be the same (up to constants) share a process."""
    preset, topology, overrides = case[:3]
    if "shake" in preset and not overrides:
        return "shake"
    return "bert_base" if preset in ("v3_8", "bert_base") and not overrides else repr(case)


def weight(case) -> float:
    """A compile's rough cost: it grows with the layers' matrices and the rows per device."""
    preset, topology, overrides = case[:3]
    c = case_config(os.path.join(ROOT, "tpu_configs", f"{preset}.py"), overrides)
    generation, cores = topology[1:].split("-")
    devices = int(cores) // (1 if generation in "23" else 2)   # v4 on: a device per chip
    rows = min(c.train.batch_size // devices, 1 << 12)
    return c.model.num_layers * c.model.hidden_size ** 2 * rows * c.data.max_seq_len


# What one compile of the largest preset takes on the host (modern_2026 at
# 1,024 × 256 for a v3-8: 13 GiB resident), with a margin.
COMPILE_GIB = 14


def default_jobs(mode: str, cores: int | None = None, available_kib: int | None = None) -> int:
    """The cores this process may use; when compiling (write, refresh), no more
    at once than the available memory (/proc/meminfo's MemAvailable) holds, as
    two of the largest compiles exceed a 24 GiB machine and the kernel kills one."""
    cores = cores or len(os.sched_getaffinity(0))
    if mode == "check":   # lowering only: a few hundred MiB a process
        return cores
    if available_kib is None:
        try:
            with open("/proc/meminfo", encoding="ascii") as f:
                available_kib = next(int(line.split()[1]) for line in f
                                     if line.startswith("MemAvailable:"))
        except (OSError, StopIteration):
            return cores
    return max(1, min(cores, available_kib // (COMPILE_GIB << 20)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated substrings of the cases to run")
    ap.add_argument("--fit-batch", action="store_true", help="also search the largest batch")
    ap.add_argument("--jobs", type=int, default=0,
                    help="compiles at once (XLA compiles a program on one core; default: "
                    "the cores this process may use; with --record write or refresh, no "
                    f"more than the free memory holds at {COMPILE_GIB} GiB each)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--record", default="check", choices=MODES,
                    help="check (CI): a case whose program and libtpu are recorded takes the "
                    "recorded verdict, any other compiles and fails; write: compile what is "
                    "not recorded and rewrite the record; refresh: compile every case")
    ap.add_argument("--record-file", default=RECORD, help="the record (default: %(default)s)")
    ap.add_argument("--accept-growth", action="store_true",
                    help="record a compiled case whose collectives move more bytes a step than "
                    "its recorded entry's (by default that fails and is not written)")
    args = ap.parse_args()
    wanted = [w for w in args.only.split(",") if w]
    cases = [c for c in CASES if not wanted or any(w in f"{c[0]} {c[1]} {c[3]}" for w in wanted)]
    if args.list:
        print("\n".join(f"{c[0]} {c[1]} {' '.join(c[2])}" for c in cases))
        return 0
    groups: dict[str, list] = {}
    for case in cases:
        groups.setdefault(share(case), []).append(case)
    groups = dict(sorted(groups.items(), key=lambda kv: -sum(map(weight, kv[1]))))  # big first
    start = time.perf_counter()
    try:
        record = Record(args.record_file)
    except ValueError as e:
        print(f"tpu-check: {e}", file=sys.stderr)
        return 2
    import concurrent.futures
    import multiprocessing
    n = len(groups)
    args.jobs = args.jobs or default_jobs(args.record)
    try:
        with concurrent.futures.ProcessPoolExecutor(
                max(1, args.jobs), mp_context=multiprocessing.get_context("spawn")) as pool:
            done = {id(c): r for g, rs in zip(groups.values(), pool.map(
                run_group, groups.values(), [args.fit_batch] * n, [record] * n,
                [args.record] * n, [args.accept_growth] * n)) for c, r in zip(g, rs)}
    except concurrent.futures.process.BrokenProcessPool:
        print(f"tpu-check: a compile process was killed (out of memory, most likely, with "
              f"{args.jobs} at once); nothing was written: run again with "
              f"TPU_CHECK_ARGS='--jobs 1'", file=sys.stderr)
        return 1
    print("| preset / change | topology | hosts | batch | compile s | CPU s | arguments GiB | "
          "temporaries GiB | peak GiB | HBM GiB | AR / AG / RS MiB | fits | largest batch |")
    print("|---" * 13 + "|")
    failed, recorded = [], 0
    for case in cases:
        text, failure, entry = done[id(case)]
        print(text)
        failed += [failure] if failure else []
        recorded += "(recorded)" in text
        if entry is not None and args.record != "check":
            record.put(entry)
    print(f"\n{len(cases)} cases in {time.perf_counter() - start:.0f} s on {args.jobs} "
          f"process(es): {recorded} recorded, {len(cases) - recorded} compiled", flush=True)
    if args.record != "check":   # a full run drops the cases no longer checked
        record.save("tpu", None if wanted else {tpu_case_id(c) for c in CASES})
        print(f"tpu-check: wrote {os.path.relpath(args.record_file)}", file=sys.stderr)
        try:   # the record's figures into the presets' headers and the docs' tables
            for path in figures.write(ROOT, args.record_file):
                print(f"tpu-check: wrote {os.path.relpath(path)}", file=sys.stderr)
        except figures.MissingFigures as e:
            failed.append(f"the record's figures: {e}")
    for f in failed:
        print(f"tpu-check: FAILED {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
