"""Every speed figure issue 24 asks of an accelerator, in one command with a
time limit per part, so one device call of a few minutes measures them all:

    (a) BERT-base seq 512 batch 32 bf16, the preset's recipe: kjax against HF
        FlaxBertForPreTraining (transformers 4.57), alternating (peer.py);
    (b) kjax variants of that step: attention path × shaking × scan, and the
        issue-24 changes on and off (dropout generator, logits dtype, unroll);
    (c) modern_base seq 1024 batch 16: kjax against transformers 5's PyTorch
        ModernBertForMaskedLM, eager and torch.compile;
    (d) modern_base at seq 8192;
    (e) one attention layer, fwd + bwd, to seq 8192 (attention.py).

    python benchmarks/accelerator.py --out runs/accelerator            # GPU/TPU sizes
    JAX_PLATFORMS=cpu python benchmarks/accelerator.py --tiny          # minutes-free check
    python benchmarks/accelerator.py --append runs/accelerator/accelerator.md

On a lent GPU use benchmarks/accelerator.sh (it installs the carried wheels
first; benchmarks/device_run.md has the exact call). Each kjax variant line
gives compile time and first-step time (target ≤ 60 s together), ms/step
(median of rounds), tokens/s, MFU and XLA's peak bytes. Each part runs in
child processes with its own `timeout`; a part that is cut off says so, and
what it printed before stays. A part whose peer is missing says "not run:
why". The section is printed, written to OUT/accelerator.md and, unless
--no-record, appended to docs/PERFORMANCE.md of the checkout it ran in
(on a lent machine that copy does not come back: --append the file here).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

import _common

HERE = os.path.dirname(os.path.abspath(__file__))
TINY_MODEL = ["--config.model.num_layers=2", "--config.model.hidden_size=64",
              "--config.model.num_heads=2", "--config.model.intermediate_size=128",
              "--config.model.vocab_size=512"]
NO_ATT_DROP = "model.attention_dropout_rate=0.0"
FAST = ["model.scan_unroll=0", "train.dropout_rng=rbg"]
SHAKE = ["model.shake_factor=1.0", "shake.variant=random"]
# (name, overrides): (b)'s variants on top of the preset's recipe.
BERT_VARIANTS = [
    ("preset (dropout 0.1/0.1, auto → xla, scan)", []),
    ("preset, attention_logits=float32 (before #24)", ["model.attention_logits=float32"]),
    ("preset, scan_unroll=0", ["model.scan_unroll=0"]),
    ("preset, scan_layers=False", ["model.scan_layers=False"]),
    ("preset, scan_unroll=0 + dropout_rng=rbg", FAST),
    ("no dropout at all, auto (cuDNN), unroll + rbg",
     FAST + [NO_ATT_DROP, "model.dropout_rate=0.0"]),
    ("attention dropout 0, flash, unroll + rbg",
     FAST + [NO_ATT_DROP, "model.attention_impl=flash"]),
    ("shaking pairs B, attention dropout 0, flash, unroll + rbg",
     FAST + SHAKE + [NO_ATT_DROP, "model.attention_impl=flash", "shake.layout=pairs"]),
    ("shaking dense B, preset dropouts, xla, unroll + rbg", FAST + SHAKE),
    # issue 34: attention dropout inside the flash kernel (targets: the preset on the
    # fused path ≤ 1.15× the step without attention dropout; pairs B ≤ 1.05× unshaken)
    ("attention dropout 0, hidden dropout 0.1, auto (cuDNN), unroll + rbg", FAST + [NO_ATT_DROP]),
    ("preset dropouts, flash (attention dropout in the kernel), unroll + rbg",
     FAST + ["model.attention_impl=flash"]),
    ("shaking pairs B, preset dropouts, flash, unroll + rbg",
     FAST + SHAKE + ["model.attention_impl=flash", "shake.layout=pairs"]),
]
MODERN_VARIANTS = [("auto (cuDNN on GPU)", []), ("flash", ["model.attention_impl=flash"])]


# ---- children: one process per part, JSON lines on stdout -------------------------------

def measure(config, rounds: int, steps: int) -> dict:
    import jax
    import numpy as np
    from kjax.parallel.mesh import make_mesh, on_mesh, put_batch
    from kjax.train.metrics import peak_flops
    from kjax.train.state import init_state, make_model, make_optimizer
    from kjax.train.step import flops_per_example, make_train_step
    mesh = make_mesh(config)
    model, tx = make_model(config, deterministic=False), make_optimizer(config.train)
    state, shardings = init_state(config, mesh, model, tx)
    step = make_train_step(config, mesh, model, tx, shardings)
    batch = put_batch(_common.synthetic_batch(config, np.random.default_rng(0)), mesh)
    start = time.perf_counter()
    with on_mesh(mesh, config):
        compiled = step.jitted.lower(state, batch).compile()
    compile_s = time.perf_counter() - start
    state, first_s = _common.timed_steps(compiled, state, batch, 1)
    times = []
    for _ in range(rounds):
        state, seconds = _common.timed_steps(compiled, state, batch, steps)
        times.append(seconds)
    step_s = statistics.median(times)
    d, b = config.data, config.train.batch_size
    flops = flops_per_example(config.model, d.max_seq_len, d.max_predictions_per_seq) * b
    peak, source = peak_flops(config)
    return {"compile_s": compile_s, "first_step_s": first_s, "step_ms": 1000 * step_s,
            "tokens_s": b * d.max_seq_len / step_s, "mfu": flops / step_s / peak,
            "peak_gib": _common.peak_bytes(compiled) / 2**30, "peak_source": source,
            "device": jax.devices()[0].device_kind}


def child_kjax(spec: dict) -> None:
    for name, overrides in spec["variants"]:
        print(json.dumps({"start": name}), flush=True)
        extra = spec["extra"] + [f"--config.{o}" for o in overrides]
        config = _common.preset_config(spec["preset"], spec["seq"], spec["batch"],
                                       spec["dtype"], extra)
        result = measure(config, spec["rounds"], spec["steps"])
        print(json.dumps({"name": name, "overrides": overrides, **result}), flush=True)


def child_torch(spec: dict) -> None:
    """transformers' ModernBertForMaskedLM at the kjax preset's dims (modern.py)."""
    import numpy as np
    import torch
    import transformers
    from modern import torch_step

    from kjax.model.config import EncoderConfig
    config = _common.preset_config(spec["preset"], spec["seq"], spec["batch"], "float32",
                                   spec["extra"])
    batch = _common.synthetic_batch(config, np.random.default_rng(0))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for compiled in spec["compile"]:
        name = f"torch {torch.__version__} {'torch.compile' if compiled else 'eager'}, " \
               f"sdpa, {'bf16 autocast, fused AdamW' if device == 'cuda' else 'fp32'}; " \
               f"transformers {transformers.__version__}"
        print(json.dumps({"start": name}), flush=True)
        start = time.perf_counter()
        step, _ = torch_step(EncoderConfig.from_config(config.model), batch,
                             config.train.learning_rate, device, device == "cuda", compiled)
        step()
        first_s = time.perf_counter() - start
        times = []
        for _ in range(spec["rounds"]):
            start = time.perf_counter()
            for _ in range(spec["steps"]):
                step()     # float(loss) in step() waits for the device
            times.append((time.perf_counter() - start) / spec["steps"])
        step_s = statistics.median(times)
        memory = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
        print(json.dumps({"name": name, "first_step_s": first_s, "step_ms": 1000 * step_s,
                          "tokens_s": spec["batch"] * spec["seq"] / step_s,
                          "peak_gib": memory}), flush=True)


# ---- the parent: parts, time limits, the markdown section -------------------------------

DEADLINE = [float("inf")]   # time.perf_counter() by which every part must have ended


def run(cmd: list[str], limit: float, log: str) -> tuple[list[str], str]:
    """(stdout lines, status) of `cmd`, killed (its process group) after `limit` s
    or at the whole run's deadline (--budget), whichever comes first."""
    limit = max(1.0, min(limit, DEADLINE[0] - time.perf_counter()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (_common.ROOT, os.environ.get("PYTHONPATH", "")) if p)}
    with open(log, "w", encoding="utf-8") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                cwd=_common.ROOT, start_new_session=True)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        start = time.perf_counter()
        try:
            proc.wait(timeout=limit)
            status = "ok" if proc.returncode == 0 else f"failed (rc {proc.returncode}; {log})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = f"cut off at its {limit:.0f} s limit"
        reader.join(timeout=5)
    print(f"  {' '.join(os.path.basename(c) for c in cmd[:3])}...: {status} after "
          f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return [line.rstrip("\n") for line in lines], status


def child(kind: str, spec: dict, limit: float, log: str):
    cmd = [sys.executable, os.path.join(HERE, "accelerator.py"), "--child", kind, json.dumps(spec)]
    lines, status = run(cmd, limit, log)
    rows = [json.loads(line) for line in lines if line.startswith("{")]
    return rows, status


def variant_table(rows: list[dict], status: str, names: list[str], target_s: float = 60) -> str:
    head = ("| variant | compile s | first step s | ≤ 60 s | step ms | tokens/s | MFU | "
            "peak GiB |\n|---|---|---|---|---|---|---|---|")
    out, started = [head], None
    for r in rows:
        if "start" in r:
            started = r["start"]
            continue
        started = None
        ready = r.get("compile_s", 0) + r["first_step_s"]
        mfu = f"{r['mfu']:.1%}" if "mfu" in r else "–"
        compile_s = f"{r['compile_s']:.1f}" if "compile_s" in r else "–"   # torch: in 1st step
        peak = f"{r['peak_gib']:.2f}" if r.get("peak_gib") == r.get("peak_gib") else "–"
        out.append(f"| {r['name']} | {compile_s} | "
                   f"{r['first_step_s']:.1f} | {'yes' if ready <= target_s else 'NO'} | "
                   f"{r['step_ms']:.1f} | {r['tokens_s']:.0f} | {mfu} | {peak} |")
    if started is not None:
        out.append(f"| {started} | – | – | NO | {status}: no step time | – | – | – |")
    elif status != "ok":
        out.append(f"| (part) | {status} | | | | | | |")
    seen = {r.get("name", r.get("start")) for r in rows}
    out += [f"| {n} | not reached | | | | | | |" for n in names if n not in seen]
    return "\n".join(out)


def peer_usable(venv: str | None) -> str | None:
    """None when `venv`/bin/python imports transformers 4.57's FlaxBertForPreTraining,
    else why not."""
    if not venv:
        return "no --peer-venv given (a folder whose bin/python has transformers 4.57 + flax)"
    python = os.path.join(venv, "bin", "python")
    if not os.access(python, os.X_OK):
        return f"{python} is missing: no transformers 4.57 peer (benchmarks/accelerator.sh --fetch)"
    probe = subprocess.run([python, "-c", "import transformers as t; "
                            "from transformers import FlaxBertForPreTraining; print(t.__version__)"],
                           capture_output=True, text=True)
    if probe.returncode or not probe.stdout.startswith("4.57"):
        last = (probe.stderr.strip().splitlines() or [probe.stdout.strip()])[-1:]
        return f"{python} has no transformers 4.57 with Flax ({' '.join(last)[:160]})"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", nargs=2, metavar=("KIND", "SPEC"), help=argparse.SUPPRESS)
    ap.add_argument("--tiny", action="store_true", help="CPU sizes: checks the script, no speed")
    ap.add_argument("--parts", default="abcde")
    ap.add_argument("--b-variants", default="", help="part (b): comma-separated indices of "
                    "BERT_VARIANTS to run (default: all); with --parts b alone, part (b) gets "
                    "the whole --budget (issue 34: --parts b --b-variants 4,6,7,9,10,11)")
    ap.add_argument("--peer-venv", default=os.environ.get("KJAX_PEER_VENV"))
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(_common.ROOT, "runs",
                                                                          "accelerator"))
    ap.add_argument("--budget", type=float, default=465,
                    help="seconds for all parts together (each also has its own limit)")
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--append", metavar="FILE", help="append a section written elsewhere "
                    "(OUT/accelerator.md of a device run) to docs/PERFORMANCE.md, and stop")
    args = ap.parse_args()
    if args.child:
        {"kjax": child_kjax, "torch": child_torch}[args.child[0]](json.loads(args.child[1]))
        return
    perf = os.path.join(_common.ROOT, "docs", "PERFORMANCE.md")
    if args.append:
        with open(args.append, encoding="utf-8") as f, open(perf, "a", encoding="utf-8") as p:
            p.write("\n" + f.read())
        print(f"appended {args.append} to {perf}")
        return
    os.makedirs(args.out, exist_ok=True)
    DEADLINE[0] = time.perf_counter() + args.budget
    tiny = args.tiny
    # seconds per part: tiny (CPU check) / accelerator; their sum stays within --budget
    limit = {k: v[0] if tiny else v[1] for k, v in {
        "a": (120, 85), "b": (300, 170), "c_kjax": (120, 55), "c_torch": (120, 70),
        "d": (120, 45), "e": (120, 40)}.items()}
    if args.parts == "b":
        limit["b"] = args.budget
    sections = []

    def part(key, title, body):
        sections.append(f"#### ({key}) {title}\n\n{body}\n")
        print(sections[-1], flush=True)

    def log(key):
        return os.path.join(args.out, f"part_{key}.log")

    bert = dict(preset="bert_base", seq=32 if tiny else 512, batch=2 if tiny else 32,
                dtype="float32" if tiny else "bfloat16", extra=TINY_MODEL if tiny else [],
                rounds=1 if tiny else 2, steps=1 if tiny else 5)
    if "a" in args.parts:
        why = peer_usable(args.peer_venv)
        if why:
            part("a", "BERT-base vs HF Flax", f"not run: {why}")
        else:
            cmd = [sys.executable, os.path.join(HERE, "peer.py"), "--shape",
                   "uknow_small" if tiny else "bert_base", "--seq", str(bert["seq"]),
                   "--batch", str(bert["batch"]), "--dtype", bert["dtype"],
                   "--rounds", "1" if tiny else "4", "--steps", "1" if tiny else "5",
                   "--venv", args.peer_venv, "--no-record"]
            lines, status = run(cmd, limit["a"], log("a"))
            part("a", f"BERT-base seq {bert['seq']} batch {bert['batch']} {bert['dtype']}, "
                 "kjax vs HF FlaxBertForPreTraining (peer.py, alternating)",
                 "\n".join(lines) + ("" if status == "ok" else f"\n\npeer.py: {status}"))
    if "b" in args.parts:
        # tiny (fp32): the preset and the issue-24 switches that change its program
        # there (attention_logits=float32 is the same program in fp32)
        chosen = [int(i) for i in args.b_variants.split(",") if i]
        variants = [BERT_VARIANTS[i] for i in (chosen or ((0, 4) if tiny else
                                                         range(len(BERT_VARIANTS))))]
        rows, status = child("kjax", {**bert, "variants": variants}, limit["b"], log("b"))
        note = ("\n\n--tiny: two variants; the flash ones would run Pallas' interpret mode "
                "(an emulator, no speed)." if tiny else "")
        part("b", f"kjax variants, BERT-base seq {bert['seq']} batch {bert['batch']} "
             f"{bert['dtype']} (one after another, {bert['rounds']} rounds × "
             f"{bert['steps']} steps each)", variant_table(rows, status, [n for n, _ in variants]) + note)
    modern = dict(preset="modern_small" if tiny else "modern_base", seq=64 if tiny else 1024,
                  batch=2 if tiny else 16, dtype="float32" if tiny else "bfloat16",
                  # no remat, as PyTorch's side: the preset's remat is there to fit a
                  # v3 core at batch 256, not a GPU at batch 16
                  extra=(TINY_MODEL if tiny else []) + [
                      "--config.model.remat_policy=none",
                      f"--config.data.max_predictions_per_seq={round(0.3 * (64 if tiny else 1024))}"],
                  rounds=1 if tiny else 3, steps=1 if tiny else 5)
    if "c" in args.parts:
        mv = MODERN_VARIANTS[:1 if tiny else 2]
        rows, status = child("kjax", {**modern, "variants": mv}, limit["c_kjax"], log("c_kjax"))
        table = variant_table(rows, status, [n for n, _ in mv])
        compiles = [False] if tiny else [False, True]
        trows, tstatus = child("torch", {**modern, "compile": compiles}, limit["c_torch"],
                               log("c_torch"))
        table += "\n\n" + variant_table(trows, tstatus, [])
        if tiny:
            table += "\n\ntorch.compile not run: on CPU inductor's C++ build takes minutes."
        kj = [r for r in rows if "step_ms" in r]
        eager = [r for r in trows if "eager" in r.get("name", "") and "step_ms" in r]
        if kj and eager:
            table += (f"\n\nkjax ({kj[0]['name']}) / PyTorch eager tokens/s = "
                      f"**{kj[0]['tokens_s'] / eager[0]['tokens_s']:.2f}×** (target ≥ 1.5×).")
        part("c", f"{modern['preset']} seq {modern['seq']} batch {modern['batch']}: kjax vs "
             "transformers ModernBertForMaskedLM (one after another)", table)
    if "d" in args.parts:
        long = {**modern, "seq": 128 if tiny else 8192, "batch": 1 if tiny else 2,
                "extra": modern["extra"][:-1] + [
                    f"--config.data.max_predictions_per_seq={round(0.3 * (128 if tiny else 8192))}"]}
        mv = MODERN_VARIANTS[:1 if tiny else 2]
        rows, status = child("kjax", {**long, "variants": mv}, limit["d"], log("d"))
        part("d", f"{long['preset']} seq {long['seq']} batch {long['batch']}",
             variant_table(rows, status, [n for n, _ in mv]))
    if "e" in args.parts:
        cmd = [sys.executable, os.path.join(HERE, "attention.py"), "--tables", "time",
               "--seqs", "64" if tiny else "512,2048,8192", "--tokens", "256" if tiny else "16384",
               "--steps", "1" if tiny else "5", "--no-record"]
        lines, status = run(cmd, limit["e"], log("e"))
        part("e", "one attention layer, fwd + bwd (attention.py)",
             "\n".join(lines) + ("" if status == "ok" else f"\n\nattention.py: {status}"))
    import jax
    head = (f"### accelerator (issue 24{', --tiny: a check of the script, no speed' if tiny else ''})"
            f" — {datetime.date.today().isoformat()} — {_common.machine()}; "
            f"commit {_git_commit()}\n\n")
    text = head + "\n".join(sections)
    with open(os.path.join(args.out, "accelerator.md"), "w", encoding="utf-8") as f:
        f.write(text)
    if not args.no_record:
        with open(perf, "a", encoding="utf-8") as f:
            f.write("\n" + text)
    print(f"wrote {os.path.join(args.out, 'accelerator.md')} ({jax.default_backend()})")


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", _common.ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or "n/a"
    except (OSError, subprocess.SubprocessError):
        return "n/a"


if __name__ == "__main__":
    main()
