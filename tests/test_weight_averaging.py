"""Weight averaging (docs/PRETRAINING.md, "Weight averaging"): the EMA of the
parameters (train.ema_decay, kjax/train/ema.py) against a hand reference,
its bit-exact resume after a kill -9, `--weights ema` in eval, export,
fill-mask and fine-tuning, a phase from a parent's EMA, and `kjax average`
(kjax/pretrain/average.py) against numpy's mean, its run folder taken by the
other verbs, and the one-line refusals."""
import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from conftest import DEMO_CONFIG, ROOT, tiny_config, tiny_overrides
from kjax.checkpoint.restore import restore_params
from kjax.cli import main
from test_fill_mask import assert_pipeline_answers_as_kjax
from test_train import final_params, metrics_without_timing

DECAY = 0.9
# Every step saved (the EMA of each step is read back), none dropped.
EMA = {"train.ema_decay": DECAY, "train.checkpoint_every": 1, "train.keep_checkpoints": 10}


def ema_config(prepared):
    return tiny_config(prepared, **EMA)


@pytest.fixture(scope="module")
def ema_run(prepared, tmp_path_factory):
    """conftest's tiny run with an EMA, saved at every step 1..6."""
    from kjax.pretrain.trainer import train
    workdir = str(tmp_path_factory.mktemp("ema") / "run")
    train(ema_config(prepared), workdir, progress=False)
    return workdir


def weights_at(config, run, step, weights):
    return restore_params(config, run, step, weights)[0]


def states(config, run, steps) -> dict:
    """{step: the whole state on the host} (one restore each)."""
    from kjax.checkpoint.manager import Checkpointer
    from kjax.parallel.mesh import make_mesh
    from kjax.train.state import abstract_state, make_model, make_optimizer
    target, _ = abstract_state(config, make_mesh(config), make_model(config, False),
                               make_optimizer(config.train))
    checkpoints = Checkpointer(os.path.join(run, "checkpoints"), 1, 10, read_only=True)
    try:
        return {s: jax.device_get(checkpoints.restore(s, target)[0]) for s in steps}
    finally:
        checkpoints.abandon()


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("kjax: error: "), err
    return err


def flat(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


# ---- the EMA ------------------------------------------------------------------------

def test_the_ema_follows_the_hand_reference_step_by_step(prepared, ema_run):
    """ema_1 = θ_1 (the first decay is 0); then ema_t = d_t·ema_{t-1} + (1-d_t)·θ_t
    with d_t = min(d, (t-1)/(t-1+10)) (t-1 updates before), in float32 numpy."""
    previous = None
    for step, state in states(ema_config(prepared), ema_run, range(1, 7)).items():
        params, ema = flat(state["params"]), flat(state["ema"])
        if previous is None:
            for e, p in zip(ema, params):
                assert np.array_equal(e, p)
        else:
            t = np.float32(step - 1)
            d = np.minimum(np.float32(DECAY), t / (t + np.float32(10)))
            for e, e0, p in zip(ema, previous, params):
                np.testing.assert_allclose(e, (1 - d) * p + d * e0, rtol=1e-6, atol=1e-8)
            assert any(not np.allclose(e, p) for e, p in zip(ema, params))
        previous = ema


def test_without_a_decay_the_state_holds_no_ema(prepared):
    from kjax.parallel.mesh import make_mesh
    from kjax.train.state import abstract_state, make_model, make_optimizer
    for extra, keys in (({}, ["opt_state", "params", "rng", "step"]),
                        (EMA, ["ema", "opt_state", "params", "rng", "step"])):
        config = tiny_config(prepared, **extra)
        target, shardings = abstract_state(config, make_mesh(config), make_model(config, False),
                                           make_optimizer(config.train))
        assert sorted(target) == keys
    assert shardings["ema"] == shardings["params"]   # sharded as the params, leaf by leaf


def test_the_op_by_op_init_gives_the_ema_buffers_of_its_own(prepared, monkeypatch):
    """One GPU process initialises op by op (kjax/train/state.py): the EMA is a
    copy of the params in buffers of its own, so the donated state aliases
    nothing."""
    from kjax.parallel.mesh import make_mesh
    from kjax.train import state as st
    monkeypatch.setattr(st, "op_by_op_init", lambda mesh: True)
    config = ema_config(prepared)
    state, _ = st.init_state(config, make_mesh(config), st.make_model(config, False),
                             st.make_optimizer(config.train))
    for e, p in zip(jax.tree.leaves(state["ema"]), jax.tree.leaves(state["params"])):
        assert e.sharding == p.sharding and np.array_equal(e, p)
        assert {s.data.unsafe_buffer_pointer() for s in e.addressable_shards}.isdisjoint(
            s.data.unsafe_buffer_pointer() for s in p.addressable_shards)


def test_a_run_with_an_ema_killed_while_saving_resumes_bit_exactly(prepared, ema_run,
                                                                   tmp_path):
    """kill -9 (SIGKILL) in the middle of saving step 5, then the same command:
    state (EMA included), loader state and steps 5-6 logged equal the run that
    was never stopped."""
    from kjax.pretrain.trainer import train
    workdir = str(tmp_path / "killed")
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu",
           "JAX_NUM_CPU_DEVICES": "8"}
    killed = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tests", "die_during_save.py"), "5", "train",
         "--config", DEMO_CONFIG, "--workdir", workdir,
         *tiny_overrides(str(prepared), **EMA)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert "5" not in os.listdir(os.path.join(workdir, "checkpoints"))
    config = ema_config(prepared)
    train(config, workdir, progress=False)
    (s_state, s_data), (r_state, r_data) = final_params(config, ema_run), \
        final_params(config, workdir)
    assert s_data == r_data and int(r_state["step"]) == 6
    assert jax.tree.structure(s_state) == jax.tree.structure(r_state)
    for a, b in zip(jax.tree.leaves(s_state), jax.tree.leaves(r_state)):
        assert np.array_equal(a, b)
    s_rows, r_rows = metrics_without_timing(ema_run), metrics_without_timing(workdir)
    assert [s_rows[(s, "train")] for s in (5, 6)] == [r_rows[(s, "train")] for s in (5, 6)]


