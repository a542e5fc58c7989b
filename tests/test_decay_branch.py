"""Decay branches (init.mode=continue, `kjax train --decay-from`,
kjax/pretrain/branch.py): a branch of a stable checkpoint continues its
parent's step counter, optimizer, data position and schedule, its first
learning rate the parent's entering the decay and its first batch the
parent's next; two branches of one parent are independent, each the run its
own config trains from step 0; lineage; a phase that keeps the optimizer runs
its own schedule; the one-line refusals; and a kill -9 of a branch of a run
with a mixture, a mask schedule, a batch ramp and an EMA at once."""
import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from conftest import DEMO_CONFIG, ROOT, tiny_config, tiny_overrides
from kjax.batches.loader import train_dataset
from kjax.errors import KjaxError
from kjax.pretrain.trainer import train
from kjax.train.metrics import read_metrics
from test_train import final_params, metrics_without_timing

# the parent: wsd over 12 steps, its decay the last 3 (steps 10-12); checkpoints 3..12
STABLE = {"train.schedule": "wsd", "train.num_steps": 12, "train.decay_steps": 3,
          "train.warmup_steps": 2, "train.checkpoint_every": 3, "train.keep_checkpoints": 5}


def branch_of(prepared, parent, step, num_steps, **extra):
    return tiny_config(prepared, **{**STABLE, "train.num_steps": num_steps,
                                    "train.decay_steps": 0, "init.mode": "continue",
                                    "init.from_run": f"{parent}/checkpoints/{step}", **extra})


@pytest.fixture(scope="module")
def parent(prepared, tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("stable") / "run")
    train(tiny_config(prepared, **STABLE), workdir, progress=False)
    return workdir


