"""Progress that tells the truth (kjax/progress.py): outside a terminal, plain
lines with count/total, ETA and figures; tokenizer training, prepare and
train report what is done (not dispatched), and eval results reach stderr."""
import re

import pytest

from conftest import tiny_config
from kjax.progress import Progress


def _lines(err: str) -> list[str]:
    return [line for line in err.replace("\r", "\n").splitlines() if line.strip()]


def test_plain_lines_with_total_eta_and_figures(capfd):
    bar = Progress("train", total=10, initial=2, unit="step", every_s=0)
    bar.update(1, loss="6.910")
    bar.update(2)
    bar.close()
    bar.close()                                   # a second close prints nothing
    lines = _lines(capfd.readouterr().err)
    assert [re.match(r"train: (\d+)/10 step \((\d+)%\)", x).groups() for x in lines] == \
        [("3", "30"), ("5", "50"), ("5", "50")]
    assert "ETA" not in lines[0] and lines[0].endswith("| loss 6.910")   # no rate yet
    assert "ETA" in lines[1] and "step/s" in lines[1] and lines[1].endswith("| loss 6.910")
    quiet = Progress("prepare", unit="B", unit_scale=True, every_s=3600)
    quiet.set(2_500_000)
    quiet.close()                                 # only the final state
    (line,) = _lines(capfd.readouterr().err)
    assert line.startswith("prepare: 2.5M B ") and "ETA" not in line
    Progress("off", total=3, enabled=False).update(3)
    assert capfd.readouterr().err == ""


@pytest.mark.slow
def test_tokenizer_prepare_and_train_report_progress(tmp_path, capfd, monkeypatch):
    from kjax.pretrain.prepare import prepare
    from kjax.pretrain.trainer import train
    from kjax.tokens.factory import train_tokenizer
    monkeypatch.setenv("KJAX_LOG_EVERY_S", "0")
    config = tiny_config(tmp_path, **{"train.num_steps": 4, "train.eval_every": 2,
                                      "train.log_every": 2, "train.checkpoint_every": 4})
    train_tokenizer(config)
    err = _lines(capfd.readouterr().err)
    read = [int(re.match(r"tokenizer: reading the corpus: ([\d,]+) sentence", x)[1]
                .replace(",", "")) for x in err if x.startswith("tokenizer: reading")]
    assert read and read == sorted(read) and read[-1] > 100
    assert re.search(r"tokenizer: training the sentencepiece vocabulary: done in 0:\d\d:\d\d",
                     err[-1])
    prepare(config)
    err = _lines(capfd.readouterr().err)
    assert re.match(r"prepare: [\d.]+k/[\d.]+k B \(100%\) .* \| chunks \d+ examples \d+", err[-1])
    train(config, str(tmp_path / "run"))
    err = _lines(capfd.readouterr().err)
    steps = [int(re.match(r"train: (\d)/4 step", x)[1]) for x in err if x.startswith("train:")]
    assert steps == sorted(steps) and steps[-1] == 4 and set(steps) == {1, 2, 3, 4}
    evals = [x for x in err if x.startswith("eval at step ")]
    assert [x.split(":")[0] for x in evals] == ["eval at step 2", "eval at step 4"]
    assert re.search(r"mlm_accuracy \d\.\d{4}", evals[0]) and " loss " in evals[0]


def test_the_loss_curve_draws_every_objective():
    from kjax.train.metrics import loss_lines
    rows = [{"split": "train", "step": s, "loss": 9.0, "mlm_loss": 7.0, "nsp_loss": 0.7,
             "hypernym_loss": 3.0, "sense_loss": 0.5, "verb_loss": 2.0} for s in (1, 2)]
    rows.append({"split": "eval", "step": 2, "mlm_loss": 6.5, "verb_loss": 1.9})
    lines = [(split, key, len(pts)) for split, key, _, pts in loss_lines(rows)]
    assert lines == [("train", "mlm_loss", 2), ("train", "nsp_loss", 2),
                     ("train", "hypernym_loss", 2), ("train", "sense_loss", 2),
                     ("train", "verb_loss", 2), ("eval", "mlm_loss", 1), ("eval", "verb_loss", 1)]