# ---- --weights ema ------------------------------------------------------------------

def test_weights_ema_is_what_eval_and_export_take(prepared, ema_run, tmp_path, capsys):
    from safetensors.numpy import load_file
    from kjax.export.checkpoint_export import exported_heads
    from kjax.export.hf_export import params_to_state_dict
    from kjax.model.config import EncoderConfig
    config = ema_config(prepared)
    state, _ = final_params(config, ema_run)
    ema, params = weights_at(config, ema_run, None, "ema"), weights_at(config, ema_run, None,
                                                                        "params")
    for a, b in zip(flat(ema), flat(state["ema"])):
        assert np.array_equal(a, b)
    results = {}
    for weights in ("params", "ema"):
        assert main(["eval", "--workdir", ema_run, "--weights", weights]) == 0
        results[weights] = json.loads(capsys.readouterr().out)
        assert results[weights]["weights"] == weights and results[weights]["step"] == 6
    assert results["ema"]["mlm_loss"] != results["params"]["mlm_loss"]

    out = str(tmp_path / "hf_ema")
    assert main(["export", "--workdir", ema_run, "--out", out, "--weights", "ema"]) == 0
    assert json.loads(capsys.readouterr().out)["weights"] == "ema"
    enc = EncoderConfig.from_config(config.model)
    written = load_file(os.path.join(out, "model.safetensors"))
    for tree, same in ((ema, True), (params, False)):
        expected = params_to_state_dict(tree, enc, exported_heads(config, enc, True))
        assert sorted(expected) == sorted(written)
        assert all(np.array_equal(written[k], v) for k, v in expected.items()) == same
    assert json.load(open(os.path.join(out, "kjax_export.json")))["weights"] == "ema"
    assert "exponential moving average" in open(os.path.join(out, "README.md")).read()


def test_fill_mask_and_finetune_init_take_the_ema(prepared, ema_run, capsys):
    from kjax.analysis.fill_mask import FillMask
    from kjax.finetune.pretrained import restore_pretrained_params
    from kjax.parallel.mesh import make_mesh
    config = ema_config(prepared)
    ema = weights_at(config, ema_run, None, "ema")
    filler = FillMask(config, ema_run, weights="ema")
    for a, b in zip(flat(filler.params), flat(ema)):
        assert np.array_equal(a, b)
    text = "모든 국민[MASK] 법 앞에 평등하다."
    assert main(["fill-mask", "--workdir", ema_run, "--weights", "ema", text, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)["masks"][0]
    (found,), = filler.predict([text], top_k=5)
    assert [a["piece"] for a in printed] == [a.piece for a in found]

    template = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                            {k: ema[k] for k in ("embeddings", "encoder")})
    picked = restore_pretrained_params(config, make_mesh(config), ema_run, template, "ema")
    for a, b in zip(flat(picked), flat({k: ema[k] for k in template})):
        assert np.array_equal(a, b)