def snapshot(folder):
    """Every file under `folder` with its bytes (what a branch must leave alone)."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = f.read()
    return out


def rows_of(workdir):
    return {r["step"]: r for r in read_metrics(workdir) if r["split"] == "train"}


def assert_same_run(config, a, b, steps):
    """Runs `a` and `b` end in the same state and data state and log `steps` alike."""
    (sa, da), (sb, db) = final_params(config, a), final_params(config, b)
    assert da == db and int(sa["step"]) == int(sb["step"])
    for x, y in zip(jax.tree.leaves(sa), jax.tree.leaves(sb)):
        assert np.array_equal(x, y)
    ra, rb = metrics_without_timing(a), metrics_without_timing(b)
    for step in steps:
        assert ra[(step, "train")] == rb[(step, "train")], step


@pytest.mark.slow

def straight_then_killed(argv, straight, killed, step):
    """`kjax train ARGV` run whole into STRAIGHT; into KILLED, killed with
    SIGKILL while it saves STEP (never committed), then run again."""
    from kjax.cli import main
    assert main([*argv, "--workdir", straight]) == 0
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "8"}
    died = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "die_during_save.py"),
                           str(step), *argv, "--workdir", killed], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert died.returncode == -9, died.stderr[-2000:]
    assert str(step) not in os.listdir(os.path.join(killed, "checkpoints"))
    assert main([*argv, "--workdir", killed]) == 0

def test_two_branches_of_one_parent_each_equal_their_own_run(prepared, parent, tmp_path):
    """Branches of the stable checkpoints 6 (3 decay steps; `kjax train
    --decay-from` without --config: the parent's recorded config) and 3 (4):
    each ends bit-identical to its config trained from step 0 (state, data
    state, logged rows), its first learning rate is the parent's entering the
    decay (the peak), it continues the parent's step counter; the parent is
    left as it was, and lineage.json names parent, step and fingerprint."""
    from kjax.cli import main
    from kjax.checkpoint import fingerprint
    from kjax.pretrain.phases import describe
    from kjax.train.schedules import learning_rate_schedule
    before = snapshot(parent)
    for step, end in ((6, 9), (3, 7)):
        config = branch_of(prepared, parent, step, end)
        workdir, alone = str(tmp_path / f"branch{step}"), str(tmp_path / f"alone{step}")
        if step == 6:
            assert main(["train", "--workdir", workdir, "--decay-from",
                         f"{parent}/checkpoints/6", f"--config.train.num_steps={end}",
                         "--config.train.decay_steps=0"]) == 0
        else:
            train(config, workdir, progress=False)
        own = tiny_config(prepared, **{**STABLE, "train.num_steps": end,
                                       "train.decay_steps": end - step})
        train(own, alone, progress=False)
        assert_same_run(own, workdir, alone, range(step + 1, end + 1))
        rows = rows_of(workdir)
        assert sorted(rows) == list(range(step + 1, end + 1))   # the parent's counter, on
        entering = float(learning_rate_schedule(tiny_config(prepared, **STABLE).train)(step))
        assert rows[step + 1]["learning_rate"] == entering == float(np.float32(1e-3))
        assert rows[end]["learning_rate"] < rows[step + 1]["learning_rate"]
        lineage = json.load(open(os.path.join(workdir, "lineage.json")))
        pstate, pdata = restored(config, parent, step)
        assert lineage["parent"] == parent and lineage["parent_step"] == step
        assert lineage["parent_checkpoint"] == os.path.join(parent, "checkpoints", str(step))
        assert lineage["parent_fingerprint"] == fingerprint.digest(pstate)
        assert lineage["init"]["mode"] == "continue"
        assert lineage["continued"]["position"] == pdata["position"] == 16 * step
        assert describe(lineage) == f"from {parent} at step {step}, continuing its run " \
                                    f"(a decay branch)"
        recorded = open(os.path.join(workdir, "kjax_config.py")).read()
        assert f"'decay_steps': {end - step}" in recorded   # resolved and recorded
    assert snapshot(parent) == before


def restored(config, workdir, step):
    from kjax.checkpoint.manager import Checkpointer
    from kjax.parallel.mesh import make_mesh
    from kjax.train.state import abstract_state, make_model, make_optimizer
    target, _ = abstract_state(config, make_mesh(config), make_model(config, False),
                               make_optimizer(config.train))
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), 1, 5, read_only=True)
    state, data = ckpt.restore(step, target)
    ckpt.abandon()
    return state, data


def test_a_branchs_first_batch_is_the_parents_next(prepared, parent):
    """The same stream: the parent's data state as it is; another mix (an
    anneal): a new mixing at the parent's position, each source from where
    it stood."""
    from kjax.pretrain.branch import continued_stream
    pconfig = tiny_config(prepared, **STABLE)
    _, pdata = restored(pconfig, parent, 6)
    config = branch_of(prepared, parent, 6, 9)
    data = continued_stream(pconfig, config, dict(pdata), parent)
    assert data == pdata
    theirs, mine = iter(train_dataset(pconfig)), iter(train_dataset(config))
    theirs.set_state(pdata)
    mine.set_state(data)
    a, b = next(theirs), next(mine)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def mix(prepared, web, news):
    folder = os.path.join(str(prepared), "examples")
    return {"data.sources": {"web": {"dir": folder, "weight": web},
                             "news": {"dir": folder, "weight": news}}}


def test_an_anneal_on_another_mix_continues_each_source(prepared):
    from kjax.pretrain.branch import continued_stream
    pconfig = tiny_config(prepared, **mix(prepared, 0.7, 0.3))
    config = tiny_config(prepared, **mix(prepared, 0.2, 0.8))
    pdata = {"position": 96, "sources": {"examples": {"news": 30, "web": 66},
                                         "tokens": {"news": 1000, "web": 2000}}}
    data = continued_stream(pconfig, config, pdata, "P")
    assert data == {"position": 96, "sources": pdata["sources"],
                    "origin": {"position": 96, "source_examples": {"news": 30, "web": 66}}}
    same = tiny_config(prepared, **mix(prepared, 0.7, 0.3), **{"data.mask_schedule": "linear",
                                                              "data.final_masked_lm_prob": 0.1})
    assert continued_stream(pconfig, same, pdata, "P") == pdata   # same weights: as it is


def test_a_phase_that_keeps_the_optimizer_runs_its_own_schedule(prepared, parent, tmp_path):
    """init.optimizer=keep carries the parent's moments, not its schedule's
    clock: the phase's first step runs its warmup's rate 0, so the
    parameters stay the parent's (the clock kept at 12 would move them)."""
    from kjax.checkpoint.restore import restore_params
    config = tiny_config(prepared, **{"init.from_run": parent, "init.optimizer": "keep",
                                      "train.num_steps": 24, "train.warmup_steps": 2,
                                      "train.checkpoint_every": 1})
    workdir = str(tmp_path / "phase")
    train(config, workdir, progress=False, stop_at=1)
    p1, _ = restore_params(config, workdir, 1)
    p0, _ = restore_params(config, parent, 12)
    for a, b in zip(jax.tree.leaves(p0), jax.tree.leaves(p1)):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("step, end, extra, message", [
    (12, 15, {}, r"runs step 13 at learning rate 0 .* this branch at 0.001: a decay branch "
                 r"starts where its parent's rate is"),
    (6, 6, {}, r"train.num_steps=6: a decay branch continues the step counter .* from step 6"),
    (6, 9, {"train.decay_steps": 5}, r"train.decay_steps=5 would start the decay at step 4, "
                                     r"before the branch's first step 7"),
    (6, 9, {"train.seed": 1}, r"train.seed=1: a decay branch continues the run of .* which "
                              r"has train.seed=0"),
    (6, 9, {"init.weights": "ema"}, r"init.weights='ema': a decay branch continues the "
                                    r"parameters"),
    (6, 9, {"train.batch_size": 8}, r"the data state of step 6 is at example 96, but this "
                                    r"config's batches .* put step 6 at example 48"),
    (6, 9, {"model.intermediate_size": 32}, r"its params differ from this config's in "
                                            r"structure or shape"),
])
def test_what_a_branch_must_keep_is_one_line_before_compiling(prepared, parent, tmp_path,
                                                              monkeypatch, step, end, extra,
                                                              message):
    from kjax.train import stage_steps
    monkeypatch.setattr(stage_steps, "make_train_step",
                        lambda *a: pytest.fail("compiled before refusing"))
    config = branch_of(prepared, parent, step, end, **extra)
    with pytest.raises(KjaxError, match=message):
        train(config, str(tmp_path / "branch"), progress=False)


