"""The flake hunt (`make test-flaky N=10`): the fault, multi-process, wheel
and outage tests, N times in a row, with busy loops beside them taking CPU
away as the rest of a CI run does. Each run is pytest on those files with
the suite's own workers and scheduling (as `make test`); the record,
printed at the end and kept in build/flaky/record.json, holds each run's
number, its time, and for every failure the test and the first line of
what it said. Exits 1 if any run failed.

    python tests/flaky.py --runs 3 [--burners 1] [--workers 2] [-- pytest args]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = ["tests/test_faults.py", "tests/test_faults_storage.py", "tests/test_faults_outage.py",
         "tests/test_multiprocess.py", "tests/test_wheel.py"]
OUT = os.path.join(ROOT, "build", "flaky")


def burn(stop) -> None:
    """A busy loop until `stop` is set: one core's worth of load."""
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def failures(junit: str) -> list[dict]:
    """Every failed or erroring test in a JUnit file, with its first line."""
    found = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        for kind in ("failure", "error"):
            for bad in case.findall(kind):
                text = (bad.get("message") or bad.text or "").strip()
                first = next((line for line in text.splitlines() if line.strip()), "")
                found.append({"test": f"{case.get('classname')}::{case.get('name')}",
                              "kind": kind, "first_line": first[:300]})
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--burners", type=int, default=1, help="busy loops beside the tests")
    parser.add_argument("--workers", default="2", help="pytest-xdist workers (-n)")
    parser.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments")
    args = parser.parse_args(argv)
    os.makedirs(OUT, exist_ok=True)
    record = {"runs": args.runs, "burners": args.burners, "workers": args.workers,
              "files": FILES, "results": []}
    stop = multiprocessing.Event()
    burners = [multiprocessing.Process(target=burn, args=(stop,), daemon=True)
               for _ in range(args.burners)]
    for b in burners:
        b.start()
    try:
        for run in range(1, args.runs + 1):
            junit, log = (os.path.join(OUT, f"run-{run}.{ext}") for ext in ("xml", "log"))
            began = time.monotonic()
            with open(log, "w") as out:
                code = subprocess.run(
                    [sys.executable, "-m", "pytest", *FILES, "-q", "-n", args.workers,
                     "--dist", "load", "--maxschedchunk", "1", "-p", "no:cacheprovider",
                     f"--junitxml={junit}", *args.pytest_args],
                    cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                    env={**os.environ, "JAX_NUM_CPU_DEVICES": "8"}).returncode
            bad = failures(junit) if os.path.exists(junit) else [
                {"test": "(pytest)", "kind": "error", "first_line": f"exit {code}, no report"}]
            result = {"run": run, "seconds": round(time.monotonic() - began), "exit": code,
                      "failures": bad}
            record["results"].append(result)
            print(f"run {run}/{args.runs}: {len(bad)} failure(s), {result['seconds']} s"
                  + "".join(f"\n    {f['test']}: {f['first_line']}" for f in bad), flush=True)
            with open(os.path.join(OUT, "record.json"), "w") as f:
                json.dump(record, f, indent=1, ensure_ascii=False)
    finally:
        stop.set()
        for b in burners:
            b.join()
    total = sum(len(r["failures"]) for r in record["results"])
    print(f"flake hunt: {args.runs} run(s) of {len(FILES)} files with {args.burners} busy "
          f"loop(s) beside them: {total} failure(s); record in {OUT}/record.json")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
