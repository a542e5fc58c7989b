"""The step, peer and kernel benchmarks of a GPU in one command, sized so the
whole set takes minutes (a BERT-base program compiles in 20-45 s on an H200).
Each part runs in child processes under its own limit, and every row is
printed the moment it is measured: a part cut off keeps what it printed and
says where it was. One persistent compilation cache per run (in a scratch
folder under /tmp, shared by every child): a program that one part compiled
is read back by the next (column "cache").

    (a) BERT-base seq 512 batch 32 bf16: kjax's preset as a GPU runs it (the
        flash kernel: attention dropout inside) and on the explicit path against
        HF FlaxBertForPreTraining
        (transformers 4.57), alternating (step/peer.py);
    (b) more kjax variants of that step (attention path, dropout, scan, shaking);
    (c) modern_base seq 1024 batch 16: kjax against transformers 5's PyTorch
        ModernBertForMaskedLM, eager (+ torch.compile in the full set);
    (d) modern_base at seq 8192;
    (e) one attention layer, fwd + bwd, to seq 8192 (kernels/attention.py);
    (f) `kjax train` of a small model: SIGTERM, SIGKILL, resume (system/train_resume.py);
    (g) where the preset step's time goes: per-kernel profile (step/profile_step.py);
    (m) modern_base's start → first step, phase by phase, per compile variant
        (step/modern_compile.py; not in the full set: a run of its own);
    (p) the attention-dropout paths, one layer at seq 512: explicit, flash and
        cuDNN's own fused dropout, each in a child process (kernels/dropout_paths.py);
    (k) BERT-base seq 512 batch 32: the step whole (k = 1) against 4
        microbatches, alternating (step/accumulation.py).

`--settle` runs the call that settles the attention questions instead
(benchmarks/gpu/settle.py; ≤ 9 min): (s) six BERT-base step rows taking
turns and the verdict for GPU_FLASH_FASTER, (t) the attention grid at
16,384 tokens with the flash tiles' alternates and Mosaic, (f) with the
SIGKILL leg alone, (m) with the default alone.

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

    python benchmarks/gpu/suite.py --quick --peer-venv runs/peer_venv
    python benchmarks/gpu/suite.py                    # the full set
    python benchmarks/gpu/suite.py --parts b --b-variants gpu-defaults,flash-dropout
    python benchmarks/gpu/suite.py --settle           # the attention questions, ≤ 9 min
    JAX_PLATFORMS=cpu python benchmarks/gpu/suite.py --tiny   # CPU check of the script

Each kjax variant line gives compile and first-step time, ms/step (median
of rounds), tokens/s, MFU and XLA's peak bytes. A part whose peer is missing
says "not run: why". Every row becomes a record in --results (default
benchmarks/results: peer.jsonl, gpu_suite.jsonl, attention.jsonl, ...; --tiny
and --no-record write none); the whole run's tables go to OUT/gpu_suite.md.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import records  # noqa: E402
from harness.proc import cache_env  # noqa: E402
from parts import (BENCHMARKS, DEADLINE, GPU_DEFAULTS, MODERN_VARIANTS, child,  # noqa: E402
                   peer_usable, pick, run, say)
import settle  # noqa: E402

# seconds per part: (--tiny on CPU, --quick, full)
LIMITS = {"a": (300, 150, 130), "b": (300, 0, 90), "c_kjax": (200, 75, 90),
          "c_torch": (200, 50, 60), "d": (200, 0, 40), "e": (200, 0, 40),
          "f": (400, 0, 60), "g": (200, 0, 50), "m": (600, 420, 420), "p": (300, 80, 90),
          "k": (300, 70, 80)}
FIGURES = ("ms", "tokens_per_s", "mfu", "compile_s", "first_step_s", "peak_gib", "cache",
           "first_loss")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="CPU sizes: checks the script, no speed")
    ap.add_argument("--quick", action="store_true",
                    help="(a) and (c) only, PyTorch eager only: ≤ 5 minutes on a GPU")
    ap.add_argument("--parts", default=None, help="default abcdefg (--quick: ac; --settle: "
                    "stfm); m: the start → first step probe")
    ap.add_argument("--settle", action="store_true", help="the call that settles the "
                    "attention questions (settle.py): parts s, t, f (the SIGKILL leg alone), m "
                    "(the default alone); ≤ 9 minutes on a GPU")
    ap.add_argument("--tiles", action="append", default=None, metavar="LABEL=F/DQ/DKV",
                    help="--settle part t: the flash tilings timed beside the tuned ones "
                    "(default: the table's and flash_tiles.CANDIDATES)")
    ap.add_argument("--b-variants", default="", help="part (b): comma-separated keys (or "
                    "indices) of parts.BERT_VARIANTS (default: those (a) lacks); with "
                    "--parts b alone, part (b) gets the whole budget")
    ap.add_argument("--peer-venv", default=os.environ.get("KJAX_PEER_VENV"))
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(harness.ROOT, "runs",
                                                                          "gpu_suite"))
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds for all parts together (default 290 --quick, 540 full "
                    "and --settle, 1500 --tiny; each part also has its own limit)")
    ap.add_argument("--no-cache", action="store_true", help="no persistent compilation cache")
    records.add_arguments(ap)
    args = ap.parse_args()
    tiny, quick = args.tiny, args.quick
    if args.settle and quick:
        ap.error("--settle and --quick are two different calls: give one")
    args.no_record |= tiny   # a check of the script, not a result
    keep_records = ["--no-record"] if args.no_record else ["--results", args.results]
    parts = args.parts or ("stfm" if args.settle else "ac" if quick else "abcdefg")
    budget = args.budget or (1500 if tiny else 290 if quick else 540)
    os.makedirs(args.out, exist_ok=True)
    DEADLINE[0] = time.perf_counter() + budget
    # Bulky files (compilation cache, traces, checkpoints) go to a scratch folder,
    # not OUT, which keeps only what a reader needs.
    scratch = tempfile.mkdtemp(prefix="kjax_bench_")
    if not args.no_cache:   # one cache for every child of this run
        os.environ.update(cache_env(os.path.join(scratch, "jax_cache")))
    limit = {k: v[0] if tiny else v[1] if quick else v[2] for k, v in LIMITS.items()}
    if args.settle:
        limit.update({k: v[0 if tiny else 1] for k, v in settle.LIMITS.items()})
    if parts == "b":
        limit["b"] = budget
    sections = []
    load_before = harness.load_average()

    def part(key, title):
        say(f"#### ({key}) {title}\n")
        sections.append(f"#### ({key}) {title}\n")

    def body(text):
        sections[-1] += "\n" + text + "\n"

    def log(key):
        return os.path.join(args.out, f"part_{key}.log")

    def script(key, cmd, label):
        lines, status = run([sys.executable, os.path.join(BENCHMARKS, cmd[0]), *cmd[1:]],
                            limit[key], log(key))
        body("\n".join(lines) + ("" if status == "ok" else f"\n\n{label}: {status}"))
        if status != "ok":
            say(f"{label}: {status}")

    def keep(pattern, folder):
        """Copy the small results of a part from scratch into OUT/folder."""
        os.makedirs(os.path.join(args.out, folder), exist_ok=True)
        for path in glob.glob(pattern, recursive=True):
            shutil.copy(path, os.path.join(args.out, folder))

    def save(key, spec, rows):
        records.save(args, "gpu_suite", [
            {"row": r["name"], "part": key, "overrides": r.get("overrides", []),
             "figures": {k: r[k] for k in FIGURES if r.get(k) is not None},
             **({"peer_versions": r["versions"]} if "versions" in r else {})} for r in rows],
            load_before=load_before, preset=spec["preset"],
            shape={"seq": spec["seq"], "batch": spec["batch"], "dtype": spec["dtype"]})

    extra = harness.TINY_MODEL if tiny else []
    bert = dict(preset="bert_base", seq=32 if tiny else 512, batch=2 if tiny else 32,
                dtype="float32" if tiny else "bfloat16", extra=extra,
                rounds=1 if tiny else 2, steps=1 if tiny else 5)
    say(f"GPU suite: parts {parts}, budget {budget:.0f} s, out {args.out}")
    if args.settle:
        say(settle.plan(tiny))
        ctx = argparse.Namespace(args=args, tiny=tiny, bert=bert, limit=limit, log=log,
                                 part=part, body=body, keep_records=keep_records,
                                 load_before=load_before)
        for key, step in (("s", settle.steps), ("t", settle.attention)):
            if key in parts:
                step(ctx)
    if "a" in parts:
        part("a", f"BERT-base seq {bert['seq']} batch {bert['batch']} {bert['dtype']}, kjax "
             "(the preset with each attention path pinned: flash, explicit) vs HF "
             "FlaxBertForPreTraining "
             "(step/peer.py, alternating)")
        why = peer_usable(args.peer_venv)
        if why:
            body(f"not run: {why}")
            say(f"not run: {why}")
        else:
            fast = ",".join(f"--config.{o}" for o in GPU_DEFAULTS)
            script("a", ["step/peer.py", "--shape", "uknow_small" if tiny else "bert_base",
                         "--seq", str(bert["seq"]), "--batch", str(bert["batch"]),
                         "--dtype", bert["dtype"], "--rounds", "1" if tiny else "4",
                         "--steps", "1" if tiny else "5", "--venv", args.peer_venv,
                         *keep_records, "--kjax",
                         f"kjax preset, attention dropout in the flash kernel={fast},"
                         "--config.model.attention_impl=flash", "--kjax",
                         f"kjax preset, explicit attention={fast},"
                         "--config.model.attention_impl=xla"], "peer.py")
    if "b" in parts:
        variants = pick(args.b_variants, tiny)
        part("b", f"kjax variants, BERT-base seq {bert['seq']} batch {bert['batch']} "
             f"{bert['dtype']} (one after another, {bert['rounds']} rounds × "
             f"{bert['steps']} steps each)")
        rows, table = child("kjax", {**bert, "variants": variants}, limit["b"], log("b"),
                            [n for n, _ in variants])
        save("b", bert, rows)
        body(table + ("\n\n--tiny: two variants; the flash ones would run Pallas' interpret "
                      "mode (an emulator, no speed)." if tiny else ""))
    seq_c = 64 if tiny else 1024
    modern = dict(preset="modern_small" if tiny else "modern_base", seq=seq_c,
                  batch=2 if tiny else 16, dtype="float32" if tiny else "bfloat16",
                  # no remat, as PyTorch's side: the preset's remat is there to fit a
                  # v3 core at batch 256, not a GPU at batch 16
                  extra=extra + ["--config.model.remat_policy=none",
                                 f"--config.data.max_predictions_per_seq={round(0.3 * seq_c)}"],
                  rounds=1 if tiny else 3, steps=1 if tiny else 5)
    if "c" in parts:
        part("c", f"{modern['preset']} seq {modern['seq']} batch {modern['batch']}: kjax vs "
             "transformers ModernBertForMaskedLM (one after another)")
        mv = MODERN_VARIANTS[:1 if tiny or quick else 3]
        rows, table = child("kjax", {**modern, "variants": mv}, limit["c_kjax"], log("c_kjax"),
                            [n for n, _ in mv])
        compiles = [False] if tiny or quick else [False, True]
        trows, ttable = child("torch", {**modern, "compile": compiles}, limit["c_torch"],
                              log("c_torch"), [])
        save("c", modern, rows + trows)
        table += "\n\n" + ttable
        if tiny:
            table += "\n\ntorch.compile not run: on CPU inductor's C++ build takes minutes."
        eager = [r for r in trows if "eager" in r.get("name", "")]
        if rows and eager:
            table += (f"\n\nkjax ({rows[0]['name']}) / PyTorch eager tokens/s = "
                      f"**{rows[0]['tokens_per_s'] / eager[0]['tokens_per_s']:.2f}×**.")
            say(table.rsplit("\n", 1)[-1])
        body(table)
    if "d" in parts:
        seq_d = 128 if tiny else 8192
        long = {**modern, "seq": seq_d, "batch": 1 if tiny else 2, "extra": modern["extra"][:-1]
                + [f"--config.data.max_predictions_per_seq={round(0.3 * seq_d)}"]}
        mv = MODERN_VARIANTS[:1 if tiny else 2]
        part("d", f"{long['preset']} seq {long['seq']} batch {long['batch']}")
        rows, table = child("kjax", {**long, "variants": mv}, limit["d"], log("d"),
                            [n for n, _ in mv])
        save("d", long, rows)
        body(table)
    if "e" in parts:
        part("e", "one attention layer, fwd + bwd (kernels/attention.py)")
        script("e", ["kernels/attention.py", "--tables", "time", "--seqs",
                     "64" if tiny else "512,2048,8192", "--tokens", "256" if tiny else "16384",
                     "--steps", "1" if tiny else "5", *keep_records], "attention.py")
    if "f" in parts:
        signals = "KILL" if args.settle else "TERM,KILL"   # --settle: the leg not yet measured
        part("f", f"`kjax train` of a small model: {signals.replace(',', ', ')}, resume "
             "(system/train_resume.py)")
        script("f", ["system/train_resume.py", "--out", os.path.join(scratch, "train_resume"),
                     "--signals", signals, *keep_records] + (["--tiny"] if tiny else []),
               "train_resume.py")
        keep(os.path.join(scratch, "train_resume", "kjax.log"), "train_resume")
    if "g" in parts:
        part("g", "where the preset step's time goes (step/profile_step.py, 3 steps traced)")
        script("g", ["step/profile_step.py", "--config", "bert_base", "--seq", str(bert["seq"]),
                     "--batch", str(bert["batch"]), "--dtype", bert["dtype"], "--steps", "3",
                     "--top", "12" if tiny else "30", "--out", os.path.join(scratch, "profile"),
                     *keep_records, *bert["extra"]], "profile_step.py")
        for name in ("profile.md", "step.hlo.txt.gz", "**/*.trace.json.gz"):
            keep(os.path.join(scratch, "profile", name), "profile")
    if "p" in parts:
        part("p", "the attention-dropout paths, one layer fwd + bwd (kernels/dropout_paths.py)")
        script("p", ["kernels/dropout_paths.py", "--seqs", "512", "--steps", "10",
                     *(["--tiny"] if tiny else []), *keep_records], "dropout_paths.py")
    if "k" in parts:
        part("k", f"BERT-base seq {bert['seq']} batch {bert['batch']}: k = 1 against {2 if tiny else 4} "
             "microbatches, alternating (step/accumulation.py)")
        script("k", ["step/accumulation.py", "--preset", bert["preset"], "--seq",
                     str(bert["seq"]), "--batch", str(bert["batch"]), "--dtype", bert["dtype"],
                     "--k", "1,2" if tiny else "1,4", "--rounds", "2" if tiny else "6",
                     "--steps", "1" if tiny else "3", *keep_records, *bert["extra"]],
               "accumulation.py")
    if "m" in parts:
        part("m", "modern_base: start → first step, phase by phase (step/modern_compile.py)")
        script("m", ["step/modern_compile.py", "--out", os.path.join(args.out, "modern_compile"),
                     "--scratch", os.path.join(scratch, "modern_compile"), "--budget",
                     str(limit["m"] - 10), *keep_records] + (["--tiny"] if tiny else [])
               # --settle: the default alone, its start → first step in one process
               + (["--variants", "1"] if args.settle else []), "modern_compile.py")
    import jax
    commit, dirty = records.git_state()
    d = jax.devices()
    head = (f"### GPU suite{' (--tiny: a check of the script, no speed)' if tiny else ''}"
            f"{' (--quick)' if quick else ''}{' (--settle)' if args.settle else ''} — "
            f"{datetime.date.today().isoformat()} — "
            f"{len(d)}× {d[0].device_kind}, jax {jax.__version__}; commit {commit or 'n/a'}"
            f"{' with uncommitted changes' if dirty else ''}\n\n")
    text = head + "\n".join(sections)
    with open(os.path.join(args.out, "gpu_suite.md"), "w", encoding="utf-8") as f:
        f.write(text)
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"wrote {os.path.join(args.out, 'gpu_suite.md')} ({jax.default_backend()})")


if __name__ == "__main__":
    main()