def test_a_phase_starts_from_the_parents_ema(prepared, ema_run):
    """init.weights=ema: the new run's parameters (and its own EMA) are the
    parent's EMA; lineage.json says so."""
    from kjax.parallel.mesh import make_mesh
    from kjax.pretrain import phases
    from kjax.train.state import abstract_state, make_model, make_optimizer
    config = tiny_config(prepared, **EMA, **{"init.from_run": ema_run, "init.weights": "ema"})
    mesh, model, tx = make_mesh(config), make_model(config, False), make_optimizer(config.train)
    _, shardings = abstract_state(config, mesh, model, tx)
    state, lineage = phases.init_from_parent(config, mesh, model, tx, shardings)
    ema = flat(weights_at(config, ema_run, None, "ema"))
    for tree in (state["params"], state["ema"]):
        assert all(np.array_equal(a, b) for a, b in zip(flat(tree), ema))
    assert lineage["init"]["weights"] == "ema" and lineage["parent_step"] == 6


def test_a_run_without_an_ema_asked_for_one_is_one_line(trained_run, tmp_path, capsys):
    runs = {"eval": ["eval", "--workdir", trained_run],
            "export": ["export", "--workdir", trained_run, "--out", str(tmp_path / "hf")],
            "fill-mask": ["fill-mask", "--workdir", trained_run, "국민[MASK] 평등하다"],
            "finetune": ["finetune", "--task", "classify", "--train", "no_such.jsonl",
                         "--init", trained_run, "--out", str(tmp_path / "ft")],
            "average": ["average", "--workdir", trained_run, "--last", "2",
                        "--out", str(tmp_path / "avg")]}
    for verb, argv in runs.items():
        assert main([*argv, "--weights", "ema"]) == 2, verb
        assert "was trained without an EMA of its parameters (train.ema_decay=0" in \
            one_line_error(capsys), verb
    assert main(["train", "--workdir", str(tmp_path / "phase"), "--init-from", trained_run,
                 "--config.init.weights=ema"]) == 2
    assert "init.weights ema: " in one_line_error(capsys)
    assert not os.path.exists(tmp_path / "hf") and not os.path.exists(tmp_path / "avg")
    assert main(["finetune", "--config", DEMO_CONFIG, "--task", "classify", "--train",
                 "x.jsonl", "--init", "none", "--out", str(tmp_path / "ft"),
                 "--weights", "ema"]) == 2
    assert "starts from random weights" in one_line_error(capsys)


# ---- kjax average -------------------------------------------------------------------

def tree_snapshot(folder: str) -> dict:
    return {os.path.join(d, f): os.stat(os.path.join(d, f)).st_mtime_ns
            for d, _, files in os.walk(folder) for f in files}


def assert_numpy_mean(config, got, sources, weights="params"):
    """`got` equals numpy's mean (float64) of the sources' weights within 1e-7."""
    trees = [flat(weights_at(c, run, step, weights)) for c, run, step in sources]
    for i, leaf in enumerate(flat(got)):
        expected = np.mean(np.stack([t[i] for t in trees]).astype(np.float64), axis=0)
        assert leaf.dtype == np.float32
        np.testing.assert_allclose(leaf, expected, rtol=0, atol=1e-7)
    assert not all(np.array_equal(a, b) for a, b in zip(flat(got), trees[-1]))


