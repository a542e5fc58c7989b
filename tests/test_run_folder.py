"""A run is one folder (kjax/pretrain/run_folder.py) and its config is loaded
once (kjax/pretrain/run_load.py): a run trained in directory A with relative
paths, moved to B, is evaluated, exported (logits through transformers),
asked to fill masks, fine-tuned from and resumed — exactly — from a third
directory C; the plain resume reads kjax_config.py once; a run recorded
before runs kept their files still opens, with a note."""
import json
import os
import shutil

import pytest

from conftest import DEMO_CONFIG, tiny_config, tiny_overrides
from kjax.cli import main
from kjax.config.recorded import RECORDED_CONFIG
from kjax.train.metrics import read_metrics


def train_losses(workdir):
    return {r["step"]: r["loss"] for r in read_metrics(workdir) if r["split"] == "train"}


def relative_overrides(prepared, cwd):
    """The tiny run's overrides with its tokenizer and data named relative to `cwd`."""
    rel = os.path.relpath(str(prepared), str(cwd))
    return tiny_overrides(rel)


class Reads:
    """Counts the reads of kjax_config.py files: loads of a config file
    (kjax/config/load.py `_read_file`) and whole-file reads through kjax.paths."""

    def __init__(self, monkeypatch):
        from kjax import paths
        from kjax.config import load
        self.files = []
        real_load, real_bytes = load._read_file, paths.read_bytes

        def loading(path):
            self.note(path)
            return real_load(path)

        def reading(path):
            self.note(path)
            return real_bytes(path)
        monkeypatch.setattr(load, "_read_file", loading)
        monkeypatch.setattr(paths, "read_bytes", reading)

    def note(self, path):
        if str(path).endswith(RECORDED_CONFIG):
            self.files.append(str(path))


