"""End to end: sharded steps, falling loss, bit-exact resume, checkpoints."""
import json
import os
import shutil

import jax
import numpy as np
import pytest

from conftest import ROOT, tiny_config
from kjax.batches.loader import train_dataset
from kjax.errors import KjaxError
from kjax.parallel.mesh import make_mesh, put_batch
from kjax.train.metrics import read_metrics
from kjax.train.state import init_state, make_model, make_optimizer
from kjax.train.step import make_train_step
from kjax.pretrain.trainer import evaluate, train

TIMING = ("step_time", "tokens_per_sec", "mfu", "data_wait_fraction",
          "compile_and_first_step_time")


def one_step(config, devices):
    mesh = make_mesh(config, devices)
    model, tx = make_model(config, deterministic=False), make_optimizer(config.train)
    state, shardings = init_state(config, mesh, model, tx)
    batch = put_batch(next(iter(train_dataset(config))), mesh)
    state, metrics = make_train_step(config, mesh, model, tx, shardings)(state, batch)
    return jax.device_get(state["params"]), jax.device_get(metrics), state


@pytest.mark.parametrize("mesh", [dict(data=8, fsdp=1, tensor=1), dict(data=2, fsdp=2, tensor=2)])
def test_sharded_step_equals_single_device_step(prepared, mesh):
    sharded = tiny_config(prepared, **{f"mesh.{k}": v for k, v in mesh.items()})
    single = tiny_config(prepared, **{"mesh.data": 1})
    p8, m8, state = one_step(sharded, jax.devices())
    p1, m1, _ = one_step(single, jax.devices()[:1])
    assert len(jax.devices()) == 8
    kernel = state["params"]["encoder"]["layers"]["mlp_in"]["kernel"]
    if mesh["fsdp"] > 1:  # FSDP shards the embed axis, tensor the mlp axis, and
        # mesh.shard_update the one left (the 2 layers) over the data axis
        assert kernel.sharding.spec == jax.sharding.PartitionSpec("data", "fsdp", "tensor")
        assert len({str(s.index) for s in kernel.addressable_shards}) == 8
    np.testing.assert_allclose(m8["loss"], m1["loss"], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(p8), jax.tree.leaves(p1)):
        np.testing.assert_allclose(a, b, atol=2e-6)


def metrics_without_timing(workdir):
    return {(r["step"], r["split"]): {k: v for k, v in r.items() if k not in TIMING}
            for r in read_metrics(workdir)}


def final_params(config, workdir):
    from kjax.checkpoint.manager import Checkpointer
    from kjax.train.state import abstract_state
    mesh = make_mesh(config)
    target, _ = abstract_state(config, mesh, make_model(config, False), make_optimizer(config.train))
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), 1, 5)
    state, data = ckpt.restore(ckpt.latest_step(), target)
    ckpt.close()
    return jax.device_get(state), data


@pytest.mark.parametrize("generator", ["threefry", pytest.param("rbg", marks=pytest.mark.slow)])
def test_kill_and_resume_is_bit_exact(prepared, tmp_path, generator, request):
    """For either dropout generator (train.dropout_rng): its key is a function
    of (seed, step), never of what ran before. Attention dropout (0.1) hashes
    its bits from that key (kjax/model/dropout_hash.py): on the explicit path
    with threefry, inside the flash kernel with rbg (its four words folded)."""
    impl = "xla" if generator == "threefry" else "flash"
    config = tiny_config(prepared, **{"train.dropout_rng": generator,
                                      "model.attention_impl": impl})
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    if config == tiny_config(prepared):   # tiny_config's own: conftest's trained_run is this run
        shutil.copytree(request.getfixturevalue("trained_run"), straight)
    else:
        train(config, straight, progress=False)
    assert_stop_and_resume_is_bit_exact(config, straight, resumed)


def assert_stop_and_resume_is_bit_exact(config, straight: str, resumed: str) -> dict:
    """`resumed` trained to step 3, stopped, then to 6 as a new process would:
    the state, loader state and logged rows of steps 4–6 equal the uninterrupted
    run in `straight` (trained to 6). Returns straight's rows."""
    first = train(config, resumed, progress=False, stop_at=3)
    assert first["final_step"] == 3
    train(config, resumed, progress=False)  # a new process would do exactly this
    (s_state, s_data), (r_state, r_data) = final_params(config, straight), final_params(config, resumed)
    assert int(r_state["step"]) == 6 and s_data == r_data
    for a, b in zip(jax.tree.leaves(s_state), jax.tree.leaves(r_state)):
        assert np.array_equal(a, b)
    s_rows, r_rows = metrics_without_timing(straight), metrics_without_timing(resumed)
    for step in (4, 5, 6):
        assert s_rows[(step, "train")] == r_rows[(step, "train")]
    return s_rows


