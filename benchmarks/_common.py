"""Shared pieces of the benchmark scripts: preset loading with size overrides,
synthetic batches (one-hot, multi-hot, SHAKE's B, knowledge targets), the
machine line and the record appended to docs/PERFORMANCE.md.

Not a benchmark itself; the scripts in this folder import it (they run as
`python benchmarks/<name>.py`, so this folder is on sys.path).
"""
from __future__ import annotations

import datetime
import os
import platform
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# Shapes of the two model families the issue names (tpu_configs presets).
SHAPES = {
    "uknow_small": dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024),
    "bert_base": dict(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072),
}


def preset_config(preset: str, seq: int, batch: int, dtype: str | None = None,
                  extra: list[str] | None = None):
    """tpu_configs/<preset>.py at `seq` × `batch`, 15% predictions, a 1000-step
    schedule (the LR value does not change the cost of a step)."""
    from kjax.config import load_config
    overrides = [f"--config.data.max_seq_len={seq}", f"--config.train.batch_size={batch}",
                 "--config.train.num_steps=1000", "--config.train.warmup_steps=10",
                 f"--config.data.max_predictions_per_seq={max(1, round(seq * 0.15))}"]
    if dtype:
        overrides.append(f"--config.model.dtype={dtype}")
    path = os.path.join(ROOT, "tpu_configs", f"{preset}.py")
    base = load_config(path)
    if seq > base.model.max_position_embeddings:  # longer than the preset's table
        overrides.append(f"--config.model.max_position_embeddings={seq}")
    return load_config(path, overrides + list(extra or []))


from kjax.batches.synthetic import synthetic_batch  # noqa: E402,F401 (the benchmarks' API)


def load_average() -> str:
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def machine() -> str:
    import jax
    d = jax.devices()
    return (f"{platform.node() or 'host'}: {os.cpu_count()} CPU cores, {len(d)}× "
            f"{d[0].device_kind} ({d[0].platform}), jax {jax.__version__}")


def record(name: str, table: str, notes: str = "", no_record: bool = False) -> None:
    """Print the table and append it, dated and machine-described, to docs/PERFORMANCE.md."""
    print(table)
    if notes:
        print(notes)
    if no_record:
        return
    stamp = datetime.date.today().isoformat()
    with open(os.path.join(ROOT, "docs", "PERFORMANCE.md"), "a", encoding="utf-8") as f:
        f.write(f"\n### {name} — {stamp} — {machine()}; load average {load_average()}\n\n"
                f"{table}\n" + (f"\n{notes}\n" if notes else ""))


# the H100 described to this CPU host, as make gpu-check compiles for it
from kjax.compile_checks.targets import h100_devices  # noqa: E402,F401


def lower_train_step(config):
    """The kjax train step for `config` on this host's devices, traced and
    lowered against abstract state and batch (nothing allocated, nothing
    run): `.compile()` it for compile time or `memory_analysis()`."""
    import jax
    from kjax.pretrain.aot import lower
    return lower(config, jax.devices(), "train")


def train_step(config):
    """(step function, state, mesh): the kjax train step for `config`, with
    freshly initialised state (what the timed benchmarks run)."""
    from kjax.parallel.mesh import make_mesh
    from kjax.train.state import init_state, make_model, make_optimizer
    from kjax.train.step import make_train_step
    mesh = make_mesh(config)
    model, tx = make_model(config, deterministic=False), make_optimizer(config.train)
    state, shardings = init_state(config, mesh, model, tx)
    return make_train_step(config, mesh, model, tx, shardings), state, mesh


from kjax.pretrain.aot import peak_bytes  # noqa: E402,F401 (as `kjax compile` reports it)


def timed_steps(step, state, batch, steps: int):
    """(state after `steps` calls, seconds per step), waiting for the device."""
    import time
    import jax
    start = time.perf_counter()
    for _ in range(steps):
        state, metrics = step(state, batch)
    jax.block_until_ready((state, metrics))
    return state, (time.perf_counter() - start) / steps


def stream(cmd: list[str], limit: float, log: str, on_line, env: dict | None = None) -> str:
    """Run `cmd` (its own process group, stderr to `log`), hand each stdout
    line to `on_line` the moment it is written (so a part cut off by its
    limit keeps what it printed), kill the group after `limit` s; returns
    "ok", "failed (rc N; last stderr line)" or "cut off at its N s limit"."""
    import signal
    import subprocess
    import threading
    import time
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.path.join(ROOT, "benchmarks"),
                                                    env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    limit = max(1.0, limit)
    with open(log, "w", encoding="utf-8") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                cwd=ROOT, start_new_session=True)

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
    a program a later part compiles again (the preset in (a), (b) and (g)) is
    read back instead of compiled."""
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
