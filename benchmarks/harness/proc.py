"""Child processes of the benchmarks: a command run under a time limit with
its stdout handed over line by line (a part cut off keeps what it printed),
one persistent compilation cache shared by the children of a run, and the
machine's load average (what makes a shared machine's figures readable)."""
from __future__ import annotations

import os
import sys

from harness.presets import ROOT

BENCHMARKS = os.path.join(ROOT, "benchmarks")


def load_average() -> list[float] | None:
    try:
        return [round(x, 1) for x in os.getloadavg()]
    except OSError:
        return None


def load_text(load) -> str:
    return "/".join(f"{x:.1f}" for x in load) if load else "n/a"


def child_env(env: dict | None = None) -> dict:
    """This environment with kjax and the benchmarks' harness importable."""
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, BENCHMARKS, env.get("PYTHONPATH", ""))
                                        if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def stream(cmd: list[str], limit: float, log: str, on_line, env: dict | None = None) -> str:
    """Run `cmd` (its own process group, stderr to `log`), hand each stdout
    line to `on_line` the moment it is written (so a part cut off by its
    limit keeps what it printed), kill the group after `limit` s; returns
    "ok", "failed (rc N; last stderr line)" or "cut off at its N s limit"."""
    import signal
    import subprocess
    import threading
    limit = max(1.0, limit)
    with open(log, "w", encoding="utf-8") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                env=child_env(env), cwd=ROOT, start_new_session=True)

        def read():
            for line in proc.stdout:
                try:
                    on_line(line.rstrip("\n"))
                except Exception as e:  # noqa: BLE001 — one bad line must not end the reading
                    print(f"  (line not understood: {e!r}: {line.strip()[:200]})",
                          file=sys.stderr, flush=True)
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=limit)
            status = "ok"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = f"cut off at its {limit:.0f} s limit"
        reader.join(timeout=5)
    if status == "ok" and proc.returncode:
        with open(log, encoding="utf-8", errors="replace") as f:
            tail = [x.strip() for x in f.read().splitlines() if x.strip()][-1:]
        status = f"failed (rc {proc.returncode}; {' '.join(tail)[:200]}; {log})"
    return status


def cache_env(folder: str) -> dict:
    """Environment for one persistent compilation cache shared by every child
    of a run: every program is written (no minimum compile time or size), so
    a program a later part compiles again is read back instead of compiled."""
    os.makedirs(folder, exist_ok=True)
    return {"JAX_COMPILATION_CACHE_DIR": folder, "JAX_ENABLE_COMPILATION_CACHE": "true",
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def cache_files(env: dict | None = None) -> int:
    """Files in this process's compilation cache folder (0 without one): a
    compile that adds none was read from the cache."""
    folder = (env or os.environ).get("JAX_COMPILATION_CACHE_DIR")
    if not folder or not os.path.isdir(folder):
        return 0
    return sum(len(files) for _, _, files in os.walk(folder))
