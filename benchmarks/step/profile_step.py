"""Where does my step's time go? A `jax.profiler` trace of a few kjax train
steps, aggregated per kernel: ms per step, share of the device time,
launches per step and the HLO instruction each kernel came from (with what
that instruction is: a fusion's root op and shape, a custom call's target).

    python benchmarks/step/profile_step.py --config bert_base --seq 512 --batch 32 \\
        --dtype bfloat16 --steps 3
    python benchmarks/step/profile_step.py --config tpu_configs/demo.py \\
        --config.model.scan_unroll=0 --config.train.dropout_rng=rbg --by op
    python benchmarks/step/profile_step.py --trace runs/profile/plugins   # re-read a trace

--config takes a preset name (tpu_configs/NAME.py) or a path; every
`--config.KEY=VALUE` after it overrides as in `kjax train`. The step runs on
synthetic batches (no input pipeline), is compiled and run twice before the
trace, then --steps steps are traced, each waited for. On a GPU the rows are
the kernels of the device's streams (the cuDNN/cuBLAS kernels named by their
library, XLA's fusions by their HLO name); on CPU they are XLA's thunks on
the host threads, so the same table answers there too. Written to --out:
the trace (open it in Perfetto or TensorBoard), `profile.md` (the tables)
and `step.hlo.txt.gz` (the optimized HLO the "HLO op" column names); a
record per kernel family to benchmarks/results/profile_step.jsonl.
"""
from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import records  # noqa: E402

# Kernel-name patterns → the families docs/PERFORMANCE.md talks about; the
# first match wins (a cuDNN GEMM is "attention (cuDNN)" only by its sdpa name).
FAMILIES = [("attention (cuDNN / flash)", r"sdpa|flash|fmha|cudnn|mosaic|attention"),
            ("matrix products", r"nvjet|gemm|xmma|cublas|cutlass|\bdot|dot_|matmul|ynn"),
            ("scatter", r"scatter"),
            ("random bits (dropout)", r"xor|threefry|rng|philox|u32\["),
            ("copies / zero-fills", r"memcpy|memset|copy|dynamic.update.slice|loop_broadcast"),
            ("reductions (softmax, layer norm, losses)", r"reduce"),
            ("other fusions", r".")]


def find_trace(root: str) -> str:
    """The newest *.trace.json.gz under `root` (jax writes
    root/plugins/profile/<time>/<host>.trace.json.gz)."""
    found = [p for p in glob.glob(os.path.join(root, "**", "*.trace.json.gz"), recursive=True)
             if not os.path.basename(p).startswith("perfetto")]
    if not found:
        raise SystemExit(f"no *.trace.json.gz under {root}")
    return max(found, key=os.path.getmtime)


def kernel_events(path: str) -> tuple[list[dict], str]:
    """(events that are device work, where they were found). On a GPU: every
    complete event on the device process's stream lines (not its derived
    "XLA Ops"/"Steps" lines, which repeat the same time). Without a device
    process (CPU): the host events that carry an `hlo_op` (XLA's thunks)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    procs, threads = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    complete = [e for e in events if e.get("ph") == "X" and "dur" in e]
    devices = {p for p, n in procs.items() if n.startswith("/device:")}
    streams = {k for k, n in threads.items() if k[0] in devices and n.startswith("Stream")}
    # a TPU's device plane has no stream lines: its "XLA Ops" line is the kernels
    streams = streams or {k for k, n in threads.items() if k[0] in devices and n == "XLA Ops"}
    if streams:
        lines = sorted({threads[k] for k in streams})
        return [e for e in complete if (e["pid"], e["tid"]) in streams], \
            f"{', '.join(procs[p] for p in sorted(devices))}: {', '.join(lines)}"
    host = [e for e in complete if "hlo_op" in e.get("args", {})
            and not e["name"].startswith("end: ")]
    return leaves(host), "host threads (XLA CPU thunks; no device process in the trace)"


def leaves(events: list[dict]) -> list[dict]:
    """The events that enclose no other event of their thread: a CPU `while`
    thunk spans its body's thunks, and counting both would count twice."""
    out = []
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[(e["pid"], e["tid"])].append(e)
    for thread in by_thread.values():
        thread.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[list] = []   # [event, has_child]
        for e in thread:
            while stack and e["ts"] >= stack[-1][0]["ts"] + stack[-1][0]["dur"]:
                done = stack.pop()
                if not done[1]:
                    out.append(done[0])
            if stack:
                stack[-1][1] = True
            stack.append([e, False])
        out += [e for e, has_child in stack if not has_child]
    return out


