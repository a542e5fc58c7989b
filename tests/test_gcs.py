"""gs:// for real: kjax/paths.py and the verbs end to end against a local GCS
emulator (fake-gcs-server, tests/gcs.py), through the same gcsfs/epath path
production uses. (prepare-beam on gs://: tests/test_beam.py; two processes and
the wheel: tests/test_wheel.py.)"""
import json
import os

import pytest

from conftest import DEMO_CONFIG, tiny_overrides
from gcs import local_gs_folders
from kjax import paths
from kjax.cli import main


def test_the_file_layer_on_gcs(gs_root, tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "cache"))
    paths.write_json(f"{gs_root}/a/x.json", {"k": "값"})
    assert paths.read_json(f"{gs_root}/a/x.json") == {"k": "값"}
    assert paths.isfile(f"{gs_root}/a/x.json") and paths.isdir(f"{gs_root}/a")
    assert not paths.exists(f"{gs_root}/a/y.json") and paths.listdir(f"{gs_root}/none") == []
    paths.write_text(f"{gs_root}/a/b/y.txt", "둘")
    assert paths.listdir(f"{gs_root}/a") == ["b", "x.json"]
    assert paths.glob(f"{gs_root}/a/*.json") == [(f"{gs_root}/a/x.json",
                                                  len(paths.json_bytes({"k": "값"})))]
    assert paths.glob(f"{gs_root}/a/*/*.txt") == [(f"{gs_root}/a/b/y.txt", 3)]
    with paths.staged_dir(f"{gs_root}/out") as local:       # tools that write local files
        open(os.path.join(local, "f.txt"), "w").write("f")
        os.makedirs(os.path.join(local, "sub"))
        open(os.path.join(local, "sub", "g.txt"), "w").write("g")
    assert paths.walk_files(f"{gs_root}/out") == ["f.txt", "sub/g.txt"]
    paths.copy_tree(f"{gs_root}/out", str(tmp_path / "back"))
    assert open(tmp_path / "back" / "sub" / "g.txt").read() == "g"
    # The shard cache: one download per version of an object.
    first = paths.cached_copy(f"{gs_root}/a/b/y.txt", "shards")
    assert first.startswith(str(tmp_path / "cache")) and open(first).read() == "둘"
    assert paths.cached_copy(f"{gs_root}/a/b/y.txt", "shards") == first
    paths.write_text(f"{gs_root}/a/b/y.txt", "셋!")
    second = paths.cached_copy(f"{gs_root}/a/b/y.txt", "shards")
    assert second != first and open(second).read() == "셋!"
    paths.remove(f"{gs_root}/a/x.json")
    assert not paths.exists(f"{gs_root}/a/x.json")
    assert not local_gs_folders(tmp_path) and not local_gs_folders(os.getcwd())


def upload_demo_corpus(gs_root) -> str:
    from kjax.text.corpus import demo_corpus_files
    for f in demo_corpus_files():
        paths.upload(f, f"{gs_root}/corpus/{os.path.basename(os.path.dirname(f))}-"
                        f"{os.path.basename(f)}")
    return f"{gs_root}/corpus/*.txt"


def gs_overrides(gs_root, corpus, **extra) -> list[str]:
    return [*tiny_overrides("unused", **extra),
            f"--config.tokenizer.path={gs_root}/tok/sp", f"--config.data.dir={gs_root}/examples",
            f"--config.data.corpus={corpus}"]


def last_json(out: str) -> dict:
    return json.loads(out[out.rindex("\n{") + 1:] if "\n{" in out else out)