def test_another_data_dir_is_one_line(prepared, parent):
    from kjax.pretrain.branch import continued_stream
    pconfig = tiny_config(prepared, **STABLE)
    config = branch_of(prepared, parent, 6, 9, **{"data.dir": "/elsewhere"})
    with pytest.raises(KjaxError, match=r"data.dir=/elsewhere: a decay branch continues the "
                                        r"data stream"):
        continued_stream(pconfig, config, {"position": 96}, parent)
    with pytest.raises(KjaxError, match=r"read one source, data.dir, this branch a mixture"):
        continued_stream(pconfig, tiny_config(prepared, **mix(prepared, 1, 1)), {}, parent)


def everything(prepared, **extra):
    """A 0.7 / 0.3 mixture, a 30 → 15 % mask schedule over 8 steps, a batch
    ramp (8, 16, then 32 in 2 microbatches), an EMA and a wsd schedule."""
    return {**mix(prepared, 0.7, 0.3), "data.mask_schedule": "linear",
            "data.masked_lm_prob": 0.3, "data.final_masked_lm_prob": 0.15,
            "data.mask_schedule_steps": 8, "data.max_predictions_per_seq": 18,
            "train.batch_size": 32, "train.microbatches": 2,
            "train.batch_ramp": ((2, 8), (4, 16)), "train.batch_ramp_unit": "steps",
            "train.ema_decay": 0.9, "train.schedule": "wsd", "train.num_steps": 8,
            "train.decay_steps": 2, "train.warmup_steps": 2, "train.checkpoint_every": 1,
            "train.keep_checkpoints": 10, **extra}


@pytest.mark.slow
def test_a_branch_of_a_run_with_everything_killed_while_saving_resumes_bit_exactly(
        prepared, tmp_path):
    """A parent with a mixture, a mask schedule, a batch ramp and an EMA,
    trained to step 4; a decay branch of it annealing on another mix (0.2 /
    0.8) to step 7, killed with SIGKILL while saving step 6 and run again with
    the same command, ends bit-identical to the branch that was never killed
    (state with its EMA, data state with its origin and counters, steps 5-7
    logged)."""
    stable = str(tmp_path / "stable")
    train(tiny_config(prepared, **everything(prepared)), stable, progress=False, stop_at=4)
    anneal = {**everything(prepared, **mix(prepared, 0.2, 0.8)), "train.num_steps": 7,
              "train.decay_steps": 0}
    straight, killed = str(tmp_path / "straight"), str(tmp_path / "killed")
    argv = ["train", "--config", DEMO_CONFIG, "--decay-from", f"{stable}/checkpoints/4",
            *tiny_overrides(str(prepared), **anneal)]
    straight_then_killed(argv, straight, killed, 6)
    config = tiny_config(prepared, **anneal)
    assert_same_run(config, straight, killed, (5, 6, 7))
    _, data = final_params(config, killed)
    assert data["origin"]["position"] == 2 * 8 + 2 * 16   # the parent's position at step 4
    rows = rows_of(killed)
    assert [rows[s]["batch_size"] for s in (5, 6, 7)] == [32, 32, 32]
    assert rows[5]["learning_rate"] == float(np.float32(1e-3)) > rows[7]["learning_rate"]
    assert rows[7]["source/web/examples"] + rows[7]["source/news/examples"] == 48 + 3 * 32


