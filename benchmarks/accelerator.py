"""Every speed figure issues 24 and 33 ask of an accelerator, sized so one
device call of a few minutes measures them (compile times on an H200: 20-45
s per BERT-base program). Each part runs in child processes under its own
limit, and every row is printed the moment it is measured: a part cut off
keeps what it printed and says where it was. One persistent compilation
cache per run (in a scratch folder under /tmp, shared by every child; not
in OUT, which a lent machine sends back under a size limit): a program that one
part compiled is read back by the next (column "cache").

    (a) BERT-base seq 512 batch 32 bf16: kjax's preset and its fastest recipe
        (scan_unroll=0 + rbg) against HF FlaxBertForPreTraining
        (transformers 4.57), alternating (peer.py);
    (b) more kjax variants of that step (attention path, dropout, scan, shaking);
    (c) modern_base seq 1024 batch 16: kjax against transformers 5's PyTorch
        ModernBertForMaskedLM, eager (+ torch.compile in the full set);
    (d) modern_base at seq 8192;
    (e) one attention layer, fwd + bwd, to seq 8192 (attention.py);
    (f) `kjax train` of a small model: SIGTERM, SIGKILL, resume (train_resume.py);
    (g) where the preset step's time goes: per-kernel profile (profile_step.py);
    (m) modern_base's start → first step, phase by phase, per compile variant
        (modern_compile.py; issue 33 item 4; not in the full set: its own call).

Seconds per part on a GPU (limits; a part ends sooner when it is done):

    part         --quick (≤ 5 min)   full (≤ 9 min)   --parts m
    (a)          150                 130
    (b)          –                   90
    (c) kjax     75                  70
    (c) PyTorch  50 (eager)          60 (eager + torch.compile)
    (d)          –                   40
    (e)          –                   40
    (f)          –                   60
    (g)          –                   50
    (m)          –                   –                420 (120 default, 75 others)
    sum          275 (--budget 290)  540 (--budget 540)

    bash benchmarks/accelerator.sh --quick          # lent GPU (device_run.md)
    bash benchmarks/accelerator.sh                  # the full set
    bash benchmarks/accelerator.sh --parts m        # item 4 alone
    JAX_PLATFORMS=cpu python benchmarks/accelerator.py --tiny    # CPU check

Each kjax variant line gives compile and first-step time (target ≤ 60 s
together), ms/step (median of rounds), tokens/s, MFU and XLA's peak bytes.
A part whose peer is missing says "not run: why". The section is printed,
written to OUT/accelerator.md and, unless --no-record, appended to
docs/PERFORMANCE.md of the checkout it ran in (on a lent machine that copy
does not come back: --append the file here).
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
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
# The defaults before issue 33 (since then the GPU resolves the auto keys to FAST).
OLD = ["train.dropout_rng=threefry", "model.scan_unroll=1"]
BERT_VARIANTS = [
    ("preset, defaults before #33 (threefry, scan; auto → xla)", OLD),
    ("preset, before #33, attention_logits=float32 (before #24)",
     OLD + ["model.attention_logits=float32"]),
    ("preset, scan_unroll=0, threefry", ["model.scan_unroll=0", "train.dropout_rng=threefry"]),
    ("preset, scan_layers=False, threefry", ["model.scan_layers=False",
                                             "train.dropout_rng=threefry"]),
    ("preset as a GPU runs it (auto: scan_unroll=0 + dropout_rng=rbg)", FAST),
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


# seconds per part: (--tiny on CPU, --quick, full)
LIMITS = {"a": (300, 150, 130), "b": (300, 0, 90), "c_kjax": (200, 75, 70),
          "c_torch": (200, 50, 60), "d": (200, 0, 40), "e": (200, 0, 40),
          "f": (400, 0, 60), "g": (200, 0, 50), "m": (600, 420, 420)}
DEADLINE = [float("inf")]   # time.perf_counter() by which every part must have ended


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
    status = _common.stream(cmd, min(limit, left), log, keep)
    print(f"  {' '.join(os.path.basename(c) for c in cmd[1:3])}...: {status} after "
          f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return lines, status


HEAD = ("| variant | compile s | cache | first step s | ≤ 60 s | step ms | tokens/s | MFU | "
        "peak GiB |\n|---|---|---|---|---|---|---|---|---|")


def variant_row(r: dict) -> str:
    ready = r.get("compile_s", 0) + r["first_step_s"]
    mfu = f"{r['mfu']:.1%}" if "mfu" in r else "–"
    compile_s = f"{r['compile_s']:.1f}" if "compile_s" in r else "–"   # torch: in 1st step
    peak = f"{r['peak_gib']:.2f}" if r.get("peak_gib") == r.get("peak_gib") else "–"
    return (f"| {r['name']} | {compile_s} | {r.get('cache') or '–'} | {r['first_step_s']:.1f} | "
            f"{'yes' if ready <= 60 else 'NO'} | {r['step_ms']:.1f} | {r['tokens_s']:.0f} | "
            f"{mfu} | {peak} |")


def child(kind: str, spec: dict, limit: float, log: str, names: list[str]):
    """Rows of a child part, each printed as it arrives; (rows, table)."""
    rows, table, started, phase = [], [HEAD], [], []
    say(HEAD)

    def on_line(line):
        if not line.startswith("{"):
            return
        r = json.loads(line)
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
    _, status = run([sys.executable, os.path.join(HERE, "_accel_children.py"), kind,
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
    ap.add_argument("--tiny", action="store_true", help="CPU sizes: checks the script, no speed")
    ap.add_argument("--quick", action="store_true",
                    help="(a) and (c) only, PyTorch eager only: ≤ 5 minutes on a GPU")
    ap.add_argument("--parts", default=None, help="default abcdefg (--quick: ac); m: item 4")
    ap.add_argument("--b-variants", default="", help="part (b): comma-separated indices of "
                    "BERT_VARIANTS to run (default: those (a) lacks); with --parts b alone, "
                    "part (b) gets the whole budget (issue 34: --parts b --b-variants "
                    "4,6,7,9,10,11)")
    ap.add_argument("--peer-venv", default=os.environ.get("KJAX_PEER_VENV"))
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(_common.ROOT, "runs",
                                                                          "accelerator"))
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds for all parts together (default 290 --quick, 540 full, "
                    "1500 --tiny; each part also has its own limit)")
    ap.add_argument("--no-cache", action="store_true", help="no persistent compilation cache")
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--append", metavar="FILE", help="append a section written elsewhere "
                    "(OUT/accelerator.md of a device run) to docs/PERFORMANCE.md, and stop")
    args = ap.parse_args()
    perf = os.path.join(_common.ROOT, "docs", "PERFORMANCE.md")
    if args.append:
        with open(args.append, encoding="utf-8") as f, open(perf, "a", encoding="utf-8") as p:
            p.write("\n" + f.read())
        print(f"appended {args.append} to {perf}")
        return
    tiny, quick = args.tiny, args.quick
    parts = args.parts or ("ac" if quick else "abcdefg")
    budget = args.budget or (1500 if tiny else 290 if quick else 540)
    os.makedirs(args.out, exist_ok=True)
    DEADLINE[0] = time.perf_counter() + budget
    # Bulky files (compilation cache, traces, checkpoints) go to a scratch folder,
    # not OUT: on a lent machine OUT is what comes back, and it has a size limit.
    scratch = tempfile.mkdtemp(prefix="kjax_bench_")
    if not args.no_cache:   # one cache for every child of this run
        os.environ.update(_common.cache_env(os.path.join(scratch, "jax_cache")))
    limit = {k: v[0] if tiny else v[1] if quick else v[2] for k, v in LIMITS.items()}
    if parts == "b":
        limit["b"] = budget
    sections = []

    def part(key, title):
        say(f"#### ({key}) {title}\n")
        sections.append(f"#### ({key}) {title}\n")

    def body(text):
        sections[-1] += "\n" + text + "\n"

    def log(key):
        return os.path.join(args.out, f"part_{key}.log")

    def script(key, cmd, label):
        lines, status = run([sys.executable, *cmd], limit[key], log(key))
        body("\n".join(lines) + ("" if status == "ok" else f"\n\n{label}: {status}"))
        if status != "ok":
            say(f"{label}: {status}")

    def keep(pattern, folder):
        """Copy the small results of a part from scratch into OUT/folder."""
        os.makedirs(os.path.join(args.out, folder), exist_ok=True)
        for path in glob.glob(pattern, recursive=True):
            shutil.copy(path, os.path.join(args.out, folder))

    bert = dict(preset="bert_base", seq=32 if tiny else 512, batch=2 if tiny else 32,
                dtype="float32" if tiny else "bfloat16", extra=TINY_MODEL if tiny else [],
                rounds=1 if tiny else 2, steps=1 if tiny else 5)
    say(f"accelerator benchmark: parts {parts}, budget {budget:.0f} s, out {args.out}")
    if "a" in parts:
        part("a", f"BERT-base seq {bert['seq']} batch {bert['batch']} {bert['dtype']}, kjax "
             "(preset; scan_unroll=0 + rbg) vs HF FlaxBertForPreTraining (peer.py, alternating)")
        why = peer_usable(args.peer_venv)
        if why:
            body(f"not run: {why}")
            say(f"not run: {why}")
        else:
            fast = ",".join(f"--config.{o}" for o in FAST)
            script("a", [os.path.join(HERE, "peer.py"), "--shape",
                         "uknow_small" if tiny else "bert_base", "--seq", str(bert["seq"]),
                         "--batch", str(bert["batch"]), "--dtype", bert["dtype"],
                         "--rounds", "1" if tiny else "4", "--steps", "1" if tiny else "5",
                         "--venv", args.peer_venv, "--no-record", "--kjax",
                         f"kjax preset (GPU defaults: unroll + rbg)={fast}", "--kjax",
                         f"kjax preset, attention dropout in the flash kernel={fast},"
                         "--config.model.attention_impl=flash"], "peer.py")
    if "b" in parts:
        # (a) has the preset as a GPU runs it and on the fused path: (b) has the rest
        chosen = [int(i) for i in args.b_variants.split(",") if i]
        variants = [BERT_VARIANTS[i] for i in chosen] if chosen else \
            [BERT_VARIANTS[i] for i in (0, 4)] if tiny else \
            [v for i, v in enumerate(BERT_VARIANTS) if i not in (4, 10)]
        part("b", f"kjax variants, BERT-base seq {bert['seq']} batch {bert['batch']} "
             f"{bert['dtype']} (one after another, {bert['rounds']} rounds × "
             f"{bert['steps']} steps each)")
        _, table = child("kjax", {**bert, "variants": variants}, limit["b"], log("b"),
                         [n for n, _ in variants])
        body(table + ("\n\n--tiny: two variants; the flash ones would run Pallas' interpret "
                      "mode (an emulator, no speed)." if tiny else ""))
    seq_c = 64 if tiny else 1024
    modern = dict(preset="modern_small" if tiny else "modern_base", seq=seq_c,
                  batch=2 if tiny else 16, dtype="float32" if tiny else "bfloat16",
                  # no remat, as PyTorch's side: the preset's remat is there to fit a
                  # v3 core at batch 256, not a GPU at batch 16
                  extra=(TINY_MODEL if tiny else []) + [
                      "--config.model.remat_policy=none",
                      f"--config.data.max_predictions_per_seq={round(0.3 * seq_c)}"],
                  rounds=1 if tiny else 3, steps=1 if tiny else 5)
    if "c" in parts:
        part("c", f"{modern['preset']} seq {modern['seq']} batch {modern['batch']}: kjax vs "
             "transformers ModernBertForMaskedLM (one after another)")
        mv = MODERN_VARIANTS[:1 if tiny or quick else 2]
        rows, table = child("kjax", {**modern, "variants": mv}, limit["c_kjax"], log("c_kjax"),
                            [n for n, _ in mv])
        compiles = [False] if tiny or quick else [False, True]
        trows, ttable = child("torch", {**modern, "compile": compiles}, limit["c_torch"],
                              log("c_torch"), [])
        table += "\n\n" + ttable
        if tiny:
            table += "\n\ntorch.compile not run: on CPU inductor's C++ build takes minutes."
        kj = [r for r in rows if "step_ms" in r]
        eager = [r for r in trows if "eager" in r.get("name", "") and "step_ms" in r]
        if kj and eager:
            table += (f"\n\nkjax ({kj[0]['name']}) / PyTorch eager tokens/s = "
                      f"**{kj[0]['tokens_s'] / eager[0]['tokens_s']:.2f}×** (target ≥ 1.5×).")
            say(table.rsplit("\n", 1)[-1])
        body(table)
    if "d" in parts:
        seq_d = 128 if tiny else 8192
        long = {**modern, "seq": seq_d, "batch": 1 if tiny else 2, "extra": modern["extra"][:-1]
                + [f"--config.data.max_predictions_per_seq={round(0.3 * seq_d)}"]}
        mv = MODERN_VARIANTS[:1 if tiny else 2]
        part("d", f"{long['preset']} seq {long['seq']} batch {long['batch']}")
        body(child("kjax", {**long, "variants": mv}, limit["d"], log("d"), [n for n, _ in mv])[1])
    if "e" in parts:
        part("e", "one attention layer, fwd + bwd (attention.py)")
        script("e", [os.path.join(HERE, "attention.py"), "--tables", "time", "--seqs",
                     "64" if tiny else "512,2048,8192", "--tokens", "256" if tiny else "16384",
                     "--steps", "1" if tiny else "5", "--no-record"], "attention.py")
    if "f" in parts:
        part("f", "`kjax train` of a small model: SIGTERM, SIGKILL, resume (train_resume.py)")
        script("f", [os.path.join(HERE, "train_resume.py"), "--out",
                     os.path.join(scratch, "train_resume")] + (["--tiny"] if tiny else []),
               "train_resume.py")
        keep(os.path.join(scratch, "train_resume", "kjax.log"), "train_resume")
    if "g" in parts:
        part("g", "where the preset step's time goes (profile_step.py, 3 steps traced)")
        script("g", [os.path.join(HERE, "profile_step.py"), "--config", "bert_base", "--seq",
                     str(bert["seq"]), "--batch", str(bert["batch"]), "--dtype", bert["dtype"],
                     "--steps", "3", "--top", "12" if tiny else "30",
                     "--out", os.path.join(scratch, "profile"), *bert["extra"]], "profile_step.py")
        for name in ("profile.md", "step.hlo.txt.gz", "**/*.trace.json.gz"):
            keep(os.path.join(scratch, "profile", name), "profile")
    if "m" in parts:
        part("m", "modern_base: start → first step, phase by phase (modern_compile.py)")
        script("m", [os.path.join(HERE, "modern_compile.py"), "--out",
                     os.path.join(args.out, "modern_compile"), "--scratch",
                     os.path.join(scratch, "modern_compile"), "--budget",
                     str(limit["m"] - 10)] + (["--tiny"] if tiny else []), "modern_compile.py")
    import jax
    head = (f"### accelerator (issues 24, 33{', --tiny: a check of the script, no speed' if tiny else ''}"
            f"{', --quick' if quick else ''}) — {datetime.date.today().isoformat()} — "
            f"{_common.machine()}; commit {_git_commit()}\n\n")
    text = head + "\n".join(sections)
    with open(os.path.join(args.out, "accelerator.md"), "w", encoding="utf-8") as f:
        f.write(text)
    if not args.no_record:
        with open(perf, "a", encoding="utf-8") as f:
            f.write("\n" + text)
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"wrote {os.path.join(args.out, 'accelerator.md')} ({jax.default_backend()})")


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", _common.ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or "n/a"
    except (OSError, subprocess.SubprocessError):
        return "n/a"


if __name__ == "__main__":
    main()
