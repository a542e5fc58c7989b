"""The pieces of benchmarks/gpu/suite.py: the variants it times, and how a
part runs a child process under its limit and shows each row as it comes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from harness.proc import stream

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.dirname(HERE)
NO_ATT_DROP = "model.attention_dropout_rate=0.0"
# What a GPU resolves the preset's `auto` keys to (kjax/config/platform_defaults.py).
GPU_DEFAULTS = ["model.scan_unroll=0", "train.dropout_rng=rbg"]
SHAKE = ["model.shake_factor=1.0", "shake.variant=random"]
CPU_DEFAULTS = ["train.dropout_rng=threefry", "model.scan_unroll=1"]
# Part (b): (key, name, overrides) on top of the BERT-base preset.
BERT_VARIANTS = [
    ("cpu-defaults", "preset with the CPU/TPU defaults (threefry bits, scanned layers; "
     "auto → explicit attention)", CPU_DEFAULTS),
    ("unrolled-threefry", "preset, scan_unroll=0, threefry",
     ["model.scan_unroll=0", "train.dropout_rng=threefry"]),
    ("unscanned-threefry", "preset, scan_layers=False, threefry",
     ["model.scan_layers=False", "train.dropout_rng=threefry"]),
    ("gpu-defaults", "preset as a GPU runs it (auto: scan_unroll=0 + dropout_rng=rbg)",
     GPU_DEFAULTS),
    ("no-dropout", "no dropout at all, auto (cuDNN), unroll + rbg",
     GPU_DEFAULTS + [NO_ATT_DROP, "model.dropout_rate=0.0"]),
    ("flash-no-attention-dropout", "attention dropout 0, flash, unroll + rbg",
     GPU_DEFAULTS + [NO_ATT_DROP, "model.attention_impl=flash"]),
    ("pairs-flash-no-attention-dropout",
     "shaking pairs B, attention dropout 0, flash, unroll + rbg",
     GPU_DEFAULTS + SHAKE + [NO_ATT_DROP, "model.attention_impl=flash", "shake.layout=pairs"]),
    ("dense-xla", "shaking dense B, preset dropouts, xla, unroll + rbg", GPU_DEFAULTS + SHAKE),
    ("cudnn-hidden-dropout", "attention dropout 0, hidden dropout 0.1, auto (cuDNN), "
     "unroll + rbg", GPU_DEFAULTS + [NO_ATT_DROP]),
    ("flash-dropout", "preset dropouts, flash (attention dropout in the kernel), unroll + rbg",
     GPU_DEFAULTS + ["model.attention_impl=flash"]),
    ("pairs-flash-dropout", "shaking pairs B, preset dropouts, flash, unroll + rbg",
     GPU_DEFAULTS + SHAKE + ["model.attention_impl=flash", "shake.layout=pairs"]),
    ("pairs-auto", "shaking pairs B, preset dropouts, auto (flash where GPU_FLASH_FASTER "
     "says so, else explicit), unroll + rbg", GPU_DEFAULTS + SHAKE + ["shake.layout=pairs"]),
    # the explicit path pinned, whatever `auto` runs: what settle's verdict holds flash to
    ("explicit-dropout", "preset dropouts, explicit attention (xla), unroll + rbg",
     GPU_DEFAULTS + ["model.attention_impl=xla"]),
    ("pairs-explicit-dropout", "shaking pairs B, preset dropouts, explicit attention (xla), "
     "unroll + rbg", GPU_DEFAULTS + SHAKE + ["model.attention_impl=xla", "shake.layout=pairs"]),
]
# part (a) times these two beside the peer: (b) leaves them out unless asked
IN_PEER_PART = ("gpu-defaults", "explicit-dropout")
MODERN_VARIANTS = [("auto (GPU: local layers on the flash kernel, global ones on cuDNN)", []),
                   ("flash", ["model.attention_impl=flash"]),
                   ("cuDNN for every layer (dot_product)", ["model.attention_impl=dot_product"])]
DEADLINE = [float("inf")]   # time.perf_counter() by which every part must have ended


def pick(spec: str, tiny: bool) -> list[tuple[str, list[str]]]:
    """Part (b)'s (name, overrides): keys (or indices) of BERT_VARIANTS,
    comma-separated; default all that (a) lacks (--tiny: two)."""
    keys = [k for k, _, _ in BERT_VARIANTS]
    chosen = [x.strip() for x in spec.split(",") if x.strip()] or (
        ["cpu-defaults", "gpu-defaults"] if tiny else [k for k in keys if k not in IN_PEER_PART])
    out = []
    for c in chosen:
        i = int(c) if c.isdigit() else keys.index(c) if c in keys else None
        if i is None or i >= len(keys):
            raise SystemExit(f"--b-variants: {c!r} is not a variant; choose from "
                             f"{', '.join(keys)} (or their indices 0-{len(keys) - 1})")
        out.append((BERT_VARIANTS[i][1], BERT_VARIANTS[i][2]))
    return out


def say(text: str) -> None:
    print(text, flush=True)


def run(cmd: list[str], limit: float, log: str, on_line=say) -> tuple[list[str], str]:
    """(stdout lines, status) of `cmd`, each line handed to `on_line` as it
    comes; killed after `limit` s or at the run's deadline, whichever is first."""
    lines: list[str] = []

    def keep(line):
        lines.append(line)
        on_line(line)
    left = DEADLINE[0] - time.perf_counter()
    if left < 5:
        return [], "not run: the run's budget is spent"
    start = time.perf_counter()
    status = stream(cmd, min(limit, left), log, keep)
    print(f"  {' '.join(os.path.basename(c) for c in cmd[1:3])}...: {status} after "
          f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return lines, status


HEAD = ("| variant | compile s | cache | first step s | ≤ 60 s | step ms | tokens/s | MFU | "
        "peak GiB |\n|---|---|---|---|---|---|---|---|---|")


def variant_row(r: dict) -> str:
    ready = r.get("compile_s", 0) + r["first_step_s"]
    mfu = f"{r['mfu']:.1%}" if "mfu" in r else "–"
    compile_s = f"{r['compile_s']:.1f}" if "compile_s" in r else "–"   # torch: in 1st step
    peak = f"{r['peak_gib']:.2f}" if r.get("peak_gib") is not None else "–"
    return (f"| {r['name']} | {compile_s} | {r.get('cache') or '–'} | {r['first_step_s']:.1f} | "
            f"{'yes' if ready <= 60 else 'NO'} | {r['ms']:.1f} | {r['tokens_per_s']:.0f} | "
            f"{mfu} | {peak} |")


def child(kind: str, spec: dict, limit: float, log: str, names: list[str], on_other=None):
    """Rows of a child part (benchmarks/gpu/children.py), each printed as it
    arrives; (rows, table). A line that is neither a variant's row nor its
    progress (an alternating round, ...) goes to `on_other`."""
    rows, table, started, phase = [], [HEAD], [], []
    say(HEAD)

    def on_line(line):
        if not line.startswith("{"):
            return
        r = json.loads(line)
        if "name" not in r and "start" not in r and "phase" not in r:
            (on_other or (lambda r: say(json.dumps(r))))(r)
            return
        if "start" in r:
            started.append(r["start"])
            return
        if "phase" in r:   # progress inside a variant: shown, and kept for a cut-off row
            phase[:] = [r]
            say(f"  ({started[0] if started else ''}: {r['phase']} in {r['s']} s, "
                f"cache {r.get('cache') or 'off'})")
            return
        started.clear()
        phase.clear()
        rows.append(r)
        table.append(variant_row(r))
        say(table[-1])
    _, status = run([sys.executable, os.path.join(HERE, "children.py"), kind,
                     json.dumps(spec)], limit, log, on_line)
    tail = []
    if started:
        got = f"{phase[0]['s']:.1f}" if phase else "–"
        cache = phase[0].get("cache") or "–" if phase else "–"
        tail.append(f"| {started[0]} | {got} | {cache} | – | NO | {status}: no step time "
                    "| – | – | – |")
    elif status != "ok":
        tail.append(f"| (part) | {status} | | | | | | | |")
    seen = {r["name"] for r in rows} | set(started)
    tail += [f"| {n} | not reached | | | | | | | |" for n in names if n not in seen]
    for line in tail:
        say(line)
    return rows, "\n".join(table + tail)


def peer_usable(venv: str | None) -> str | None:
    """None when `venv`/bin/python imports transformers 4.57's FlaxBertForPreTraining,
    else why not."""
    if not venv:
        return "no --peer-venv given (a folder whose bin/python has transformers 4.57 + flax)"
    python = os.path.join(venv, "bin", "python")
    if not os.access(python, os.X_OK):
        return (f"{python} is missing: no transformers 4.57 peer (benchmarks/gpu/README.md "
                "says how to make one)")
    probe = subprocess.run([python, "-c", "import transformers as t; "
                            "from transformers import FlaxBertForPreTraining; print(t.__version__)"],
                           capture_output=True, text=True)
    if probe.returncode or not probe.stdout.startswith("4.57"):
        last = (probe.stderr.strip().splitlines() or [probe.stdout.strip()])[-1:]
        return f"{python} has no transformers 4.57 with Flax ({' '.join(last)[:160]})"
    return None