def test_phases_of_a_config_decay_as_a_branch(prepared, tmp_path):
    """A config listing a constant phase of 3 steps and a decay phase with
    init.mode=continue to step 5: the decay continues the first phase's step
    counter, data position and learning rate (the peak) and decays to 0."""
    config = tiny_config(prepared, **{"train.schedule": "constant", "train.num_steps": 3,
                                      "train.warmup_steps": 1})
    config.phases = ({"name": "stable", "overrides": {}},
                     {"name": "decay", "overrides": {"init.mode": "continue",
                                                     "train.schedule": "wsd",
                                                     "train.num_steps": 5}})
    workdir = str(tmp_path / "run")
    result = train(config, workdir, progress=False)
    assert result["phase"] == "decay" and result["final_step"] == 5
    decay = os.path.join(workdir, "phases", "decay")
    rows = rows_of(decay)
    assert sorted(rows) == [4, 5] and rows[4]["learning_rate"] == float(np.float32(1e-3))
    _, data = final_params(tiny_config(prepared), decay)
    assert data["position"] == 5 * 16
    lineage = json.load(open(os.path.join(decay, "lineage.json")))
    assert lineage["parent"] == os.path.join(workdir, "phases", "stable")
    assert lineage["parent_step"] == 3 and lineage["init"]["mode"] == "continue"


def test_modern_bases_decay_phase_is_a_branch_of_the_extension():
    """tpu_configs/modern_base.py: decay8192 continues extend8192 from its last
    step (25,000) with its learning rate there, and decays over the 5,000 after."""
    from kjax.config import load_config
    from kjax.pretrain.branch import check_continuation
    from kjax.pretrain.phases import phase_configs
    from kjax.train.schedules import learning_rate_schedule
    configs = dict(phase_configs(load_config(os.path.join(ROOT, "tpu_configs",
                                                          "modern_base.py"))))
    extend, decay = configs["extend8192"], configs["decay8192"]
    assert decay.init.mode == "continue" and extend.init.mode == "phase"
    start = extend.train.num_steps
    assert decay.train.num_steps - decay.train.decay_steps == start == 25_000
    check_continuation(extend, decay, start, "extend8192")   # no jump: passes
    schedule = learning_rate_schedule(decay.train)
    assert float(schedule(start)) == pytest.approx(8e-4) and float(schedule(30_000)) == 0.0
    assert extend.data.dir == decay.data.dir and \
        extend.train.batch_size == decay.train.batch_size


def test_init_from_and_decay_from_together_are_one_line(parent, tmp_path, capsys):
    from kjax.cli import main
    assert main(["train", "--workdir", str(tmp_path / "b"), "--init-from", parent,
                 "--decay-from", parent]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == ["kjax: error: give --init-from (a new phase) or --decay-from (a decay "
                   "branch), not both"]


@pytest.mark.slow
def test_a_parent_with_everything_killed_mid_ramp_resumes_and_branches_bit_exactly(
        prepared, tmp_path):
    """The parent itself (mixture, mask schedule, batch ramp, EMA, wsd) killed
    with SIGKILL while saving step 3 — step 2 committed, mid-ramp — and run
    again ends, and logs steps 1-6, as the parent never killed; a decay
    branch of each from step 4 then ends bit-identical too."""
    parent_argv = ["train", "--config", DEMO_CONFIG,
                   *tiny_overrides(str(prepared), **everything(prepared, **{"train.num_steps": 6}))]
    from kjax.cli import main
    straight, killed = str(tmp_path / "straight"), str(tmp_path / "killed")
    straight_then_killed(parent_argv, straight, killed, 3)
    assert {"1", "2"} <= set(os.listdir(os.path.join(killed, "checkpoints")))
    config = tiny_config(prepared, **everything(prepared, **{"train.num_steps": 6}))
    assert_same_run(config, straight, killed, range(1, 7))
    assert [rows_of(killed)[s]["batch_size"] for s in range(1, 7)] == [8, 8, 16, 16, 32, 32]
    anneal = {**everything(prepared), "train.num_steps": 6, "train.decay_steps": 2}
    for parent in (straight, killed):
        assert main(["train", "--config", DEMO_CONFIG, "--decay-from",
                     f"{parent}/checkpoints/4", "--workdir", parent + "-branch",
                     *tiny_overrides(str(prepared), **anneal)]) == 0
    assert_same_run(tiny_config(prepared, **anneal), straight + "-branch", killed + "-branch", (5, 6))
