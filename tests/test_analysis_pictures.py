"""What `kjax analyze` shows: Hangul labels in the bundled NanumGothic (not
romanised), a colorbar per heatmap, the pairs B shakes outlined, and a
refusal when --bf has nothing to shake (plain sentencepiece: no POS pairs)."""
import warnings

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import font_manager

from conftest import DEMO_CONFIG, tiny_overrides
from kjax.analysis import plots
from kjax.cli import main


def test_korean_label_is_drawn_in_the_bundled_font(tmp_path):
    assert plots.bundled_font_file() is not None     # the koreanize-matplotlib wheel
    assert plots.hangul_font() == "NanumGothic"
    labeller = plots.Labeller()
    assert labeller(["나는", "학교에서"]) == ["나는", "학교에서"] and labeller.note == ""
    fig, ax = plt.subplots()
    ax.set_xticks([0, 1])
    ax.set_xticklabels(labeller(["나는", "학교에서"]))
    labeller.apply(ax.get_xticklabels(), ["substantive", "postposition"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # "Glyph ... missing from font" fails
        fig.savefig(tmp_path / "label.png")
    for text in ax.get_xticklabels():
        used = font_manager.findfont(text.get_fontproperties(), fallback_to_default=False)
        assert used == plots.bundled_font_file(), used
    plt.close(fig)


def test_heatmaps_have_colorbars_and_the_shaken_pairs_outlined():
    fig, ax = plt.subplots()
    marked = np.zeros((5, 5), np.float32)
    marked[2, [0, 1]] = 1.0                         # a postposition → its substantive's tokens
    plots._heatmap(ax, np.random.default_rng(0).random((5, 5)), "α", marked)
    assert len(fig.axes) == 2                       # the panel and its colorbar
    outlined = [p for p in ax.patches if p.get_gid() == "shaken-pair"]
    assert sorted((p.get_xy()[1] + 0.5, p.get_xy()[0] + 0.5) for p in outlined) == \
        [(2.0, 0.0), (2.0, 1.0)]
    plt.close(fig)


def test_bf_without_pairs_is_refused_in_one_line(prepared, tmp_path, capfd):
    texts = tmp_path / "texts.txt"
    texts.write_text("나는 학교에 갔다.\n", encoding="utf-8")
    code = main(["analyze", "--config", DEMO_CONFIG, "--workdir", str(tmp_path / "run"),
                 "--texts", str(texts), "--out", str(tmp_path / "an"), "--bf", "0.3",
                 *tiny_overrides(str(prepared))])
    err = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1, err
    assert "--bf 0.3: nothing to shake" in err[0] and "no POS tags" in err[0]
    assert not list((tmp_path / "an").glob("*"))   # nothing written
