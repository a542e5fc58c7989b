"""`kjax finetune` and SIGTERM: the run saves the step it was signalled in,
exits 143 with one line, and the same command finishes it with the dev
scores of an uninterrupted run; between the runs of an experiment it stops
before starting the next one."""
import json
import os
import signal
import sys

import pytest

import waiting
from conftest import DEMO_CONFIG, ROOT, tiny_config, tiny_overrides
from kjax.config import ConfigDict
from kjax.pretrain.trainer import PREEMPTED_EXIT

# Runs `kjax finetune` (argv[4:]) and holds run seed argv[1] before its step
# argv[2] until the test's SIGTERM has been handled, after touching argv[3]:
# the signal lands at a known step, whatever the machine's speed.
DRIVER = r"""
import os, signal, sys, time
import kjax.finetune.trainer as trainer
from kjax.cli import main

seed_at, step_at, cue = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
real = trainer.FineTuner.train_batch

def train_batch(self, seed, step, bf):
    if (seed, step) == (seed_at, step_at):
        stop = signal.getsignal(signal.SIGTERM).__self__   # the experiment's StopSignal
        open(cue, "w").close()
        deadline = time.monotonic() + 300
        while not stop.received:   # the event: the test's signal handled
            if time.monotonic() > deadline:
                sys.exit(f"driver: no SIGTERM handled within 300 s of {cue}")
            time.sleep(0.01)
    return real(self, seed, step, bf)

trainer.FineTuner.train_batch = train_batch
sys.exit(main(sys.argv[4:]))
"""


def rows(seed, n):
    import numpy as np
    rng, keys, filler = np.random.default_rng(seed), ["국민", "정부"], ["그리고", "이", "법", "의"]
    out = []
    for _ in range(n):
        y = int(rng.integers(2))
        words = list(rng.choice(filler, 5)) + [keys[y]] * 3
        out.append({"text": " ".join(rng.permutation(words)), "label": "ab"[y]})
    return out


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from kjax.tokens.factory import train_tokenizer
    tmp = tmp_path_factory.mktemp("ft_preempt")
    train_tokenizer(tiny_config(tmp))
    files = []
    for name, seed, n in (("train", 0, 64), ("dev", 1, 32)):
        path = tmp / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows(seed, n)),
                        encoding="utf-8")
        files.append(str(path))
    return tmp, files


def command(tmp, files, out):
    """Two seeds of 12 steps each (4 per epoch), dev evaluated every epoch."""
    return ["finetune", "--config", DEMO_CONFIG, *tiny_overrides(str(tmp)), "--task", "classify",
            "--train", files[0], "--dev", files[1], "--init", "none", "--out", out,
            "--seeds", "1,2", "--config.finetune.epochs=3", "--config.finetune.batch_size=16",
            "--config.finetune.max_seq_len=32", "--config.finetune.patience=0",
            "--config.finetune.learning_rate=1e-2", "--config.finetune.checkpoint_every=1000"]


def dev_scores(out):
    scores = {}
    for seed in (1, 2):
        with open(os.path.join(out, f"seed{seed}", "metrics.json")) as f:
            result = json.load(f)
        scores[seed] = {k: (e["best_step"], e["dev"]) for k, e in result["results"].items()}
    return scores


@pytest.mark.slow   # three CLI processes, each compiling its steps: about a minute and a half
def test_sigterm_saves_the_step_and_the_same_command_finishes_exactly(env, tmp_path):
    tmp, files = env
    # One device: resuming does not depend on the mesh, and a loaded machine can stall
    # the fake devices' all-reduce.
    environ = {**os.environ, "JAX_NUM_CPU_DEVICES": "1", "JAX_PLATFORMS": "cpu"}
    straight, out = str(tmp_path / "straight"), str(tmp_path / "preempted")
    cue = str(tmp_path / "cue")
    kjax = [sys.executable, "-m", "kjax.cli"]
    reference = waiting.start([*kjax, *command(tmp, files, straight)], "kjax finetune (straight)",
                              str(tmp_path / "straight.log"), cwd=ROOT, env=environ)
    # Seed 2, step 6: seed 1 is finished, and seed 2 is between two dev evaluations.
    proc = waiting.start([sys.executable, "-c", DRIVER, "2", "6", cue,
                          *command(tmp, files, out)], "kjax finetune (signalled)",
                         str(tmp_path / "signalled.log"), cwd=ROOT, env=environ)
    try:
        waiting.wait_for("step 6 of seed 2", lambda: os.path.exists(cue), timeout=600,
                         procs=[proc])
        proc.process.send_signal(signal.SIGTERM)
        code = waiting.finish(proc, 300)
        assert waiting.finish(reference, 600) == 0, reference.tail()
    finally:
        proc.stop()
        reference.stop()
    with open(proc.log) as f:
        lines = [line for line in f.read().splitlines() if line.startswith("kjax:")]
    assert code == PREEMPTED_EXIT, proc.tail()
    assert lines == [f"kjax: fine-tuning {out}/seed2: stopped by a preemption signal after "
                     f"saving step 6; run the same command to resume"]
    assert waiting.committed(os.path.join(out, "seed2", "checkpoints")) == [6]
    assert not os.path.exists(os.path.join(out, "seed2", "metrics.json"))
    assert not os.path.exists(os.path.join(out, "summary.json"))

    done = waiting.run([*kjax, *command(tmp, files, out)], 600, "kjax finetune (resumed)",
                       cwd=ROOT, env=environ)
    assert done.returncode == 0, done.stderr[-2000:]
    with open(os.path.join(out, "seed2", "metrics.json")) as f:
        resumed = json.load(f)
    assert resumed["resumed_from_step"] == 6 and resumed["steps"] == 12
    assert dev_scores(out) == dev_scores(straight)
    with open(os.path.join(out, "summary.json")) as a, \
            open(os.path.join(straight, "summary.json")) as b:
        assert json.load(a)["rows"] == json.load(b)["rows"]


def test_a_signal_between_runs_stops_before_the_next(monkeypatch, tmp_path):
    """SIGTERM during a run's final evaluation: that run finishes, the next one
    does not start, and the previous SIGTERM handler is back."""
    import kjax.finetune.experiment as experiment
    started = []

    def run_one(tuner, seed, bf_train, infers, run_dir, progress, stop_at, stop):
        started.append(seed)
        os.kill(os.getpid(), signal.SIGTERM)   # handled by run_all's StopSignal
        return {"steps": 12, "results": {}}

    monkeypatch.setattr(experiment, "run_one", run_one)
    ft = ConfigDict({"shake": {"bf_train": 0.0, "bf_infer": 0.0}})
    before = signal.getsignal(signal.SIGTERM)
    result = experiment.run_all(ConfigDict({"ft": ft}), str(tmp_path), [1, 2], False)
    assert started == [1] and signal.getsignal(signal.SIGTERM) == before
    assert result["preempted"] and result["exit_code"] == PREEMPTED_EXIT
    assert result["message"] == (f"fine-tuning {tmp_path}/seed1: stopped by a preemption signal "
                                 f"after saving step 12; run the same command to resume")
