"""Fault injection, part 1: damaged checkpoints (docs/RECOVERY.md).

Each way of damaging the newest step (fault_helpers.DAMAGES, plus a flipped
bit in an array) must end in a fallback to the previous good step or a
one-line refusal, never in a silent restore: an explicit step is refused and
left in place; read-only tools fall back and move nothing; train falls back,
moves the step aside (nothing deleted) and then finishes bit-exactly as an
undamaged run. A complete checkpoint of another config is a config mismatch,
never "damaged". Metrics hold each step once after a fallback."""
import glob
import json
import os
import re
import shutil
import sys

import jax
import numpy as np
import pytest

from conftest import DEMO_CONFIG, ROOT, tiny_config, tiny_overrides
from fault_helpers import (DAMAGES, EXTRA, checkpoints_of, data_files, files_under,  # noqa: F401
                           flip_bit, purged_scalars, same_tree, target_of, trained)
from kjax.checkpoint import fingerprint
from kjax.checkpoint.manager import Checkpointer, ConfigMismatch, DamagedCheckpoint
from kjax.checkpoint.recovery import DAMAGED_DIR, restore_newest, restore_step
from kjax.cli import main
from kjax.errors import KjaxError
from kjax.train.metrics import read_metrics
from kjax.pretrain.trainer import train
from waiting import run

WAIT = 600   # seconds: the most one `kjax` command here may take (a 2-core CI VM under load)


def damaged_copy(trained, tmp_path, damage) -> str:
    workdir = str(tmp_path / "run")
    shutil.copytree(trained["workdir"], workdir)
    damage(os.path.join(workdir, "checkpoints", "6"))
    return workdir


def assert_falls_back_or_refuses(trained, workdir, capsys):
    """The three behaviours of docs/RECOVERY.md for a damaged step 6."""
    step_dir = os.path.join(workdir, "checkpoints", "6")
    before = files_under(step_dir)
    ckpt = checkpoints_of(workdir)
    with pytest.raises(KjaxError) as refused:  # an explicit step: refused, left in place
        restore_step(ckpt, trained["target"], 6)
    message = str(refused.value)
    assert "is damaged" in message and "left in place" in message and "\n" not in message
    assert "another config" not in message and "delete" not in message
    state, _, step = restore_newest(ckpt, trained["target"], move_damaged=False)
    ckpt.abandon()
    assert step == 3 and same_tree(state, trained["states"][3])
    assert files_under(step_dir) == before  # read-only tools move nothing
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kjax")]
    assert warnings[0].startswith(f"kjax: warning: checkpoint {step_dir} is damaged (")
    ckpt = checkpoints_of(workdir, read_only=False)
    state, _, step = restore_newest(ckpt, trained["target"], move_damaged=True)
    ckpt.abandon()
    assert step == 3 and same_tree(state, trained["states"][3])
    (moved,) = os.listdir(os.path.join(workdir, "checkpoints", DAMAGED_DIR))
    assert moved.startswith("6-") and not os.path.exists(step_dir)
    assert files_under(os.path.join(workdir, "checkpoints", DAMAGED_DIR, moved)) == before
    assert f"moved it to {workdir}/checkpoints/{DAMAGED_DIR}/6-" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(DAMAGES))
def test_damaged_newest_step_falls_back_or_is_refused(trained, tmp_path, capsys, name):
    workdir = damaged_copy(trained, tmp_path, DAMAGES[name])
    assert_falls_back_or_refuses(trained, workdir, capsys)


def test_no_flipped_bit_restores_silently_and_the_fingerprint_catches_one(trained, tmp_path,
                                                                         capsys):
    """One bit flipped at a time across every array chunk file: each restore is
    either bit-identical (OCDBT also keeps bytes a restore does not read) or
    refused as damaged; some flips read back fine and only the fingerprints
    catch them (what orbax restored silently). Such a flip then goes through
    the fallback like any other damage."""
    outcomes, caught = {"identical": 0, "read error": 0, "fingerprint": 0}, None
    template = os.path.join(trained["workdir"], "checkpoints")
    for i, path in enumerate(data_files(os.path.join(template, "6"))):
        for frac in (0.05, 0.35, 0.65, 0.95):
            copy, offset = str(tmp_path / "flip"), int(os.path.getsize(path) * frac)
            shutil.copytree(template, copy)
            flip_bit(path.replace(template, copy), offset)
            ckpt = Checkpointer(copy, 3, 5, read_only=True)
            try:
                state, _ = ckpt.restore(6, trained["target"])
                assert same_tree(state, trained["states"][6]), "silently restored damage"
                outcomes["identical"] += 1
            except DamagedCheckpoint as e:
                fingerprinted = "differ from what was saved" in str(e)
                outcomes["fingerprint" if fingerprinted else "read error"] += 1
                caught = caught or ((path, offset) if fingerprinted else None)
            finally:
                ckpt.abandon()
            shutil.rmtree(copy)
    assert caught is not None, outcomes
    path, offset = caught
    workdir = damaged_copy(trained, tmp_path, lambda s: flip_bit(
        path.replace(trained["workdir"], str(tmp_path / "run")), offset))
    assert_falls_back_or_refuses(trained, workdir, capsys)