@pytest.mark.slow
def test_a_run_moved_works_from_anywhere(prepared, trained_run, tmp_path, monkeypatch, capsys):
    a, b, c = (tmp_path / "a", tmp_path / "b" / "elsewhere", tmp_path / "c" / "deeper")
    for folder in (a, b, c):
        folder.mkdir(parents=True)
    # Trained in A with relative paths (as a user in a checkout would), stopped at 3.
    monkeypatch.chdir(a)
    overrides = relative_overrides(prepared, a)
    assert main(["train", "--config", DEMO_CONFIG, *overrides, "--workdir", "run",
                 "--stop-at", "3"]) == 0
    recorded = (a / "run" / RECORDED_CONFIG).read_text()
    assert "'{run}/tokenizer/sp'" in recorded and f"'{prepared}/examples'" in recorded
    assert (a / "run" / "tokenizer" / "sp.model").is_file()
    run = str(b / "run")
    shutil.move(str(a / "run"), run)
    monkeypatch.chdir(c)   # where A's relative paths name nothing
    assert not os.path.exists(os.path.join(os.path.relpath(str(prepared), str(a)), "tok"))
    capsys.readouterr()

    # A plain resume reads the run's config once and continues exactly.
    reads = Reads(monkeypatch)
    assert main(["train", "--workdir", run]) == 0
    assert reads.files == [os.path.join(run, RECORDED_CONFIG)]
    monkeypatch.undo()
    monkeypatch.chdir(c)
    straight, resumed = train_losses(trained_run), train_losses(run)
    assert sorted(resumed) == sorted(straight) == list(range(1, 7))
    assert all(resumed[s] == straight[s] for s in straight), (resumed, straight)
    capsys.readouterr()

    assert main(["eval", "--workdir", run]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 6
    assert main(["fill-mask", "--workdir", run, "--json", "오늘 날씨[MASK] 좋네요."]) == 0
    answers = json.loads(capsys.readouterr().out.splitlines()[0])
    assert answers["step"] == 6 and len(answers["masks"][0]) == 5

    # export from C: the folder's tokenizer, logits as kjax computes them
    assert main(["export", "--workdir", run, "--out", "hf"]) == 0
    from test_export import assert_export_matches
    assert_export_matches(tiny_config(prepared), run, str(c / "hf"))

    # fine-tuning from the moved run, its tokenizer and config found inside it
    from test_finetune import synthetic, write_jsonl
    train_file = write_jsonl(c / "classify.jsonl", synthetic("classify", 32, 0))
    assert main(["finetune", "--task", "classify", "--train", train_file, "--init", run,
                 "--out", "ft", "--config.finetune.max_seq_len=32",
                 "--config.finetune.batch_size=16", "--config.finetune.epochs=1"]) == 0
    assert os.path.isfile(c / "ft" / "summary.json")


def test_a_plain_resume_reads_the_recorded_config_once(trained_run, tmp_path, monkeypatch):
    """`kjax train --workdir W` of a finished run: one read of W/kjax_config.py
    (the loader's), none by the resolution, the resume policy or the trainer.
    (The moved run's resume above counts the same over steps that record.)"""
    run = str(tmp_path / "run")
    shutil.copytree(trained_run, run)
    reads = Reads(monkeypatch)
    assert main(["train", "--workdir", run]) == 0
    assert reads.files == [os.path.join(run, RECORDED_CONFIG)]


def test_a_run_recorded_before_runs_kept_their_files_still_opens(prepared, trained_run,
                                                                 tmp_path, monkeypatch, capsys):
    """An older record (relative paths, no tokenizer inside): read against the
    current directory, as then, with a one-line note; from another directory,
    the tokenizer is not found, as then."""
    from kjax.config.load import load_config
    from kjax.config.recorded import write_config_file
    from kjax.pretrain.run_load import load_run
    old, here = tmp_path / "old", tmp_path / "here"
    here.mkdir()
    shutil.copytree(trained_run, old)
    shutil.rmtree(old / "tokenizer")
    config = load_config(str(old / RECORDED_CONFIG))
    config.tokenizer.path = os.path.relpath(f"{prepared}/tok/sp", here)
    config.data.dir = os.path.relpath(f"{prepared}/examples", here)
    write_config_file(config, str(old / RECORDED_CONFIG), "an older run's")
    monkeypatch.chdir(here)
    assert main(["fill-mask", "--workdir", str(old), "오늘 날씨[MASK] 좋네요."]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "relative paths" in line]
    assert len(notes) == 1 and "tokenizer.path=" in notes[0] and str(here) in notes[0]
    run = load_run(None, [], workdir=str(old)).config
    assert run.tokenizer.path == f"{prepared}/tok/sp"
    assert run.data.dir == f"{prepared}/examples"
    monkeypatch.chdir(tmp_path)
    assert main(["fill-mask", "--workdir", str(old), "오늘 날씨[MASK] 좋네요."]) == 2
    assert "not found" in capsys.readouterr().err


def test_a_run_in_a_bucket_names_its_own_tokenizer(trained_run, gs_root):
    """Copied to gs://, the recorded config names the tokenizer inside the
    bucket's copy of the run, and it opens from there."""
    from kjax import paths
    from kjax.pretrain.run_load import load_run
    from kjax.tokens.factory import open_tokenizer
    run = f"{gs_root}/run"
    for name in (RECORDED_CONFIG, "tokenizer/sp.model", "tokenizer/sp.vocab"):
        paths.write_bytes(f"{run}/{name}", open(os.path.join(trained_run, name), "rb").read())
    config = load_run(None, [], workdir=run).config
    assert config.tokenizer.path == f"{run}/tokenizer/sp"
    assert open_tokenizer(config).vocab_size == config.model.vocab_size


def test_the_kept_tokenizer_wins_over_the_file_it_was_copied_from(prepared, trained_run,
                                                                  tmp_path, capsys):
    """A --config that names the tokenizer the run was copied from uses the run's
    copy (no note: the same bytes); one whose files hold another vocabulary is
    named in a note, and the copy is used still."""
    from kjax.config.recorded import take_notes
    from kjax.pretrain.run_load import load_run
    run = str(tmp_path / "run")
    shutil.copytree(trained_run, run)
    take_notes()
    same = load_run(DEMO_CONFIG, tiny_overrides(str(prepared)), workdir=run).config
    assert same.tokenizer.path == os.path.join(run, "tokenizer", "sp")
    assert not [n for n in take_notes() if "keeps its own" in n]
    other = tmp_path / "other"
    other.mkdir()
    for suffix in (".model", ".vocab"):
        (other / f"sp{suffix}").write_bytes(b"another vocabulary")
    load_run(DEMO_CONFIG, tiny_overrides(str(prepared), **{"tokenizer.path": f"{other}/sp"}),
             workdir=run)
    [line] = [n for n in take_notes() if "keeps its own" in n]
    assert f"{run}/tokenizer/sp" in line and f"{other}/sp" in line


def test_an_average_is_a_run_folder_of_its_own(trained_run, tmp_path):
    """`kjax average` writes OUT with the base's tokenizer inside it: OUT moved,
    its config names the copy in the new place, and the tokenizer opens."""
    from kjax.pretrain.run_load import load_run
    from kjax.tokens.factory import open_tokenizer
    out = tmp_path / "avg"
    assert main(["average", "--workdir", trained_run, "--steps", "3,6", "--out", str(out)]) == 0
    assert "'{run}/tokenizer/sp'" in (out / RECORDED_CONFIG).read_text()
    moved = tmp_path / "elsewhere" / "avg"
    shutil.move(str(out), str(moved))
    config = load_run(None, [], workdir=str(moved)).config
    assert config.tokenizer.path == os.path.join(str(moved), "tokenizer", "sp")
    assert open_tokenizer(config).vocab_size == config.model.vocab_size
