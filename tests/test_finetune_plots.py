"""Fine-tune learning curves keep their legend off the data, the
train line spans the whole run, and every `kjax finetune` prints its dev and
test results at the end."""
import json
import os

import numpy as np
import pytest

from conftest import DEMO_CONFIG, tiny_overrides
from kjax.finetune.plots import learning_curve_figure
from kjax.train.metrics import read_metrics
from test_finetune import env  # noqa: F401  (the module's fixture: tokenizer + task files)


def _legends(fig):
    return list(fig.legends) + [a.get_legend() for a in fig.axes if a.get_legend()]


def _points(fig) -> np.ndarray:
    """Every plotted vertex in display coordinates."""
    pts = [line.get_transform().transform(line.get_xydata()) for a in fig.axes
           for line in a.get_lines()]
    return np.concatenate(pts)


def test_the_legend_covers_no_point():
    """Dev points in the top-right and middle-right corners, where the old
    legends sat, and a train loss across the whole width."""
    steps = np.arange(1, 41)
    rows = [{"step": int(s), "split": "train", "loss": float(1 / s)} for s in steps]
    rows += [{"step": s, "split": "dev", "accuracy@bf+0": v, "accuracy@bf+0.5": v / 2}
             for s, v in ((10, 0.2), (20, 0.4), (30, 0.6), (40, 1.0))]
    fig = learning_curve_figure(rows, "accuracy", "런_한국어")
    fig.canvas.draw()
    [legend] = _legends(fig)
    assert [t.get_text() for t in legend.get_texts()] == [
        "train loss", "dev accuracy@bf+0", "dev accuracy@bf+0.5"]
    box = legend.get_window_extent()
    pts = _points(fig)
    inside = ((pts[:, 0] >= box.x0) & (pts[:, 0] <= box.x1) &
              (pts[:, 1] >= box.y0) & (pts[:, 1] <= box.y1))
    assert not inside.any(), pts[inside]
    for ax in fig.axes:            # nor any part of the plotting area
        assert not box.overlaps(ax.get_window_extent())
    assert fig.axes[0].get_title().startswith("kjax fine-tuning: 런_한국어")
    import matplotlib.pyplot as plt
    plt.close(fig)


@pytest.mark.slow
def test_train_line_reaches_the_last_step_and_results_are_printed(env, tmp_path, capsys):  # noqa: F811
    """log_every 5 over 12 steps (old runs logged train loss at 1, 5, 10 and
    stopped there, while dev went on to 12); dev and test results printed."""
    from kjax.cli import main
    train, dev = env["files"]["classify"]
    out = str(tmp_path / "run")
    assert main(["finetune", "--config", DEMO_CONFIG, *tiny_overrides(str(env["tmp"])),
                 "--task", "classify", "--train", train, "--dev", dev, "--test", dev,
                 "--init", "none", "--out", out, "--config.finetune.epochs=3",
                 "--config.finetune.batch_size=16", "--config.finetune.max_seq_len=32",
                 "--config.finetune.log_every=5", "--config.finetune.checkpoint_every=1000"]) == 0
    printed = capsys.readouterr().out
    rows = read_metrics(out)
    last = max(r["step"] for r in rows)
    assert last == 12 == max(r["step"] for r in rows if r["split"] == "dev")
    fig = learning_curve_figure(rows, "macro_f1", "run")
    [train_line] = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "train loss"]
    assert max(train_line.get_xdata()) == last
    with open(os.path.join(out, "metrics.json"), encoding="utf-8") as f:
        result = json.load(f)["results"]["+0"]
    for split in ("dev", "test"):
        [line] = [ln for ln in printed.splitlines() if ln.startswith(f"{split}: ")]
        for name in ("accuracy", "macro_f1"):
            assert f"{name} {result[split][name]:.4f}" in line, line


def test_the_progress_legend_covers_no_point():
    """--every-checkpoint's progress.png: lines up to the top right, a
    Korean run name, the baseline; the legend lies outside the axes."""
    from kjax.finetune.scores_by_step import progress_figure
    curves = {"사전학습_A": [(100, 0.5, 0.02), (200, 0.7, 0.01), (300, 0.9, 0.0)],
              "run_b ft+0 inf+0.5": [(100, 0.4, 0.0), (300, 0.8, 0.05)]}
    fig = progress_figure(curves, "accuracy", 0.33)
    fig.canvas.draw()
    [legend] = _legends(fig)
    texts = {t.get_text(): t for t in legend.get_texts()}
    assert set(texts) == {*curves, "baseline (no model)"}
    assert texts["사전학습_A"].get_fontfamily() == ["NanumGothic"]   # Hangul drawn
    box = legend.get_window_extent()
    for ax in fig.axes:
        assert not box.overlaps(ax.get_window_extent())
    import matplotlib.pyplot as plt
    plt.close(fig)