def test_fingerprints_split_over_shards_and_devices():
    """Sums of shards add up to the whole array's, on the host or on a device,
    and a one-element change (any dtype) always changes the sum."""
    mesh = jax.make_mesh((2, 4), ("a", "b"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    rng = np.random.default_rng(0)
    host = {"f32": rng.standard_normal((8, 12), np.float32),
            "bf16": rng.standard_normal((8, 12)).astype(jax.numpy.bfloat16),
            "i32": rng.integers(-9, 9, (8, 12)).astype(np.int32), "flag": rng.random(8) > 0.5}
    whole = fingerprint.partial_sums(host)
    for spec in (jax.P(), jax.P("a", "b"), jax.P("b", None)):
        placed = {k: jax.device_put(v, jax.NamedSharding(mesh, spec if v.ndim == 2 else
                                                          jax.P("b"))) for k, v in host.items()}
        assert fingerprint.restored_sums(placed) == whole
    for k, v in host.items():
        shards = [jax.device_put(v[:4]), jax.device_put(v[4:])]
        by_device = [int(x) for x in np.asarray(fingerprint._device_sums(shards))]
        assert sum(by_device) & fingerprint.MASK == whole[k]
        changed = v.copy()
        changed.reshape(-1)[5] = np.logical_not(changed.reshape(-1)[5]) if v.dtype == bool \
            else changed.reshape(-1)[5] + np.ones((), v.dtype)
        assert fingerprint.partial_sums({k: changed})[k] != whole[k]


def test_small_replicated_arrays_are_written_whole_and_large_ones_split(tmp_path, monkeypatch):
    """Replica-parallel saving only where a replica's share is ≥ 1 MiB: a small
    replicated array is written by replica 0 unsliced, a large one in a slice
    per replica (8 here), sharded ones as ever; the step restores exactly."""
    from orbax.checkpoint._src.serialization import replica_slices
    from kjax.checkpoint.storage import MIN_REPLICA_SLICE_BYTES
    seen, real = {}, replica_slices.get_replica_slices

    def spy(arr, *args, **kwargs):
        got = real(arr, *args, **kwargs)
        seen[arr.shape] = [s.slice_args is not None for s in got.replica_slices]
        return got
    monkeypatch.setattr(replica_slices, "get_replica_slices", spy)
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    rows = 8 * MIN_REPLICA_SLICE_BYTES // (4 * 256)   # 1 MiB per replica's slice
    host = {"small": np.arange(96, dtype=np.float32).reshape(3, 32),
            "large": np.random.default_rng(0).standard_normal((rows, 256), np.float32),
            "sharded": np.arange(64 * 4, dtype=np.int32).reshape(64, 4)}
    state = {k: jax.device_put(v, jax.NamedSharding(mesh, jax.P("data") if k == "sharded"
                                                     else jax.P())) for k, v in host.items()}
    state["params"] = {"w": state["small"]}   # what the NaN check before a save reads
    ckpt = Checkpointer(str(tmp_path / "ckpt"), 1, 2)
    ckpt.save(1, state, {"iterator": None}, force=True)
    ckpt.close()
    assert seen[(3, 32)] == [False]           # replica 0 writes it whole
    assert seen[(rows, 256)] == [True] * 8    # each replica writes its 1 MiB
    assert seen[(64, 4)] == [False] * 8       # each device's own shard, unsliced
    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding),
                            state)
    restored, _ = Checkpointer(str(tmp_path / "ckpt"), 1, 2, read_only=True).restore(1, abstract)
    for k, v in host.items():
        assert np.array_equal(np.asarray(restored[k]), v), k


def test_every_step_damaged_is_refused_then_a_rerun_starts_afresh(trained, tmp_path):
    workdir = str(tmp_path / "run")
    shutil.copytree(trained["workdir"], workdir)
    for step in ("3", "6"):
        DAMAGES["largest array chunk file zeroed"](os.path.join(workdir, "checkpoints", step))
    ckpt = checkpoints_of(workdir, read_only=False)
    with pytest.raises(KjaxError, match=r"every checkpoint in .* is damaged \(6: .*; 3: .*\); "
                                        r"they were moved to .*Run the same command again"):
        restore_newest(ckpt, trained["target"], move_damaged=True)
    assert len(os.listdir(os.path.join(workdir, "checkpoints", DAMAGED_DIR))) == 2
    assert restore_newest(ckpt, trained["target"], move_damaged=True) is None  # step 0 next
    ckpt.abandon()