def test_training_lowers_the_loss_and_writes_outputs(prepared, tmp_path):
    config = tiny_config(prepared, **{"train.num_steps": 40, "train.learning_rate": 3e-3,
                                      "train.warmup_steps": 4, "train.eval_every": 40,
                                      "train.checkpoint_every": 20, "train.log_every": 10})
    workdir = str(tmp_path / "run")
    result = train(config, workdir, progress=False)
    rows = [r for r in read_metrics(workdir) if r["split"] == "train"]
    assert rows[-1]["mlm_loss"] < rows[0]["mlm_loss"] - 0.5
    assert 0 < result["mfu"] < 1 and result["tokens_per_sec"] > 0
    assert os.path.isfile(os.path.join(workdir, "loss_curve.png"))
    assert os.listdir(os.path.join(workdir, "tensorboard"))
    evaluated = evaluate(config, workdir)
    logged = [r for r in read_metrics(workdir) if r["split"] == "eval"][-1]
    assert evaluated["step"] == 40
    assert evaluated["mlm_loss"] == pytest.approx(logged["mlm_loss"], rel=1e-5)


def test_an_mlm_only_run_reports_no_nsp_figure(prepared, tmp_path, capsys):
    """NSP at weight 0 is off, so no NSP number appears anywhere a run
    reports: eval lines, metrics.jsonl, TensorBoard, `kjax eval`, the model card
    (whose first line names the objectives that trained)."""
    from kjax.cli import main
    from kjax.export.model_card import write_model_card
    config = tiny_config(prepared, **{"train.nsp_weight": 0.0, "train.num_steps": 4,
                                      "train.eval_every": 4, "train.checkpoint_every": 4})
    workdir = str(tmp_path / "run")
    train(config, workdir, progress=False)
    rows = read_metrics(workdir)
    assert {r["split"] for r in rows} >= {"train", "eval"}
    assert all("mlm_loss" in r for r in rows if r["split"] in ("train", "eval"))
    assert not [k for r in rows for k in r if k.startswith("nsp")]
    events = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(workdir, "tensorboard"))
              for f in fs]
    logged = b"".join(open(f, "rb").read() for f in events)
    assert b"mlm_loss" in logged and b"nsp" not in logged
    assert main(["eval", "--workdir", workdir]) == 0
    printed = capsys.readouterr().out
    assert "mlm_loss" in printed and "nsp" not in printed
    # `kjax export` from the run's recorded config: the MLM-only class, no NSP head, no pooler
    out = str(tmp_path / "hf")
    assert main(["export", "--workdir", workdir, "--out", out]) == 0
    capsys.readouterr()
    written = json.load(open(os.path.join(out, "kjax_export.json"), encoding="utf-8"))
    assert written["architecture"] == "BertForMaskedLM" and written["objectives"] == "MLM"
    assert not {"nsp", "pooler"} & set(written["heads"])
    card = write_model_card(config, workdir, str(tmp_path), 4, "BertForMaskedLM", True,
                            "float32", {"class": "PreTrainedTokenizerFast"}, pooler=False)
    text = open(card, encoding="utf-8").read()
    assert "A BERT encoder pretrained with kjax (MLM), exported" in text
    assert "as BertForMaskedLM (float32), with its MLM head. NSP did not train" in text
    assert "mlm_accuracy" in text and "nsp" not in text.split("## Training config")[0]
    with_nsp = tiny_config(prepared)                       # weight 1: both are named
    write_model_card(with_nsp, workdir, str(tmp_path), 4, "BertForPreTraining", True,
                     "float32", {"class": "PreTrainedTokenizerFast"})
    assert "pretrained with kjax (MLM + NSP)" in open(card, encoding="utf-8").read()


def test_nan_params_are_never_saved(prepared, tmp_path):
    from kjax.checkpoint.manager import Checkpointer
    ckpt = Checkpointer(str(tmp_path / "ck"), 1, 2)
    state = {"params": {"w": np.array([1.0, np.nan], np.float32)}, "step": np.int32(1)}
    with pytest.raises(KjaxError, match="NaN/Inf at step 1: not saving"):
        ckpt.save(1, state, {})
    ckpt.close()
    assert ckpt.latest_step() is None


def test_all_finite_looks_at_every_float_leaf_and_only_those():
    import jax.numpy as jnp
    from kjax.checkpoint.manager import all_finite
    tree = {"w": jnp.ones((3, 2)), "b": jnp.zeros(4, jnp.bfloat16), "step": jnp.int32(7)}
    assert all_finite(tree) and all_finite({"step": np.int32(1)}) and all_finite({})
    assert not all_finite({**tree, "b": tree["b"].at[2].set(jnp.inf)})
    assert not all_finite({**tree, "w": np.array([[1.0, np.nan]], np.float32)})


