"""`kjax train` end to end on this machine's accelerator: a small model on
a generated Korean-syllable corpus (no corpus package needed on a bare GPU
image), tokenizer → prepare → one uninterrupted run, and one run that is
stopped twice, by SIGTERM (kjax's preemption path: checkpoint, exit 143)
and by SIGKILL (nothing saved: the latest periodic checkpoint is resumed),
and restarted each time. Prints one row per run the moment it ends and a
final row: whether the interrupted run ends at the same step with the same
logged losses as the uninterrupted one (equal, or the largest difference).

    python benchmarks/system/train_resume.py --out runs/train_resume    # GPU sizes
    JAX_PLATFORMS=cpu python benchmarks/system/train_resume.py --tiny    # CPU check
    python benchmarks/system/train_resume.py --signals KILL              # SIGKILL leg only

One record per run (benchmarks/results/train_resume.jsonl; --tiny: none).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import records  # noqa: E402


def write_corpus(path: str, sentences: int) -> None:
    """Deterministic Korean-looking text: words of 1-3 Hangul syllables from a
    small alphabet (so the vocabulary has real merges), documents of 8
    sentences, a blank line between them (BERT's corpus format)."""
    import numpy as np
    rng = np.random.default_rng(0)
    syllables = [chr(0xAC00 + i * 97) for i in range(60)]
    with open(path, "w", encoding="utf-8") as f:
        for i in range(sentences):
            words = [''.join(rng.choice(syllables, rng.integers(1, 4)))
                     for _ in range(rng.integers(5, 14))]
            f.write(" ".join(words) + ".\n" + ("\n" if i % 8 == 7 else ""))


def overrides(work: str, tiny: bool, steps: int, every: int) -> list[str]:
    corpus = os.path.join(work, "corpus.txt")
    values = {"model.vocab_size": 800, "tokenizer.vocab_size": 800,
              "model.hidden_size": 32 if tiny else 256, "model.num_layers": 2,
              "model.num_heads": 4, "model.intermediate_size": 64 if tiny else 1024,
              "model.max_position_embeddings": 64 if tiny else 128,
              "model.dtype": "float32" if tiny else "bfloat16",
              "tokenizer.path": f"{work}/tok/sp", "tokenizer.corpus": corpus,
              "tokenizer.model_type": "unigram", "data.corpus": corpus,
              "data.dir": f"{work}/examples", "data.document_per_file": False,
              "data.max_seq_len": 64 if tiny else 128,
              "data.max_predictions_per_seq": 10 if tiny else 20,
              "train.batch_size": 8 if tiny else 32, "train.num_steps": steps,
              "train.warmup_steps": 2, "train.log_every": 1, "train.eval_every": 0,
              "train.checkpoint_every": every, "train.learning_rate": 1e-3}
    return ["--config", os.path.join(harness.ROOT, "tpu_configs", "demo.py")] + \
        [f"--config.{k}={v}" for k, v in values.items()]


def kjax(args: list[str], log: str, env: dict) -> subprocess.Popen:
    out = open(log, "a", encoding="utf-8")
    return subprocess.Popen([sys.executable, "-m", "kjax.cli", *args], stdout=out,
                            stderr=subprocess.STDOUT, cwd=harness.ROOT, env=env,
                            start_new_session=True)


def train_rows(workdir: str) -> dict[int, dict]:
    """Logged train rows by step, without the timing columns."""
    path = os.path.join(workdir, "metrics.jsonl")
    rows = {}
    if os.path.isfile(path):
        for line in open(path, encoding="utf-8"):
            r = json.loads(line)
            if r.get("split") == "train":
                rows[r["step"]] = {k: v for k, v in r.items() if k.endswith("loss")}
    return rows


def run(args, say) -> str:
    work = os.path.abspath(args.out)
    os.makedirs(work, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (harness.ROOT, os.environ.get("PYTHONPATH", "")) if p)}
    # a GPU runs this model's step in milliseconds: enough steps that the
    # signals land mid-run (polled every 50 ms)
    steps, every, kills = (12, 4, (3, 9)) if args.tiny else (300, 100, (100, 220))
    cfg = overrides(work, args.tiny, steps, every)
    log = os.path.join(work, "kjax.log")
    write_corpus(os.path.join(work, "corpus.txt"), 2000 if args.tiny else 6000)
    t = time.perf_counter()
    def tail() -> str:   # why a step failed, in the output a lent machine shows
        with open(log, encoding="utf-8", errors="replace") as f:
            return " / ".join(x.strip() for x in f.read().splitlines()[-4:])

    for verb in (["tokenizer", "train"], ["prepare"]):
        if kjax([*verb, *cfg], log, env).wait():
            say(f"`kjax {' '.join(verb)}` failed: {tail()}")
            return f"`kjax {' '.join(verb)}` failed: {tail()}"
    say(f"tokenizer + prepare: {time.perf_counter() - t:.1f} s")
    lines = ["| run | exit | seconds | last step logged |", "|---|---|---|---|"]
    found = []

    def finish(name, key, proc, t0):
        rc = proc.wait()
        done = max(train_rows(runs[key]) or [0])
        lines.append(f"| {name} | {rc} | {time.perf_counter() - t0:.1f} | {done} |")
        found.append({"row": name, "figures": {"exit": rc, "last_step": done,
                                               "seconds": round(time.perf_counter() - t0, 1)}})
        say(lines[-1])
        if rc not in (0, 143, -9):
            say(f"  exit {rc}: {tail()}")
        return rc

    runs = {"straight": os.path.join(work, "straight"), "resumed": os.path.join(work, "resumed")}
    t0 = time.perf_counter()
    finish("straight", "straight", kjax(["train", *cfg, "--workdir", runs["straight"]], log, env), t0)
    legs = [(sig, at) for sig, at in zip((signal.SIGTERM, signal.SIGKILL), kills)
            if sig.name[3:] in args.signals.split(",")]
    for sig, at in legs:
        t0 = time.perf_counter()
        proc = kjax(["train", *cfg, "--workdir", runs["resumed"]], log, env)
        while proc.poll() is None and max(train_rows(runs["resumed"]) or [0]) < at:
            time.sleep(0.05)
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
        finish(f"resumed, {signal.Signals(sig).name} at step ≥ {at}", "resumed", proc, t0)
    t0 = time.perf_counter()
    finish("resumed, to the end", "resumed", kjax(["train", *cfg, "--workdir", runs["resumed"]], log, env), t0)
    a, b = train_rows(runs["straight"]), train_rows(runs["resumed"])
    common = sorted(set(a) & set(b))
    diffs = [abs(a[s][k] - b[s][k]) for s in common for k in a[s] if k in b[s]]
    same = bool(diffs) and max(diffs) == 0
    lines.append(f"\nStraight run's last step {max(a or [0])}, resumed run's {max(b or [0])} "
                 f"(of {steps}); logged losses at {len(common)} common steps: "
                 + ("**identical**." if same else
                    f"largest difference {max(diffs or [float('nan')]):.3g}."))
    say(lines[-1].strip())
    found.append({"row": "resumed against straight", "figures": {
        "identical_losses": same, "common_steps": len(common),
        "largest_difference": max(diffs) if diffs else None}})
    records.save(args, "train_resume", found, notes=f"{steps} steps, checkpoint every {every}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="CPU sizes")
    ap.add_argument("--out", default=os.path.join(harness.ROOT, "runs", "train_resume"))
    ap.add_argument("--signals", default="TERM,KILL", help="which stops the resumed run "
                    "gets, in this order: TERM (kjax's preemption path), KILL (nothing saved)")
    records.add_arguments(ap)
    args = ap.parse_args()
    args.no_record |= args.tiny   # a check of the script, not a result
    if not args.signals or set(args.signals.split(",")) - {"TERM", "KILL"}:
        ap.error(f"--signals {args.signals!r}: give TERM, KILL or TERM,KILL")
    run(args, lambda s: print(s, flush=True))


if __name__ == "__main__":
    main()
