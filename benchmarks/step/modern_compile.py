"""Where does the time from process start to the first step go? modern_base
(seq 1024 batch 16, no remat) on this machine's accelerator, phase by phase,
per compile variant (on an H200 the start took 82 s, 60 of them the jitted
parameter init; docs/PERFORMANCE.md). Each variant runs in its own
process with its own time limit and prints every phase the moment it ends,
so a variant cut off still says where its time went:

    start    process start → kjax and jax imported, devices up
    init     model + optimizer state initialised (a jitted init: its own compile)
    batch    the synthetic batch built and put on the device
    lower    the train step traced and lowered to StableHLO
    compile  XLA's compile (cache: whether it came from the persistent cache)
    step 1   the first call, waited for (cuDNN plans, CUDA-graph capture,
             lazy loading of kernels happen here, not in compile)
    step 2   the second call, waited for (a plain step)

Variants: the default, the same program again from the persistent cache
the default just wrote, the default with its compile traced by
jax.profiler (the XLA passes, autotuners and kernel builds that take the
longest, from the trace's host events), attention_impl=xla (no cuDNN
attention), and XLA flags: --xla_gpu_autotune_level=0,
--xla_gpu_enable_triton_gemm=false, --xla_gpu_enable_command_buffer= (no
CUDA graphs), --xla_gpu_enable_cublaslt=true. An XLA flag this jaxlib does
not know ends its variant at start ("failed: Unknown flags"), not the run.

    python benchmarks/step/modern_compile.py --out runs/modern_compile   # GPU sizes
    JAX_PLATFORMS=cpu python benchmarks/step/modern_compile.py --tiny     # CPU check
    python benchmarks/gpu/suite.py --parts m                             # in the GPU suite
    python benchmarks/step/modern_compile.py --variants 1                 # the default only

The table goes to OUT/modern_compile.md and one record per variant to
benchmarks/results/modern_compile.jsonl (--no-record: none).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

START = time.perf_counter()

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import records  # noqa: E402
from harness.proc import cache_env, stream  # noqa: E402

# (name, config overrides, XLA flags, cache): "cold" = no persistent cache,
# "write"/"read" = the run's modern cache folder, first filled, then read.
VARIANTS = [
    ("default (auto → cuDNN on GPU)", [], "", "write"),
    ("default again, from the persistent cache", [], "", "read"),
    ("default, compile traced (jax.profiler)", [], "", "trace"),
    ("attention_impl=xla (no cuDNN attention)", ["model.attention_impl=xla"], "", "cold"),
    ("--xla_gpu_autotune_level=0", [], "--xla_gpu_autotune_level=0", "cold"),
    ("--xla_gpu_enable_triton_gemm=false", [], "--xla_gpu_enable_triton_gemm=false", "cold"),
    ("--xla_gpu_enable_command_buffer= (no CUDA graphs)", [],
     "--xla_gpu_enable_command_buffer=", "cold"),
    ("xla attention + autotune 0 + no triton gemm", ["model.attention_impl=xla"],
     "--xla_gpu_autotune_level=0 --xla_gpu_enable_triton_gemm=false", "cold"),
    ("--xla_gpu_enable_cublaslt=true", [], "--xla_gpu_enable_cublaslt=true", "cold"),
]


def emit(**row) -> None:
    print(json.dumps(row), flush=True)


def top_host_events(trace_dir: str, n: int = 15) -> list[tuple[str, float]]:
    """The host events of a trace with the largest summed seconds (XLA's
    passes, autotuners and PTX/cubin compiles are TraceMe events), skipping
    Python frames and the profiler's own."""
    import gzip
    from profile_step import find_trace
    with gzip.open(find_trace(trace_dir), "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    total = collections.Counter()
    for e in events:
        name = e.get("name", "")
        if e.get("ph") == "X" and not name.startswith(("$", "end: ")) and "dur" in e:
            total[name[:90]] += e["dur"] / 1e6
    return [(k, round(v, 2)) for k, v in total.most_common(n)]


def child(spec: dict) -> None:
    import contextlib

    import jax
    emit(phase="start", s=time.perf_counter() - START, device=jax.devices()[0].device_kind)
    config = harness.preset_config(spec["preset"], spec["seq"], spec["batch"], spec["dtype"],
                                   [f"--config.{o}" for o in spec["extra"]])
    trace = spec.get("trace_dir")

    @contextlib.contextmanager
    def traced():
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0    # Python frames would slow the compile down
        jax.profiler.start_trace(trace, profiler_options=options)
        try:
            yield
        finally:
            jax.profiler.stop_trace()

    def on_phase(name, seconds, **extra):
        if name == "compile":   # how this table has always named the cache's states
            extra["cache"] = {"": "off", "miss": "miss (written)"}.get(extra["cache"],
                                                                       extra["cache"])
        emit(phase=name, s=seconds, **extra)
    step = harness.Step(config, on_phase, traced if trace else None)
    t = time.perf_counter()
    state, metrics = step.compiled(step.state, step.batch)
    jax.block_until_ready((state, metrics))
    emit(phase="step 2", s=time.perf_counter() - t, loss=float(metrics["loss"]))
    if trace:
        emit(phase="compile trace", top=top_host_events(trace))


PHASES = ["start", "init", "batch", "lower", "compile", "step 1", "step 2"]


def row(name: str, flags: str, got: dict, status: str) -> str:
    cells = [f"{got[p]['s']:.1f}" if p in got else "–" for p in PHASES]
    ready = sum(got[p]["s"] for p in PHASES[:-1] if p in got)
    cache = got.get("compile", {}).get("cache", "")
    done = "step 2" in got
    note = "" if status == "ok" else status if done else \
        f"{status} during {next(p for p in PHASES if p not in got)}"
    return (f"| {name} | {' | '.join(cells)} | {ready:.1f} | "
            f"{'yes' if done and ready <= 60 else 'NO'} | {cache} | {note} |")


HEAD = ("| variant | start s | init s | batch s | lower s | compile s | step 1 s | step 2 s "
        "| start→step 1 s | ≤ 60 s | cache | note |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|")


def run_all(args, say=print) -> str:
    """Every variant, one process each, rows printed as they end; returns the
    markdown (also written to OUT/modern_compile.md)."""
    deadline = time.perf_counter() + args.budget
    tiny = args.tiny
    spec = dict(preset="modern_small" if tiny else "modern_base", seq=64 if tiny else 1024,
                batch=2 if tiny else 16, dtype="float32" if tiny else "bfloat16",
                extra=(harness.overrides_of(harness.TINY_MODEL) if tiny else []) + [
                    "model.remat_policy=none",  # as benchmarks/gpu/suite.py part (c)
                    f"data.max_predictions_per_seq={round(0.3 * (64 if tiny else 1024))}"])
    scratch = args.scratch or args.out   # the cache and the trace: bulky
    cache = os.path.join(scratch, "modern_cache")
    variants = (VARIANTS[:4] if tiny else VARIANTS)[:args.variants]
    title = (f"{spec['preset']} seq {spec['seq']} batch {spec['batch']} {spec['dtype']}, no "
             f"remat: seconds per phase, each variant its own process ({args.first_limit:.0f} s limit "
             f"for the default and the traced default, {args.limit:.0f} s for the others)")
    say(f"{title}\n\n{HEAD}")
    lines = [title, "", HEAD]
    traces, written, rows = [], {}, []
    for name, overrides, flags, use in variants:
        left = deadline - time.perf_counter()
        if left < 10:
            lines.append(f"| {name} | not reached (run budget spent) |")
            say(lines[-1])
            continue
        env = {"XLA_FLAGS": " ".join(x for x in (os.environ.get("XLA_FLAGS", ""), flags) if x)}
        env.update(cache_env(cache) if use in ("write", "read") else
                   {"JAX_ENABLE_COMPILATION_CACHE": "false", "JAX_COMPILATION_CACHE_DIR": ""})
        if use == "read" and "compile" not in written:
            lines.append(f"| {name} | not run: the default wrote no cache entry |")
            say(lines[-1])
            continue
        s = {**spec, "extra": spec["extra"] + overrides}
        if use == "trace":
            s["trace_dir"] = os.path.join(scratch, "compile_trace")
        got: dict = {}

        def on_line(line, got=got, name=name):
            if not line.startswith("{"):
                return
            r = json.loads(line)
            got[r["phase"]] = r
            if r["phase"] == "compile trace":
                traces.append((name, r["top"]))
            say(f"  [{name}] {r['phase']}: " + ", ".join(
                f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                for k, v in r.items() if k != "phase"))
        log = os.path.join(args.out, f"modern_compile_{len(lines) - 3}.log")
        # the default's own compile time is the figure this measures: its two
        # runs get the longer limit, so a compile of 60-110 s is measured, not cut
        limit = args.first_limit if use in ("write", "trace") else args.limit
        status = stream([sys.executable, os.path.abspath(__file__), "--child",
                         json.dumps(s)], min(limit, left), log, on_line, env)
        if use == "write":
            written = got
        lines.append(row(name, flags, got, status))
        figures = {f"{p.replace(' ', '_')}_s": round(got[p]["s"], 2) for p in PHASES if p in got}
        if figures:
            rows.append({"row": name, "overrides": s["extra"], "figures": {
                **figures, "cache": got.get("compile", {}).get("cache", ""),
                "xla_flags": flags, "status": status}})
        say(lines[-1])
    for name, top in traces:
        more = ["", f"Longest host events while compiling ({name}; inclusive seconds, "
                "nested events counted in each):", ""] + [f"- {s:.2f} s {n}" for n, s in top]
        lines += more
        say("\n".join(more))
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "modern_compile.md"), "w", encoding="utf-8") as f:
        f.write(text)
    records.save(args, "modern_compile", rows, preset=spec["preset"], notes=title,
                 shape={"seq": spec["seq"], "batch": spec["batch"], "dtype": spec["dtype"]})
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--tiny", action="store_true", help="CPU sizes, 4 variants: checks the script")
    ap.add_argument("--out", default=os.path.join(harness.ROOT, "runs", "modern_compile"))
    ap.add_argument("--scratch", help="folder for the compilation cache and the trace "
                    "(default --out)")
    ap.add_argument("--limit", type=float, default=75, help="seconds per variant")
    ap.add_argument("--first-limit", type=float, default=120,
                    help="seconds for the default and the traced default")
    ap.add_argument("--budget", type=float, default=420, help="seconds for all variants")
    ap.add_argument("--variants", type=int, default=None, help="only the first N variants "
                    "(1: the default alone, start → first step cold)")
    records.add_arguments(ap)
    args = ap.parse_args()
    args.no_record |= args.tiny   # a check of the script, not a result
    if args.child:
        child(json.loads(args.child))
        return
    os.makedirs(args.out, exist_ok=True)
    text = run_all(args, lambda s: print(s, flush=True))
    if text.count("| yes |") == 0:
        print("no variant reached its first step within 60 s", flush=True)


if __name__ == "__main__":
    main()