def test_a_checkpoint_from_before_fingerprints_restores_unverified_with_a_warning(
        trained, tmp_path, capsys):
    def legacy(step_dir):  # the data item as kjax wrote it before fingerprints
        for path in glob.glob(os.path.join(step_dir, "data", "*.json")):
            json.dump(json.load(open(path))["iterator"], open(path, "w"))
    workdir = damaged_copy(trained, tmp_path, legacy)
    ckpt = checkpoints_of(workdir)
    state, iterator, step = restore_newest(ckpt, trained["target"], move_damaged=False)
    ckpt.abandon()
    assert step == 6 and iterator == {"position": 96} and same_tree(state, trained["states"][6])
    assert f"kjax: warning: checkpoint {workdir}/checkpoints/6 predates array fingerprints: " \
           f"restored unverified" in capsys.readouterr().err


def test_a_checkpoint_of_another_config_is_a_mismatch_not_damage(trained, prepared, tmp_path,
                                                                capfd):
    """Complete files that do not fit the config: one line naming the keys and
    shapes that differ; nothing is moved, nothing is called corrupt."""
    workdir = str(tmp_path / "run")
    shutil.copytree(trained["workdir"], workdir)
    before = files_under(workdir)
    wide = tiny_config(prepared, **EXTRA, **{"model.intermediate_size": 128})
    ckpt = checkpoints_of(workdir)
    with pytest.raises(ConfigMismatch, match=r"checkpoint .*/6 is complete but was written with "
                       r"another config: opt_state/1/0/mu/encoder/layers/mlp_in/bias is "
                       r"float32\[2, 64\] in the checkpoint, float32\[2, 128\] in this config"):
        ckpt.restore(6, target_of(wide))
    ckpt.abandon()
    overrides = tiny_overrides(str(prepared), **EXTRA, **{"model.intermediate_size": 128})
    # Every verb that restores: exactly one stderr line (fd 2: orbax's threads and
    # asyncio's "Event loop is closed" echoes included), nothing else.
    capfd.readouterr()
    for verb in (["train"], ["eval"], ["eval", "--step", "3"],
                 ["export", "--out", str(tmp_path / "hf")],
                 ["analyze", "--text", "나는 학교에 갔다", "--out", str(tmp_path / "an")]):
        assert main([*verb, "--config", DEMO_CONFIG, "--workdir", workdir, *overrides]) == 2
        err = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
        # train refuses first, from the config the run recorded (resume_policy.py)
        said = "trained to step 6 with another config" if verb == ["train"] else \
            "written with another config"
        assert len(err) == 1 and said in err[0], (verb, err)
        assert "damaged" not in err[0] and "delete" not in err[0]
    assert files_under(workdir) == before


def test_train_falls_back_and_finishes_bit_exactly_with_each_step_logged_once(trained, tmp_path):
    """Step 6 zeroed after the run logged steps 4-6: train moves it aside,
    resumes at 3, ends on the undamaged run's exact state, and metrics.jsonl
    and TensorBoard (purge_step) hold each step once."""
    workdir = damaged_copy(trained, tmp_path, DAMAGES["largest array chunk file zeroed"])
    result = train(trained["config"], workdir, progress=False)
    assert result["final_step"] == 6
    ckpt = checkpoints_of(workdir)
    assert same_tree(ckpt.restore(6, trained["target"])[0], trained["states"][6])
    ckpt.abandon()
    steps = [r["step"] for r in read_metrics(workdir) if r["split"] == "train"]
    assert steps == [1, 2, 3, 4, 5, 6]
    assert purged_scalars(os.path.join(workdir, "tensorboard"), "train/loss") == [1, 2, 3, 4, 5, 6]


def test_cli_eval_falls_back_or_refuses_in_one_line(trained, prepared, tmp_path):
    """The real command line, exit codes and all of stderr: the warnings name
    the damaged step, a refusal is one line, and no traceback or orbax/asyncio
    echo gets through (the failed read leaves some behind in TensorStore)."""
    workdir = damaged_copy(trained, tmp_path, DAMAGES["every array chunk file deleted"])
    cmd = [sys.executable, "-m", "kjax.cli", "eval", "--config", DEMO_CONFIG, "--workdir",
           workdir, *tiny_overrides(str(prepared), **EXTRA)]
    env = {**os.environ, "PYTHONPATH": ROOT}
    fell_back = run(cmd, WAIT, "kjax eval", env=env, cwd=ROOT)
    assert fell_back.returncode == 0, fell_back.stderr[-2000:]
    assert json.loads(fell_back.stdout)["step"] == 3
    err = fell_back.stderr.strip().splitlines()
    assert len(err) == 2 and err[0].startswith(f"kjax: warning: checkpoint {workdir}/"
                                              f"checkpoints/6 is damaged"), err
    assert err[1] == "kjax: warning: using step 3, the newest checkpoint that verifies"
    refused = run([*cmd, "--step", "6"], WAIT, "kjax eval --step 6", env=env, cwd=ROOT)
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith(f"kjax: error: checkpoint {workdir}/checkpoints/6 is damaged: ")
    assert line.endswith("It was left in place; pick another --step (available: [3]) or leave "
                         "--step out to use the newest good step")
    assert os.path.isdir(os.path.join(workdir, "checkpoints", "6"))