def test_metric_writer_starts_without_loading_torch(tmp_path):
    """tensorboardX tries `import torch` at import; kjax keeps it from loading
    PyTorch (seconds of every run's start where the export extra is
    installed), and torch imports as usual afterwards."""
    import subprocess
    import sys
    script = """
import sys
from kjax.train.metrics import MetricWriter
w = MetricWriter(sys.argv[1])
w.write(1, {"loss": 2.5})
w.close()
print("torch" in sys.modules)
import torch
print(torch.ones(2).sum().item())
"""
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "2.0"]
    (event,) = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "tensorboard") for f in fs]
    assert b"train/loss" in open(event, "rb").read()


def test_metric_writer_flushes_everything_and_a_resume_within_the_second_purges_after_it(
        tmp_path):
    """flush() leaves nothing in memory (a checkpoint follows it); a session
    resumed at step 2 within the same second gets its own file, read after the
    first, and TensorBoard shows steps 1-2 from the first and 3-4 from it."""
    from fault_helpers import purged_scalars
    from kjax.train.metrics import MetricWriter
    tb = str(tmp_path / "tensorboard")
    first = MetricWriter(str(tmp_path))
    for step in (1, 2, 3):
        first.write(step, {"loss": 1.0})
    first.flush()
    assert purged_scalars(tb, "train/loss") == [1, 2, 3]     # the file still open
    first.close()
    second = MetricWriter(str(tmp_path), resume_step=2)
    for step in (3, 4):
        second.write(step, {"loss": 2.0})
    second.close()
    assert len(os.listdir(tb)) == 2
    assert purged_scalars(tb, "train/loss") == [1, 2, 3, 4]
    assert [r["loss"] for r in read_metrics(str(tmp_path))] == [1.0, 1.0, 2.0, 2.0]


def test_remote_workdir_logs_through_a_local_mirror(prepared, tmp_path, monkeypatch):
    """A gs:// workdir (simulated: every path counts as remote) gets its logs
    copied to WORKDIR/logs after saves; a new machine pulls them back, so the
    restart count survives the VM (kjax/train/logdir.py)."""
    import json
    from kjax.train import logdir
    from kjax.pretrain.trainer import train
    monkeypatch.setattr(logdir, "is_remote", lambda workdir: True)
    monkeypatch.setattr(logdir, "LOCAL_MIRRORS", str(tmp_path / "vm1"))
    config = tiny_config(prepared, **{"train.num_steps": 4, "train.log_every": 2})
    workdir = str(tmp_path / "bucket" / "run")
    train(config, workdir, progress=False, stop_at=2)
    mirror = logdir.local_log_dir(workdir)
    assert mirror.startswith(str(tmp_path / "vm1")) and os.path.isfile(f"{mirror}/metrics.jsonl")
    assert not os.path.exists(f"{workdir}/metrics.jsonl")          # nothing appended remotely
    assert json.load(open(f"{workdir}/logs/goodput.json"))["sessions"] == 1
    monkeypatch.setattr(logdir, "LOCAL_MIRRORS", str(tmp_path / "vm2"))  # a fresh VM
    train(config, workdir, progress=False)
    pushed = json.load(open(f"{workdir}/logs/goodput.json"))
    assert (pushed["sessions"], pushed["restarts"]) == (2, 1)
    steps = [json.loads(line)["step"] for line in open(f"{workdir}/logs/metrics.jsonl")]
    assert 2 in steps and 4 in steps                     # the history of both sessions


def test_dropout_masks_are_a_function_of_seed_and_step(prepared):
    """The model's dropout (hidden and attention, inside the layer scan) under
    either generator: the same (seed, step) gives the same output, another step
    or seed or generator another one."""
    from kjax.train.state import dummy_inputs
    from kjax.train.step import dropout_key
    config = tiny_config(prepared, **{"model.attention_dropout_rate": 0.3})
    model = make_model(config, deterministic=False)
    args, kwargs = dummy_inputs(config, batch_size=2)
    params = make_model(config, deterministic=True).init(jax.random.key(0), *args, **kwargs)

    hidden = jax.jit(lambda rng: model.apply(params, *args, rngs={"dropout": rng},
                                             **kwargs)["hidden"])

    def out(seed, step, generator):
        state_rng = jax.random.key_data(jax.random.key(seed))
        return np.asarray(hidden(dropout_key(state_rng, step, generator)))

    for generator in ("threefry", "rbg"):
        first = out(7, 3, generator)
        assert np.array_equal(first, out(7, 3, generator))
        assert not np.allclose(first, out(7, 4, generator))
        assert not np.allclose(first, out(8, 3, generator))
    assert not np.allclose(out(7, 3, "threefry"), out(7, 3, "rbg"))
    key = dropout_key(jax.random.key_data(jax.random.key(7)), 3, "rbg")
    assert "rbg" in str(key.dtype) and jax.random.key_data(key).shape == (4,)