@pytest.mark.slow
def test_prepare_train_resume_eval_export_on_gcs(gs_root, tmp_path, monkeypatch, capsys):
    """Every path on gs://: tokenizer, prepare, train --stop-at, resume with the
    recorded config (no --config), eval, export, analyze, finetune (--init the
    gs:// run, data and outputs on gs://), then a damaged newest step: refused
    by --step, skipped by eval, moved aside by train. Nothing is written to a
    local folder named `gs:`; the shards are read from this host's cache."""
    from kjax.config import load_config
    from kjax.train import logdir
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(logdir, "LOCAL_MIRRORS", str(tmp_path / "mirror"))
    ov = gs_overrides(gs_root, upload_demo_corpus(gs_root))
    work = f"{gs_root}/runs/tiny"
    assert main(["tokenizer", "train", "--config", DEMO_CONFIG, *ov]) == 0
    assert paths.isfile(f"{gs_root}/tok/sp.model") and paths.isfile(f"{gs_root}/tok/sp.vocab")
    assert main(["prepare", "--config", DEMO_CONFIG, *ov]) == 0
    meta = paths.read_json(f"{gs_root}/examples/meta.json")
    assert meta["documents"] == 11 and meta["train_examples"] > 0
    assert main(["prepare", "--config", DEMO_CONFIG, *ov]) == 0      # resumes: all reused
    assert last_json(capsys.readouterr().out)["chunks_reused"] == meta["chunks"]

    assert main(["train", "--config", DEMO_CONFIG, *ov, "--workdir", work, "--stop-at", "3"]) == 0
    assert paths.listdir(f"{work}/checkpoints") == ["3"]
    recorded = f"{work}/kjax_config.py"            # written at the first step, loadable
    assert load_config(recorded).data.dir == f"{gs_root}/examples"
    capsys.readouterr()
    assert main(["train", "--workdir", work]) == 0                    # the recorded config
    captured = capsys.readouterr()
    assert f"using the config recorded in {recorded}" in captured.err
    assert last_json(captured.out)["final_step"] == 6
    assert sorted(paths.listdir(f"{work}/checkpoints")) == ["3", "6"]
    goodput = paths.read_json(f"{work}/logs/goodput.json")
    assert (goodput["sessions"], goodput["restarts"]) == (2, 1)
    assert os.listdir(tmp_path / "cache" / "shards")                  # read from the cache

    assert main(["eval", "--workdir", work]) == 0
    result = last_json(capsys.readouterr().out)
    assert result["step"] == 6 and 0 < result["mlm_loss"] < 10
    out = f"{gs_root}/export"
    assert main(["export", "--workdir", work, "--out", out]) == 0
    exported = paths.listdir(out)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "README.md",
                 "kjax_export.json"):
        assert name in exported, exported
    assert paths.read_json(f"{out}/kjax_export.json")["verified_max_abs_diff"]

    # analyze and finetune read the run's recorded config too, and write to gs://.
    assert main(["analyze", "--workdir", work, "--text", "대한민국은 민주공화국이다.",
                 "--out", f"{gs_root}/analysis"]) == 0
    assert "report.json" in paths.listdir(f"{gs_root}/analysis")
    from test_finetune import synthetic
    for split, seed in (("train", 0), ("dev", 1)):
        paths.write_text(f"{gs_root}/task/{split}.jsonl", "".join(
            json.dumps(r, ensure_ascii=False) + "\n" for r in synthetic("classify", 32, seed)))
    ft = f"{gs_root}/ft"
    assert main(["finetune", "--init", work, "--task", "classify", "--out", ft,
                 "--train", f"{gs_root}/task/train.jsonl", "--dev", f"{gs_root}/task/dev.jsonl",
                 "--config.finetune.epochs=1", "--config.finetune.batch_size=16",
                 "--config.finetune.max_seq_len=32"]) == 0
    assert f"using the config recorded in {recorded}" in capsys.readouterr().err
    assert {"summary.json", "summary.md", "metrics.json", "metrics.jsonl", "predictions_dev.jsonl",
            "learning_curve.png", "checkpoints"} <= set(paths.listdir(ft))
    assert paths.read_json(f"{ft}/summary.json")["init"] == work

    # A damaged newest step on gs://: refused when named, skipped by the
    # read-only tools, moved aside (never deleted) by train, which then resumes.
    chunks = [f for f in paths.walk_files(f"{work}/checkpoints/6")
              if f.startswith("state/") and "/d/" in f]
    biggest = max(chunks, key=lambda f: paths.size(f"{work}/checkpoints/6/{f}"))
    damaged = f"{work}/checkpoints/6/{biggest}"
    paths.write_bytes(damaged, bytes(paths.size(damaged)))          # zeroed
    capsys.readouterr()
    assert main(["eval", "--workdir", work, "--step", "6"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert main(["eval", "--workdir", work]) == 0
    assert last_json(capsys.readouterr().out)["step"] == 3
    assert main(["train", "--workdir", work]) == 0
    assert last_json(capsys.readouterr().out)["final_step"] == 6
    assert "damaged" in paths.listdir(f"{work}/checkpoints")
    moved = paths.walk_files(f"{work}/checkpoints/damaged")
    assert any(f.endswith(biggest) for f in moved), moved             # kept, not deleted
    assert not local_gs_folders(tmp_path) and not local_gs_folders(os.getcwd())


def test_a_config_that_differs_from_the_recorded_one_is_named(gs_root, capsys):
    """eval/export/... name the keys in which --config differs from the run's
    recorded config; without --config and without a record: a one-line error."""
    from kjax.config import load_config
    from kjax.config.recorded import flush_notes, record_config
    from kjax.pretrain.run_load import load_run
    work = f"{gs_root}/run"
    trained = load_config(DEMO_CONFIG, ["--config.model.hidden_size=64"])
    record_config(trained, work)
    assert load_config(f"{work}/kjax_config.py").to_dict() == trained.to_dict()
    again = load_run(DEMO_CONFIG, ["--config.train.num_steps=700"], workdir=work).config
    assert capsys.readouterr().err == ""   # held until the run's checkpoint restores
    flush_notes()
    err = capsys.readouterr().err
    assert "model.hidden_size: 128 → 64" not in err and "model.hidden_size: 64 → 128" in err
    assert f"train.num_steps: {trained.train.num_steps} → 700" in err
    assert again.model.hidden_size == 128
    assert load_run(None, [], workdir=work).config.model.hidden_size == 64
    flush_notes()
    assert "using the config recorded in" in capsys.readouterr().err
    assert main(["eval", "--workdir", f"{gs_root}/empty"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pass --config FILE" in err and "kjax_config.py" in err


def test_each_test_process_has_an_emulator_of_its_own(gcs_server, monkeypatch):
    """xdist's workers inherit the controller's environment; a worker that
    kept its URL rode on another's server and hung when that one stopped."""
    import gcs
    for name in ("KJAX_TEST_GCS_URL", "KJAX_TEST_GCS_OWNER", "STORAGE_EMULATOR_HOST",
                 "TENSORSTORE_GCS_HTTP_URL"):   # this process's, back after the test
        monkeypatch.setenv(name, os.environ[name])
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw-other")
    assert gcs.configure_environment() != gcs_server.url          # another worker: its own
    assert os.environ["STORAGE_EMULATOR_HOST"] == os.environ["KJAX_TEST_GCS_URL"]
    assert gcs.configure_environment() == os.environ["KJAX_TEST_GCS_URL"]  # kept in its owner
    # A second server on a port already served is refused, not silently shared.
    with pytest.raises(RuntimeError, match=f"did not start on {gcs_server.url}"):
        gcs.Emulator(gcs_server.url)
    assert gcs_server.process.poll() is None


def test_a_folder_whose_last_object_vanishes_mid_check_is_still_a_folder(gs_root, monkeypatch):
    """Two processes save into one gs:// folder: before the first checkpoint the
    only objects in it are their write probes, so one process's probe can vanish
    while the other checks the folder. The check asked twice (exists, then
    is_dir) and once called the folder a file; here the peer's probe is removed
    right after the first metadata query."""
    import gcsfs
    from kjax.checkpoint import storage
    folder = f"{gs_root}/run/checkpoints"
    peer = f"{folder}/.kjax-write-probe-1-peer"
    paths.write_text(peer, "kjax")
    real_info, queries = gcsfs.GCSFileSystem._info, []

    async def info_then_peer_unlinks(self, path, **kwargs):
        out = await real_info(self, path, **kwargs)
        if path.rstrip("/").endswith("run/checkpoints"):
            queries.append(out["type"])
            if len(queries) == 1:
                await self._rm_file(peer)
        return out
    monkeypatch.setattr(gcsfs.GCSFileSystem, "_info", info_then_peer_unlinks)
    storage.check_writable(folder)   # no "is a file, not a directory"
    assert queries[0] == "directory" and not paths.exists(peer)
    assert paths.listdir(folder) == []   # its own probe removed too