# ---- bad configs: exit 2, one stderr line, before anything compiles ----
FILES = {
    "syntax.py": ("def get_config(:\n    return 1\n", r"syntax\.py:1: syntax error"),
    "raises.py": ("from kjax.config import defaults\n\ndef get_config():\n    c = defaults()\n"
                  "    raise ValueError('no corpus here')\n",
                  r"raises\.py:5: ValueError: no corpus here"),
    "none.py": ("def get_config():\n    c = {}\n", r"none\.py: get_config\(\) returned None"),
    "wrong_type.py": ("from kjax.config import defaults\n\ndef get_config():\n"
                      "    c = defaults()\n    c.train.learning_rate = 'fast'\n    return c\n",
                      r"wrong_type\.py:5: config key 'learning_rate' = 'fast' is a str"),
    "wrong_type_dict.py": ("def get_config():\n    return {'model': {\n"
                           "        'scan_layers': 'ture'}}\n",
                           r"wrong_type_dict\.py:3: config key 'model.scan_layers' = 'ture' is "
                           r"a str; give a bool"),
}
OVERRIDES = {
    "--config.train.learning_rate=0": r"train.learning_rate=0.0 is not allowed; give a float > 0",
    "--config.train.learning_rate=-1e-4": r"train.learning_rate=-0.0001 is not allowed",
    "--config.model.dropout_rate=1.5": r"model.dropout_rate=1.5 is not allowed; give a float "
                                       r"in \[0, 1\)",
    "--config.train.keep_checkpoints=0": r"train.keep_checkpoints=0 is not allowed; give a int "
                                         r">= 1",
    "--config.model.scan_layers=ture": r"config key 'model.scan_layers': cannot set 'ture'",
    "--config.train.log_every=0": r"train.log_every=0 is not allowed",
    "--config.train.checkpoint_every=0": r"train.checkpoint_every=0 is not allowed",
    "--config.mesh.data=-2": r"mesh.data=-2 is not allowed; give a int >= 1 or -1",
}


def refused_before_training(monkeypatch, capsys, args, message):
    from kjax.pretrain import trainer

    def reached(*args, **kwargs):
        raise AssertionError("the bad config got past the checks")
    monkeypatch.setattr(trainer, "Session", reached)
    assert main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("kjax: error: "), err
    assert re.search(message, err[0]), err[0]


@pytest.mark.parametrize("name", sorted(FILES))
def test_a_bad_config_file_is_one_line_naming_file_and_line(tmp_path, monkeypatch, capsys,
                                                            name):
    text, message = FILES[name]
    (tmp_path / name).write_text(text, encoding="utf-8")
    refused_before_training(monkeypatch, capsys, ["train", "--config", str(tmp_path / name),
                                                  "--workdir", str(tmp_path / "w")], message)
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("override", sorted(OVERRIDES))
def test_a_bad_value_is_one_line_before_compiling(tmp_path, monkeypatch, capsys, override):
    refused_before_training(monkeypatch, capsys, [
        "train", "--config", DEMO_CONFIG, "--workdir", str(tmp_path / "w"),
        *tiny_overrides(str(tmp_path)), override], OVERRIDES[override])
    assert not (tmp_path / "w").exists()


def test_a_workdir_that_is_a_file_is_one_line_before_compiling(prepared, tmp_path, capsys):
    from kjax.train import stage_steps   # where the trainer builds its steps
    (tmp_path / "file").write_text("keep me", encoding="utf-8")
    args = ["train", "--config", DEMO_CONFIG, "--workdir", str(tmp_path / "file"),
            *tiny_overrides(str(prepared), **EXTRA)]
    original = stage_steps.make_train_step
    try:
        stage_steps.make_train_step = None   # calling it would be a TypeError traceback
        assert main(args) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and "is a file, not a directory" in err[0], err
        args[4] = str(tmp_path / "file" / "run")   # under a file: NotADirectoryError before
        assert main(args) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and "a folder above it is a file" in err[0], err
    finally:
        stage_steps.make_train_step = original
    assert (tmp_path / "file").read_text(encoding="utf-8") == "keep me"