def test_average_of_the_last_checkpoints_is_numpys_mean_and_a_run(prepared, ema_run,
                                                                  tmp_path, capsys):
    """`kjax average --last 3`: numpy's mean, the sources untouched, lineage.json
    naming them; eval takes the folder, and its export answers fill-mask as
    `kjax fill-mask` on it does."""
    config, out = ema_config(prepared), str(tmp_path / "avg")
    before = tree_snapshot(ema_run)
    assert main(["average", "--workdir", ema_run, "--last", "3", "--out", out]) == 0
    report = json.loads(capsys.readouterr().out)
    assert tree_snapshot(ema_run) == before
    assert report["step"] == 6 and len(report["checkpoints"]) == 3
    plain = tiny_config(prepared)   # the average keeps no EMA
    assert_numpy_mean(plain, weights_at(plain, out, None, "params"),
                      [(config, ema_run, s) for s in (4, 5, 6)])
    lineage = json.load(open(os.path.join(out, "lineage.json")))
    assert [(s["run"], s["step"]) for s in lineage["averaged"]] == [(ema_run, s) for s in (4, 5, 6)]
    assert all(len(s["fingerprint"]) == 16 for s in lineage["averaged"])
    assert len({s["fingerprint"] for s in lineage["averaged"]}) == 3

    assert main(["eval", "--workdir", out]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["started"].startswith("the average of 3 checkpoints' params: ")
    hf = str(tmp_path / "hf")
    assert main(["export", "--workdir", out, "--out", hf]) == 0
    capsys.readouterr()
    assert_pipeline_answers_as_kjax(hf, prepared, out)
    assert "the average of 3 checkpoints" in open(os.path.join(hf, "README.md")).read()


def test_average_of_two_runs_and_of_emas(prepared, ema_run, trained_run, tmp_path, capsys):
    """Checkpoints of two runs of one model (one without an EMA; the runs'
    params are the same, an EMA changes no step: steps 3 and 6), and the EMAs
    of two steps (--weights ema)."""
    config, plain = ema_config(prepared), tiny_config(prepared)
    out = str(tmp_path / "two_runs")
    assert main(["average", "--workdir", f"{trained_run}/checkpoints/3", "--workdir",
                 f"{ema_run}/checkpoints/6", "--out", out]) == 0
    capsys.readouterr()
    assert_numpy_mean(plain, weights_at(plain, out, None, "params"),
                      [(plain, trained_run, 3), (config, ema_run, 6)])
    out = str(tmp_path / "emas")
    assert main(["average", "--workdir", ema_run, "--steps", "2,5", "--weights", "ema",
                 "--out", out]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 5
    assert_numpy_mean(plain, weights_at(plain, out, None, "params"),
                      [(config, ema_run, 2), (config, ema_run, 5)], weights="ema")
    assert json.load(open(os.path.join(out, "lineage.json")))["weights"] == "ema"


def other_model(prepared, workdir: str) -> None:
    """A run of another size: a fresh state saved at step 0, its config recorded."""
    from kjax.checkpoint.manager import Checkpointer
    from kjax.config.recorded import record_config
    from kjax.parallel.mesh import make_mesh
    from kjax.train.state import init_state, make_model, make_optimizer
    config = tiny_config(prepared, **{"model.hidden_size": 16, "model.intermediate_size": 32})
    state, _ = init_state(config, make_mesh(config), make_model(config, False),
                          make_optimizer(config.train))
    checkpoints = Checkpointer(os.path.join(workdir, "checkpoints"), 1, 1)
    checkpoints.save(0, state, {"next_index": 0}, force=True)
    checkpoints.close()
    record_config(config, workdir)


def test_average_refusals_are_one_line_and_write_nothing(prepared, ema_run, tmp_path, capsys):
    other = str(tmp_path / "other")
    other_model(prepared, other)
    out = str(tmp_path / "avg")
    cases = {
        "holds no step 9 (its steps: [1, 2, 3, 4, 5, 6])": ["--workdir", ema_run, "--steps",
                                                             "3,9"],
        "an average needs 2 or more": ["--workdir", f"{ema_run}/checkpoints/6"],
        "say which of its checkpoints to average": ["--workdir", ema_run],
        "is named twice": ["--workdir", ema_run, "--workdir", ema_run, "--last", "1"],
        "--last 7: ": ["--workdir", ema_run, "--last", "7"],
        "hold different models (params/": ["--workdir", f"{ema_run}/checkpoints/6",
                                           "--workdir", f"{other}/checkpoints/0"],
        "already holds checkpoints": ["--workdir", ema_run, "--last", "2", "--out", other],
        "a source's checkpoints": ["--workdir", ema_run, "--last", "2", "--out",
                                   f"{ema_run}/checkpoints/99"],
    }
    for message, argv in cases.items():
        argv = argv if "--out" in argv else [*argv, "--out", out]
        assert main(["average", *argv]) == 2, message
        assert message in one_line_error(capsys)
        assert not os.path.exists(out)
