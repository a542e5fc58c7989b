"""train.profile_steps: jax.profiler traces of chosen pretraining steps in the
run's TensorBoard folder (kjax/train/profiler.py), the steps annotated;
a resumed run traces only the steps left; a bad value is one line."""
import glob
import gzip
import json
import os

import jax
import pytest

from conftest import DEMO_CONFIG, tiny_config
from kjax.cli import main
from kjax.pretrain.trainer import train
from kjax.train import profiler


def profile_dir(workdir):
    return os.path.join(workdir, "tensorboard", "plugins", "profile")


def traced(folder) -> tuple[list[int], set[str]]:
    """(the step numbers of the "train" annotations, the XLA modules that ran)."""
    path, = glob.glob(os.path.join(folder, "*.trace.json.gz"))
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    steps = sorted(int(e["args"]["step_num"]) for e in events if e.get("name") == "train")
    modules = {e["args"]["hlo_module"] for e in events if "hlo_module" in e.get("args", {})}
    return steps, modules


def test_a_run_traces_the_steps_it_is_asked_for(prepared, tmp_path, capfd):
    config = tiny_config(prepared, **{"train.num_steps": 3, "train.profile_steps": "2:2"})
    workdir = str(tmp_path / "run")
    train(config, workdir, progress=False)
    assert os.listdir(profile_dir(workdir)) == ["steps_2-3"]
    folder = os.path.join(profile_dir(workdir), "steps_2-3")
    names = os.listdir(folder)
    assert [n for n in names if n.endswith(".xplane.pb")] and "perfetto_trace.json.gz" in names
    steps, modules = traced(folder)
    assert steps == [2, 3]
    assert any("train_step" in m for m in modules), modules   # the device work is in it
    assert not glob.glob(os.path.join(workdir, ".profile-*"))  # the staging folder is gone
    err = capfd.readouterr().err
    assert f"profiler trace of steps 2-3 in {folder}" in err
    assert f"tensorboard --logdir {os.path.join(workdir, 'tensorboard')}" in err


def test_a_stopped_run_writes_its_trace_and_its_resume_traces_the_rest(prepared, tmp_path,
                                                                       capfd):
    config = tiny_config(prepared, **{"train.num_steps": 4, "train.profile_steps": "2:5"})
    workdir = str(tmp_path / "run")
    train(config, workdir, progress=False, stop_at=3)
    assert "(the run stopped during the trace)" in capfd.readouterr().err
    train(config, workdir, progress=False)    # resumes at 3: traces step 4, up to num_steps
    assert sorted(os.listdir(profile_dir(workdir))) == ["steps_2-3", "steps_4-4"]
    assert traced(os.path.join(profile_dir(workdir), "steps_2-3"))[0] == [2, 3]
    assert traced(os.path.join(profile_dir(workdir), "steps_4-4"))[0] == [4]


def test_a_remote_run_uploads_its_trace(prepared, tmp_path, monkeypatch, capfd):
    """gs:// (simulated: every workdir counts as remote): every process
    uploads its own files to WORKDIR/logs/tensorboard at once."""
    from kjax.train import logdir
    monkeypatch.setattr(logdir, "is_remote", lambda workdir: True)
    monkeypatch.setattr(logdir, "LOCAL_MIRRORS", str(tmp_path / "vm"))
    config = tiny_config(prepared, **{"train.num_steps": 2, "train.profile_steps": "2:1"})
    workdir = str(tmp_path / "bucket" / "run")
    train(config, workdir, progress=False)
    board = os.path.join(workdir, "logs", "tensorboard")
    uploaded = os.path.join(board, "plugins", "profile", "steps_2-2")
    assert traced(uploaded)[0] == [2]
    assert sorted(os.listdir(uploaded)) == sorted(os.listdir(
        os.path.join(profile_dir(logdir.local_log_dir(workdir)), "steps_2-2")))
    err = capfd.readouterr().err
    assert f"in {uploaded}; open it with `tensorboard --logdir {board}`" in err


def test_which_steps_a_session_traces(tmp_path, capfd):
    config = tiny_config(tmp_path, **{"train.num_steps": 10, "train.profile_steps": "3:4"})
    spans = {start: (p.first, p.last) for start in (0, 4, 5, 6, 10)
             for p in [profiler.StepProfiler(config, str(tmp_path), start)]}
    assert spans == {0: (3, 6), 4: (5, 6), 5: (6, 6), 6: (None, None), 10: (None, None)}
    late = tiny_config(tmp_path, **{"train.num_steps": 10, "train.profile_steps": "11:1"})
    assert profiler.StepProfiler(late, str(tmp_path), 0).first is None
    assert "starts after train.num_steps=10" in capfd.readouterr().err
    off = profiler.StepProfiler(tiny_config(tmp_path), str(tmp_path), 0)
    assert off.first is None and off.end(1, None) == 0.0
    off.close()
    assert not os.path.exists(os.path.join(str(tmp_path), "tensorboard"))


def test_a_run_without_profile_steps_writes_no_profile(trained_run):
    assert os.path.isdir(os.path.join(trained_run, "tensorboard"))
    assert not os.path.exists(os.path.join(trained_run, "tensorboard", "plugins"))


def test_several_processes_name_their_files_apart(monkeypatch):
    monkeypatch.setattr(jax, "process_count", lambda: 4)
    monkeypatch.setattr(jax, "process_index", lambda: 2)
    assert [profiler._process_name(n) for n in (
        "t1v-w-0.xplane.pb", "t1v-w-0.trace.json.gz", "perfetto_trace.json.gz")] == [
        "t1v-w-0-process2.xplane.pb", "t1v-w-0-process2.trace.json.gz",
        "perfetto_trace-process2.json.gz"]


@pytest.mark.parametrize("value", ["5", "0:3", "2:0", "a:b", "2:3:4", "-1:2"])
def test_a_bad_value_is_one_line(value, tmp_path, capfd):
    code = main(["train", "--config", DEMO_CONFIG, "--workdir", str(tmp_path),
                 f"--config.train.profile_steps={value}"])
    lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"kjax: error: train.profile_steps={value!r}: give START:COUNT")
