"""The train step compiled for an H100, with jax's CUDA plugin and no GPU
(`make gpu-check`; docs/GPU.md §6).

    python .ci/gpu_check.py                  # every case, as CI
    python .ci/gpu_check.py --record write   # compile what the record lacks, rewrite it

The target is XLA's description of an H100 SXM (.ci/h100_sxm.txtpb: SMs,
shared memory, HBM, cuDNN 9.28), given to jax as a deviceless topology. The
step is traced for the GPU (kjax.config.platform: attention takes the path a
GPU would, cuDNN where `auto` picks it), compiled, and its optimized HLO
checked: no scatter-add into a small embedding table, no 16-bit scatter
without unique indices (compile_checks/hlo.py); where the step holds
kjax's Pallas kernels, ptxas assembles their PTX for sm_90a and none may
spill registers or serialize its wgmma (compile_checks/ptx.py). Prints
compile time and memory per device. Verdicts come from .ci/compile_record.json
when the lowered program, plugin and target config are the ones recorded
(compile_checks/record.py); in the default mode any other case is
compiled and fails the check until the record is rewritten, which also
rewrites docs/GPU.md's table from it (compile_checks/figures.py).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")   # no GPU here: the plugin only compiles
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)   # kjax from this checkout, also when run as a script
from compile_checks import figures  # noqa: E402  (no jax)
from compile_checks.cases import GPU_CASES as CASES, gpu_case_id, gpus  # noqa: E402
from compile_checks.record import MODES, Record  # noqa: E402
from compile_checks.targets import (device_memory, h100_target,  # noqa: E402
                                    h100_topology)

GIB = 1 << 30
PALLAS_KERNELS = "shake_flash"   # kjax/model/flash/attention.py's kernels, as XLA names them
RECORD = os.path.join(ROOT, ".ci", "compile_record.json")


def compile_verdict(lowered, pallas: bool = False) -> dict:
    """XLA's verdict for the H100: memory per device and the HLO checks' lines;
    with `pallas`, ptxas' report on the Pallas kernels (sm_90a: registers, and a
    line for each that spills or serializes its wgmma; compile_checks/ptx.py)."""
    import tempfile

    from compile_checks import ptx as ptx_checks
    from compile_checks.hlo import scatter_findings
    from kjax.pretrain.aot import peak_bytes
    from kjax.pretrain.collectives import summary
    ptxas = ptx_checks.find_ptxas() if pallas else None
    if pallas and ptxas is None:
        return {"compiled": False, "seconds": 0.0,
                "error": "no ptxas to check the Pallas kernels (jax's CUDA wheels)"}
    start, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory() as dump:
        try:
            compiled = lowered.compile(compiler_options={"xla_dump_to": dump} if pallas else None)
        except Exception as e:  # noqa: BLE001 - XlaRuntimeError has no stable import path
            return {"compiled": False, "error": " ".join(str(e).split())[:240],
                    "seconds": round(time.perf_counter() - start, 1)}
        seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu
        kernels = ptx_checks.dumped_kernels(dump, ptxas, prefix=PALLAS_KERNELS) if pallas else {}
    m = compiled.memory_analysis()
    text = compiled.as_text()
    return {"compiled": True, "error": "", "seconds": round(seconds, 1), "cpu_s": round(cpu_s, 1),
            "arguments": m.argument_size_in_bytes, "outputs": m.output_size_in_bytes,
            "aliased": m.alias_size_in_bytes, "temporaries": m.temp_size_in_bytes,
            "peak": peak_bytes(m), "collectives": summary(text),
            "hlo_findings": scatter_findings(text),
            "cudnn_attention": "__cudnn$fmha" in text,
            "pallas_attention": PALLAS_KERNELS in text,
            "kernels": kernels, "ptx_findings": ptx_checks.findings(kernels)}


def run_case(preset, overrides, devices, target_text, record, mode) -> dict:
    """Lower, then the recorded verdict or a compile (compile_record.settle); a
    compiled step whose collectives move more bytes than its recorded entry's
    fails (kjax/pretrain/collectives.py grew: `grown`)."""
    from kjax.config import load_config
    from kjax.objectives import check_config
    from compile_checks import record as cr
    from kjax.pretrain import aot
    from kjax.pretrain.collectives import grew
    config = load_config(os.path.join(ROOT, "tpu_configs", f"{preset}.py"),
                         [f"--config.{o}" for o in overrides])
    check_config(config)
    start = time.perf_counter()
    lowered = aot.lower(config, devices)
    lower_s = time.perf_counter() - start
    topology = h100_topology(len(devices))
    case, program = cr.case_id("gpu", preset, topology, overrides), cr.program_hash(lowered)
    versions = cr.compiler_versions("gpu", target_text)
    # auto sends dropout, B and local windows to the kernel: check ptxas on it wherever it is
    pallas = PALLAS_KERNELS in lowered.as_text()
    verdict, status, failure = cr.settle(record, case, program, versions, mode,
                                         lambda: compile_verdict(lowered, pallas))
    before = record.entries.get(case, {}).get("verdict", {}).get("collectives")
    grown = grew(before, verdict.get("collectives", {})) if status == "compiled" and before \
        else []
    if grown:
        failure = "; ".join(filter(None, [failure, f"{case}: its collectives grew ("
                                          f"{', '.join(grown)} a step per device); rerun "
                                          f"with --accept-growth to record them"]))
    return {"verdict": verdict, "status": status, "failure": failure, "lower_s": lower_s,
            "grown": bool(grown), "entry": cr.make_entry(case, preset, topology, overrides, program, versions,
                                   verdict, time.strftime("%Y-%m-%d"))}


def row(preset, shape, report, memory: int) -> tuple[str, list[str]]:
    """The table row and the check's failures for one case."""
    v, failures = report["verdict"], [report["failure"]] if report["failure"] else []
    status = " (recorded)" if report["status"] == "recorded" else ""
    if not v["compiled"]:
        failures.append(f"{preset}: XLA did not compile it: {v['error']}")
        return (f"| {preset} | {shape} | {report['lower_s']:.1f} | {v['seconds']:.0f} | | | | | "
                f"| **not compiled**{status} | |", failures)
    if v["peak"] > memory:
        failures.append(f"{preset}: needs {v['peak'] / GIB:.2f} GiB of {memory / GIB:.0f}")
    failures += [f"{preset}: {line}" for line in v["hlo_findings"]]
    # ptxas' findings fail the cases that pin the kernel (the table's tiles must be clean);
    # under auto they are shown in the table: the card's timed tiles replace the table's there
    if "model.attention_impl=flash" in report["entry"]["overrides"]:
        failures += [f"{preset}: {line}" for line in v.get("ptx_findings", [])]
    checks = figures.checks_cell(v)
    return (f"| {preset} | {shape} | {report['lower_s']:.1f} | {v['seconds']:.0f} | "
            f"{v['arguments'] / GIB:.2f} | {v['temporaries'] / GIB:.2f} | {v['peak'] / GIB:.2f} | "
            f"{memory / GIB:.0f} | {figures.collectives_cell(v)} | {checks}{status} | "
            f"{figures.attention_cell(v)} |", failures)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated substrings of the presets to run")
    ap.add_argument("--record", default="check", choices=MODES,
                    help="check (CI): a case whose program, plugin and target are recorded "
                    "takes the recorded verdict, any other compiles and fails; write: compile "
                    "what is not recorded and rewrite the record; refresh: compile every case")
    ap.add_argument("--record-file", default=RECORD, help="the record (default: %(default)s)")
    ap.add_argument("--accept-growth", action="store_true",
                    help="record a compiled case whose collectives move more bytes a step than "
                    "its recorded entry's (by default that fails and is not written)")
    args = ap.parse_args()
    wanted = [w for w in args.only.split(",") if w]
    cases = [c for c in CASES if not wanted or any(w in c[0] for w in wanted)]
    try:
        record = Record(args.record_file)
        target_text = h100_target()
        memory = device_memory(target_text)
    except (OSError, ValueError) as e:
        print(f"gpu-check: {e}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    from compile_checks.record import without_locations
    from compile_checks.targets import h100_devices
    try:
        devices = {n: h100_devices(target_text, n) for n in sorted({gpus(c) for c in cases})}
    except Exception as e:  # noqa: BLE001 - no plugin: jax raises several kinds
        print(f"gpu-check: no CUDA compiler ({' '.join(str(e).split())[:160]}); run it in its "
              f"venv: `make gpu-check`", file=sys.stderr)
        return 2
    print("| preset | seq × batch | lower s | compile s | arguments GiB | temporaries GiB | "
          "peak GiB | HBM GiB | AR / AG / RS MiB | HLO checks | attention |")
    print("|---" * 11 + "|")
    failed, recorded = [], 0
    with without_locations():
        for case in cases:
            preset, overrides, shape = case[:3]
            print(f"  {preset} {' '.join(overrides)} for {gpus(case)} H100 ...",
                  file=sys.stderr, flush=True)
            report = run_case(preset, overrides, devices[gpus(case)], target_text, record,
                              args.record)
            text, failures = row(preset, shape, report, memory)
            print(text, flush=True)
            failed += failures
            recorded += report["status"] == "recorded"
            if args.record != "check" and report["status"] != "recorded" and (
                    args.accept_growth or not report["grown"]):
                record.put(report["entry"])   # a recorded entry keeps its date
    print(f"\n{len(cases)} cases in {time.perf_counter() - start:.0f} s: {recorded} recorded, "
          f"{len(cases) - recorded} compiled", flush=True)
    if args.record != "check":
        record.save("gpu", None if wanted else {gpu_case_id(c) for c in CASES})
        print(f"gpu-check: wrote {os.path.relpath(args.record_file)}", file=sys.stderr)
        try:   # the record's figures into the presets' headers and the docs' tables
            for path in figures.write(ROOT, args.record_file):
                print(f"gpu-check: wrote {os.path.relpath(path)}", file=sys.stderr)
        except figures.MissingFigures as e:
            failed.append(f"the record's figures: {e}")
    for f in failed:
        print(f"gpu-check: FAILED {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
