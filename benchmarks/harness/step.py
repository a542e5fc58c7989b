"""The one way the benchmarks build, compile and time a kjax train step
(`Step`), and the one way they take turns between sides (`alternate`):
kjax variants, or kjax against a peer in its own process, each round
timing every side once, so load drift on a shared machine hits all alike.

    step = Step(config)                 # state, batch, compiled ahead of time, run once
    times = alternate({"kjax": step, "peer": peer}, rounds=4, steps=3)
    compare(times, "kjax", "peer")      # tokens/s ratio, median and per-round range
"""
from __future__ import annotations

import os
import statistics
import time

from harness.presets import synthetic_batch
from harness.proc import cache_files

# the H100 described to this CPU host, as make gpu-check compiles for it, and
# the peak of a compiled step as `kjax compile` reports it
from compile_checks.targets import h100_devices  # noqa: E402,F401
from kjax.pretrain.aot import peak_bytes  # noqa: E402,F401


def lower_step(config, devices=None):
    """The train step for `config` traced and lowered against abstract state
    and batch (nothing allocated, nothing run): `.compile()` it for compile
    time or memory_analysis()."""
    import jax
    from kjax.pretrain.aot import lower
    return lower(config, devices or jax.devices(), "train")


class Step:
    """The kjax train step for `config`: state initialised, a synthetic batch
    on the devices, compiled ahead of time and run once outside any timing.
    Each phase's seconds are kept in `phases` (init, batch, lower, compile,
    first step) and handed to `on_phase(name, seconds, **extra)` as it ends,
    so a caller cut off mid-way still knows where the time went.
    `around_compile`: a context manager factory wrapped around the compile
    (a profiler trace). `batch`: a host batch to compile for and run first
    (a loader's; default synthetic). `run(n)`: seconds per step over n steps."""

    def __init__(self, config, on_phase=None, around_compile=None, batch=None):
        import contextlib

        import jax
        import numpy as np
        from kjax.config import platform_defaults
        from kjax.model.arch import architecture
        from kjax.parallel.mesh import make_mesh, on_mesh, put_batch
        from kjax.train.state import init_state, make_model, make_optimizer
        from kjax.train.step import make_train_step
        # auto keys: this platform's, as train's
        config = platform_defaults.resolved(config, keys=architecture(config).auto_keys)
        self.config, self.phases = config, {}
        report = on_phase or (lambda name, seconds, **extra: None)

        def phase(name, start, **extra):
            self.phases[name] = time.perf_counter() - start
            report(name, self.phases[name], **extra)
        t = time.perf_counter()
        mesh = make_mesh(config)
        model, tx = make_model(config, deterministic=False), make_optimizer(config.train)
        self.state, shardings = init_state(config, mesh, model, tx)
        jax.block_until_ready(self.state)
        fn = make_train_step(config, mesh, model, tx, shardings)
        phase("init", t)
        t = time.perf_counter()
        if batch is None:
            batch = synthetic_batch(config, np.random.default_rng(0))
        self.batch = put_batch(batch, mesh)
        jax.block_until_ready(self.batch)
        phase("batch", t)
        t = time.perf_counter()
        with on_mesh(mesh, config):
            lowered = fn.jitted.lower(self.state, self.batch)
        phase("lower", t)
        before = cache_files()
        t = time.perf_counter()
        with (around_compile or contextlib.nullcontext)(), on_mesh(mesh, config):
            self.compiled = lowered.compile()
        # with a persistent cache (benchmarks/gpu/suite.py), a program an
        # earlier process compiled is read back and adds no file
        self.cache = "" if not os.environ.get("JAX_COMPILATION_CACHE_DIR") else \
            ("miss" if cache_files() > before else "hit")
        self.peak_bytes = peak_bytes(self.compiled)
        phase("compile", t, cache=self.cache, peak_gib=self.peak_bytes / 2**30)
        self.compile_s = self.phases["compile"]
        t = time.perf_counter()
        self.state, metrics = self.compiled(self.state, self.batch)
        jax.block_until_ready((self.state, metrics))
        self.loss = float(metrics["loss"])
        phase("step 1", t, loss=self.loss)
        self.first_step_s = self.phases["step 1"]
        self.mesh = mesh

    def feed(self, host_batch):
        """One step on a host batch (a loader's: the synthetic batch's shapes),
        put on the devices first; returns its metrics, not waited for."""
        from kjax.parallel.mesh import put_batch
        self.state, metrics = self.compiled(self.state, put_batch(host_batch, self.mesh))
        return metrics

    def run(self, steps: int) -> float:
        import jax
        start = time.perf_counter()
        for _ in range(steps):
            self.state, metrics = self.compiled(self.state, self.batch)
        jax.block_until_ready((self.state, metrics))
        return (time.perf_counter() - start) / steps

    def flops(self) -> float:
        """Training FLOPs of one step (bidirectional attention counted, MLM
        logits at the masked positions only: kjax.train.step.flops_per_example)."""
        from kjax.train.step import flops_per_example
        d, b = self.config.data, self.config.train.batch_size
        return flops_per_example(self.config.model, d.max_seq_len,
                                 d.max_predictions_per_seq) * b

    def figures(self, step_s: float, peak: tuple[float, str] | None = None) -> dict:
        """The figures a record keeps for a median step time of `step_s`."""
        from kjax.train.peak_flops import peak_flops
        d = self.config.data
        flops, source = peak or peak_flops(self.config)
        out = {"ms": round(1000 * step_s, 2),
               "tokens_per_s": round(self.config.train.batch_size * d.max_seq_len / step_s),
               "mfu": round(self.flops() / step_s / flops, 4), "peak_flops": round(flops),
               "peak_flops_source": source, "compile_s": round(self.compile_s, 1),
               "first_step_s": round(self.first_step_s, 2),
               "peak_gib": round(self.peak_bytes / 2**30, 3), "first_loss": round(self.loss, 3)}
        if self.cache:
            out["cache"] = self.cache
        return out


def measure(config, rounds: int, steps: int, on_phase=None) -> tuple[Step, list[float]]:
    """A Step built and timed alone: `rounds` × `steps` steps."""
    step = Step(config, on_phase)
    return step, [step.run(steps) for _ in range(rounds)]


def alternate(sides: dict, rounds: int, steps: int, on_round=None,
              swap: bool = False) -> dict[str, list]:
    """`rounds` rounds; in each, every side (anything with `run(steps)`: a
    Step, a peer in its own process; or a function of `steps`) runs once,
    in order (`swap`: in reverse order every other round, so neither side
    always runs first). Returns each side's per-round results;
    `on_round(r, results)` after each round (default: print the round's ms
    per side)."""
    results = {label: [] for label in sides}
    for r in range(rounds):
        order = list(sides.items())
        for label, side in reversed(order) if swap and r % 2 else order:
            results[label].append(side.run(steps) if hasattr(side, "run") else side(steps))
        (on_round or _print_round)(r, results)
    return results


def _print_round(r: int, results: dict) -> None:
    print(f"round {r}: " + ", ".join(f"{k} {1000 * v[-1]:.1f} ms" for k, v in results.items()),
          flush=True)


def compare(times: dict, side: str, peer: str) -> dict:
    """`side`'s tokens/s over `peer`'s (same tokens per step): the ratio of
    median step times and the range of the per-round ratios."""
    rounds = [p / s for s, p in zip(times[side], times[peer])]
    return {"ratio_vs_peer": round(statistics.median(times[peer])
                                   / statistics.median(times[side]), 3),
            "ratio_low": round(min(rounds), 3), "ratio_high": round(max(rounds), 3)}
