"""Every TPU preset compiled for a slice it is meant for, with libtpu and no
TPU (`make tpu-check`; CI runs it after the tests and the wheel check).

    python .ci/tpu_check.py                 # CI's cases (one process)
    python .ci/tpu_check.py --set all       # every preset (CASES)
    python .ci/tpu_check.py --set all --only v3_8,shake --fit-batch

One topology per preset family: the four slice presets on their own slice
(v3_32 also on a v3-128, 16 hosts), every model preset on a v3-8 (8 cores,
16 GiB each: the smallest slice the thesis used), and the features that
change the compiled program: SHAKE's B dense and as pairs, the flash
kernel, multi-hot input with the knowledge heads (mbert_*, uknowbert_*),
packing. A case that does not fit, or fails to compile, fails the check.
Prints the Markdown table docs/TPU.md and the presets' headers quote.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 1 << 30
SHAKE_DENSE = ["model.shake_factor=0.3", "shake.variant=random", "shake.layout=dense"]
FLASH_PAIRS = ["model.shake_factor=0.3", "shake.variant=random", "shake.layout=pairs",
               "model.attention_impl=flash", "model.attention_dropout_rate=0.0"]
PACKING = ["train.packing=true"]
MODELS = ["demo", "bert_s", "bert_b", "bert_base", "bert_large", "mbert_s", "mbert_b",
          "mbert_m", "uknow_small", "uknowbert_s", "uknowbert_b", "uknowbert_r", "uknowbert_w",
          "roberta_small_shake", "shake_baseline", "shake_pos_plus", "shake_pos_minus",
          "shake_random", "shake_shared_position", "shake_merged", "modern_small",
          "modern_base"]
# (preset, topology, overrides, what the case adds, fits): the last case must be
# refused by XLA (RESOURCE_EXHAUSTED), which keeps the out-of-memory path honest.
CASES = [("v3_8", "v3-8", [], "", True),
         ("v3_8", "v3-8", SHAKE_DENSE, "shaking, dense B", True),
         ("v3_8", "v3-8", FLASH_PAIRS, "flash kernel, pairs B", True),
         ("v2_8", "v2-8", [], "", True), ("v3_32", "v3-32", [], "4 hosts", True),
         ("v3_32", "v3-128", ["mesh.data=128"], "16 hosts", True), ("v4_8", "v4-8", [], "", True),
         ("bert_base", "v3-8", ["train.batch_size=256"], "batch 256, no remat", False),
         ("modern_base", "v3-8", PACKING, "packing", True)] + \
    [(m, "v3-8", [], "", True) for m in MODELS]
# What CI compiles (make tpu-check; budget ≤ 25 min on 2 cores): the four slice
# presets on their slices (4 hosts: v3_32), 16 hosts and XLA's refusal with the
# tiny demo model, and every feature that changes the program on a small model.
# `make tpu-check-all` runs CASES (every preset; ~5 CPU-minutes per BERT-base).
HUGE_BATCH = ["train.batch_size=1048576"]
CI_CASES = [("v3_8", "v3-8", [], "", True), ("v2_8", "v2-8", [], "", True),
            ("v3_32", "v3-32", [], "4 hosts", True), ("v4_8", "v4-8", [], "", True),
            ("demo", "v3-128", ["train.batch_size=256"], "16 hosts", True),
            ("demo", "v3-8", HUGE_BATCH, "batch 2^20: refused", False),
            ("bert_s", "v3-8", SHAKE_DENSE, "shaking, dense B", True),
            ("bert_s", "v3-8", FLASH_PAIRS, "flash kernel, pairs B", True),
            ("uknowbert_s", "v3-8", [], "multi-hot, knowledge heads", True),
            ("modern_small", "v3-8", PACKING, "packing", True)]


CACHE = {}   # StableHLO → result: presets whose programs are identical compile once


def run_case(preset, topology, overrides, fit: bool) -> dict:
    from kjax.config import load_config
    from kjax.objectives import check_config
    from kjax.pretrain.aot import check
    config = load_config(os.path.join(ROOT, "tpu_configs", f"{preset}.py"),
                         [f"--config.{o}" for o in overrides])
    check_config(config)
    start, cpu = time.perf_counter(), time.process_time()
    report = check(config, topology, steps=("train",), fit=fit, cost=False, cache=CACHE,
                   progress=lambda m: print("   ", m, file=sys.stderr, flush=True))
    report["wall_s"] = time.perf_counter() - start
    report["cpu_s"] = time.process_time() - cpu   # all threads: the load-free cost
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
    return (f"| {change} | {report['topology'].split(' ')[0]} | {report['hosts']} | "
            f"{report['batch_size']} | {s.seconds:.0f} | {report['cpu_s']:.0f} | "
            f"{s.arguments / GIB:.2f} | {s.temporaries / GIB:.2f} | {peak} | "
            f"{report['hbm_bytes'] / GIB:.0f} | {verdict} | {largest} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=("ci", "all"), default="ci",
                    help="ci: the cases CI compiles (default); all: every preset")
    ap.add_argument("--only", default="", help="comma-separated substrings of the cases to run")
    ap.add_argument("--fit-batch", action="store_true", help="also search the largest batch")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args()
    wanted = [w for w in args.only.split(",") if w]
    cases = [c for c in (CI_CASES if args.set == "ci" else CASES)
             if not wanted or any(w in f"{c[0]} {c[1]} {c[3]}" for w in wanted)]
    if args.list:
        print("\n".join(f"{c[0]} {c[1]} {' '.join(c[2])}" for c in cases))
        return 0
    from kjax.errors import KjaxError
    print("| preset / change | topology | hosts | batch | compile s | CPU s | arguments GiB | "
          "temporaries GiB | peak GiB | HBM GiB | fits | largest batch |", flush=True)
    print("|---|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    failed, start = [], time.perf_counter()
    for preset, topology, overrides, note, expected in cases:
        print(f"  {preset} {' '.join(overrides)} on {topology} ...", file=sys.stderr, flush=True)
        try:
            report = run_case(preset, topology, overrides, args.fit_batch)
        except KjaxError as e:
            failed.append(f"{preset} ({note or topology}): {e}")
            print(f"| {preset} {note} | {topology} | | | | | | | | | **error**: {e} | |", flush=True)
            continue
        print(row(preset, overrides, note, report), flush=True)
        fits = report["steps"]["train"].fits
        if fits != expected:
            failed.append(f"{preset} ({note or topology}) " + ("does not fit" if expected else
                          "fits, but XLA was expected to refuse it (RESOURCE_EXHAUSTED)"))
    print(f"\n{len(cases)} cases in {time.perf_counter() - start:.0f} s "
          f"({time.process_time():.0f} CPU s)", flush=True)
    for f in failed:
        print(f"tpu-check: FAILED {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