def step_walls(path: str, name: str) -> list[float]:
    """Seconds of each StepTraceAnnotation(`name`) in the trace."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [e["dur"] / 1e6 for e in events if e.get("ph") == "X" and e.get("name") == name
            and "step_num" in e.get("args", {})]


def hlo_index(text: str) -> dict[str, str]:
    """HLO instruction name → what it is ("scatter fusion → bf16[2,768]",
    "custom-call __cudnn$fmhaSoftmax", "copy f32[..]"), from optimized HLO text."""
    inst = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(\([^=]*?\)|\S+)\s+([\w\-]+)\((.*)$")
    roots, out, current = {}, {}, None
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if head and "=" not in line.split("{")[0]:
            current = head.group(1)
            continue
        m = inst.match(line)
        if not m:
            continue
        root, name, shape, opcode, rest = m.groups()
        if root and current:
            roots[current] = opcode
        if opcode == "fusion":
            calls = re.search(r"calls=%?([\w.\-]+)", rest)
            out[name] = ("fusion", calls.group(1) if calls else "", shape)
        elif opcode == "custom-call":
            target = re.search(r'custom_call_target="([^"]+)"', rest)
            out[name] = ("custom-call " + (target.group(1) if target else "?"), "", shape)
        else:
            out[name] = (opcode, "", shape)
    return {n: (f"{roots.get(calls, '?')} fusion" if op == "fusion" else op)
            + f" → {re.sub(r'{[^{}]*}', '', shape)[:60]}" for n, (op, calls, shape) in out.items()}


def aggregate(events: list[dict], steps: int, by: str = "kernel") -> list[dict]:
    """One row per kernel name (by="kernel") or per HLO instruction (by="op"):
    ms per step, share of the summed time, launches per step, HLO op(s)."""
    rows: dict[str, dict] = {}
    for e in events:
        args = e.get("args", {})
        op = args.get("hlo_op", "")
        key = e["name"] if by == "kernel" else (op or e["name"])
        r = rows.setdefault(key, {"name": key, "us": 0.0, "n": 0, "ops": collections.Counter(),
                                  "module": args.get("hlo_module", "")})
        r["us"] += e["dur"]
        r["n"] += 1
        if op:
            r["ops"][op] += 1
    total = sum(r["us"] for r in rows.values()) or 1.0
    out = sorted(rows.values(), key=lambda r: -r["us"])
    for r in out:
        r.update(ms_step=r["us"] / 1e3 / steps, share=r["us"] / total, per_step=r["n"] / steps)
    return out


def family(name: str) -> str:
    low = name.lower()
    return next(f for f, pattern in FAMILIES if re.search(pattern, low))


def families(rows: list[dict], hlo: dict[str, str]) -> list[tuple[str, float, float]]:
    """(family, ms per step, share) of the summed device time, largest first."""
    fams: dict[str, list] = collections.defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        f = family(" ".join([r["name"], *r["ops"], *(hlo.get(o, "") for o in r["ops"])]))
        fams[f][0] += r["ms_step"]
        fams[f][1] += r["share"]
    return [(f, ms, share) for f, (ms, share) in sorted(fams.items(), key=lambda kv: -kv[1][0])]


def tables(rows: list[dict], steps: int, hlo: dict[str, str], top: int, by: str) -> str:
    """The per-kernel table (top rows + one row for the rest: shares sum to
    100 %) and the per-family summary."""
    total_ms = sum(r["ms_step"] for r in rows)
    head = [f"| ms/step | share | launches/step | {'kernel' if by == 'kernel' else 'HLO op'} "
            "| HLO op (what it is) |", "|---|---|---|---|---|"]
    for r in rows[:top]:
        ops = ", ".join(f"{o}{' ×' + str(c // steps) if len(r['ops']) > 1 else ''}"
                        for o, c in r["ops"].most_common(2))
        what = "; ".join(hlo[o] for o, _ in r["ops"].most_common(1) if o in hlo)
        name = r["name"] if len(r["name"]) <= 70 else r["name"][:67] + "..."
        head.append(f"| {r['ms_step']:.3f} | {r['share']:.1%} | {r['per_step']:g} | "
                    f"{name} | {ops}{' — ' + what if what else ''} |")
    rest = rows[top:]
    if rest:
        head.append(f"| {sum(r['ms_step'] for r in rest):.3f} | "
                    f"{sum(r['share'] for r in rest):.1%} | {sum(r['per_step'] for r in rest):g} "
                    f"| ({len(rest)} more) | – |")
    summary = ["| family | ms/step | share |", "|---|---|---|"] + [
        f"| {f} | {ms:.3f} | {share:.1%} |" for f, ms, share in families(rows, hlo)]
    return (f"Device time summed per step: **{total_ms:.2f} ms** ({steps} steps traced).\n\n"
            + "\n".join(summary) + "\n\n" + "\n".join(head))


def profile(config, steps: int, out: str) -> dict:
    """Compile the train step of `config`, run it twice, trace `steps` steps
    into `out`; returns timings and the compiled HLO text."""
    import jax
    def on_phase(name, seconds, **_):
        if name == "compile":
            print(json.dumps({"phase": name, "s": round(seconds, 2)}), file=sys.stderr, flush=True)
    step = harness.Step(config, on_phase)
    step.run(1)
    with jax.profiler.trace(out):
        for i in range(steps):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                step.run(1)
    return {"compile_s": step.compile_s, "first_step_s": step.first_step_s,
            "hlo": step.compiled.as_text(), "device": jax.devices()[0].device_kind}


def load(spec: str, extra: list[str], seq: int | None, batch: int | None, dtype: str | None):
    """A preset name (with --seq/--batch: harness.preset_config's sizes, 15 %
    predictions) or a config file, then the --config.KEY=V overrides."""
    from kjax.config import load_config
    if not spec.endswith(".py"):
        if seq or batch:
            base = load_config(os.path.join(harness.ROOT, "tpu_configs", f"{spec}.py"))
            return harness.preset_config(spec, seq or base.data.max_seq_len,
                                         batch or base.train.batch_size, dtype, extra)
        spec = os.path.join(harness.ROOT, "tpu_configs", f"{spec}.py")
    sizes = [f"--config.data.max_seq_len={seq}"] if seq else []
    sizes += [f"--config.train.batch_size={batch}"] if batch else []
    sizes += [f"--config.model.dtype={dtype}"] if dtype else []
    return load_config(spec, sizes + extra)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="bert_base", help="preset name or config file")
    ap.add_argument("--seq", type=int, help="data.max_seq_len (preset: also 15 %% predictions)")
    ap.add_argument("--batch", type=int, help="train.batch_size")
    ap.add_argument("--dtype", help="model.dtype (bfloat16 on GPU/TPU)")
    ap.add_argument("--steps", type=int, default=3, help="steps traced")
    ap.add_argument("--by", choices=("kernel", "op"), default="kernel",
                    help="a row per kernel name, or per HLO instruction")
    ap.add_argument("--top", type=int, default=40, help="rows shown; the rest in one row")
    ap.add_argument("--out", default=os.path.join(harness.ROOT, "runs", "profile"))
    ap.add_argument("--trace", help="only aggregate an existing trace folder or file "
                    "(--steps: how many steps it holds)")
    records.add_arguments(ap)
    args, extra = ap.parse_known_args(argv)
    bad = [e for e in extra if not e.startswith("--config.")]
    if bad:
        ap.error(f"unknown arguments {bad} (overrides are --config.KEY=VALUE)")
    os.makedirs(args.out, exist_ok=True)
    hlo, head = {}, ""
    if args.trace:
        path = args.trace if args.trace.endswith(".gz") else find_trace(args.trace)
        saved = glob.glob(os.path.join(args.trace, "**", "step.hlo.txt.gz"), recursive=True)
        if saved:   # written next to the trace by an earlier run of this script
            with gzip.open(saved[0], "rt", encoding="utf-8") as f:
                hlo = hlo_index(f.read())
    else:
        import shutil
        shutil.rmtree(os.path.join(args.out, "plugins"), ignore_errors=True)
        config = load(args.config, extra, args.seq, args.batch, args.dtype)
        result = profile(config, args.steps, args.out)
        with gzip.open(os.path.join(args.out, "step.hlo.txt.gz"), "wt", encoding="utf-8") as f:
            f.write(result["hlo"])
        hlo = hlo_index(result["hlo"])
        path = find_trace(args.out)
        walls = step_walls(path, "train")
        wall = f"{1000 * sum(walls) / len(walls):.2f} ms wall per step" if walls else "no wall"
        head = (f"`{args.config}` {' '.join(extra)} seq {config.data.max_seq_len} batch "
                f"{config.train.batch_size} {config.model.dtype} on {result['device']}: "
                f"compile {result['compile_s']:.1f} s, first step {result['first_step_s']:.2f} s, "
                f"{wall} (traced).\n\n")
    events, where = kernel_events(path)
    rows = aggregate(events, args.steps, args.by)
    text = head + f"Kernels from {where}; trace {path}.\n\n" + tables(
        rows, args.steps, hlo, args.top, args.by)
    with open(os.path.join(args.out, "profile.md"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print(text, flush=True)
    if not args.trace:   # a record per family of kernels, for the profiled config
        records.save(args, "profile_step", [
            {"row": f, "figures": {"ms": round(ms, 3), "share": round(share, 4)}}
            for f, ms, share in families(rows, hlo)],
            preset=args.config, overrides=harness.overrides_of(extra),
            shape={"seq": config.data.max_seq_len, "batch": config.train.batch_size,
                   "dtype": config.model.dtype},
            notes=f"{args.steps} steps traced; device time per step summed per kernel family.")


if __name__ == "__main__":
    main()
