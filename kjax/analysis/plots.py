"""PNG pictures of a norm-based analysis (matplotlib, Agg: no display needed).

- `<run>_layer<l>.png` for the chosen sentence: one column per head plus the
  whole layer; rows α (queries × keys), ‖f(x_j)‖ (bars over keys) and
  ‖α f(x)‖. Each panel is scaled to its own maximum (its colorbar): compare
  patterns across panels, read values from report.json. The pairs B shakes
  (METHODS Eq. 1: postposition query → its substantive's keys, the config's
  shake.variant) are outlined in red on every α and ‖α f(x)‖ panel, in the
  unshaken pictures too (where shaking would act).
- `correlation_by_class.png`, `postposition_share.png`,
  `received_by_class.png`, `fx_norm_cv.png`: summaries across layers.

Korean labels are drawn in NanumGothic, which the koreanize-matplotlib wheel
ships (a kjax dependency: nothing to install system-wide, works offline);
its font file is registered with matplotlib without importing that package
(its import changes global rcParams and needs distutils). Should no Hangul
font be found at all, labels are transliterated syllable by syllable
(Revised Romanisation letters) and the picture says so. Key labels are
coloured by token class.
"""
from __future__ import annotations

import os
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from kjax.analysis.inputs import CLASSES  # noqa: E402
from kjax.fonts import HANGUL_FONTS, bundled_font_file, hangul_font  # noqa: E402,F401

CLASS_COLORS = {"[CLS]": "#7f7f7f", "[SEP]": "#bcbd22", "punctuation": "#2ca02c",
                "postposition": "#d62728", "substantive": "#1f77b4", "other": "#000000",
                "all": "#9467bd"}
MAX_LABELLED = 64   # longer sentences get no per-token labels (they would overlap)

_INITIALS = "g kk n d tt r m b pp s ss - j jj ch k t p h".split()
_VOWELS = "a ae ya yae eo e yeo ye o wa wae oe yo u wo we wi yu eu ui i".split()
_FINALS = ("", "k", "k", "k", "n", "n", "n", "t", "l", "k", "m", "l", "l", "l", "p", "l",
           "m", "p", "p", "t", "t", "ng", "t", "t", "k", "t", "p", "t")


def romanize(text: str) -> str:
    out = []
    for c in text:
        o = ord(c) - 0xAC00
        if 0 <= o < 11172:
            initial = _INITIALS[o // 588]
            out.append(("" if initial == "-" else initial) + _VOWELS[o % 588 // 28]
                       + _FINALS[o % 28])
        else:
            out.append(c)
    return "".join(out)


class Labeller:
    """Token labels in a font that can draw them (or romanised)."""

    def __init__(self):
        self.font = hangul_font()
        self.note = "" if self.font else " (labels romanised: no Hangul font installed)"

    def __call__(self, labels):
        return list(labels) if self.font else [romanize(t) for t in labels]

    def apply(self, texts, classes):
        for text, cls in zip(texts, classes):
            text.set_color(CLASS_COLORS[cls])
            if self.font:
                text.set_fontfamily(self.font)


def _save(fig, path: str) -> str:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing")
        fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _bf_text(bf) -> str:
    bf = [float(x) for x in bf]
    return f"bf={bf[0]:g}" if len(set(bf)) == 1 else "bf=" + ",".join(f"{x:g}" for x in bf)


# ---- one sentence, one layer per picture ------------------------------------------------

def _heatmap(ax, matrix, title, marked=None):
    top = float(np.max(matrix)) or 1.0
    image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=top, aspect="equal",
                      interpolation="nearest")
    bar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.02)
    bar.ax.tick_params(labelsize=6)
    ax.set_title(f"{title}\nmax {top:.3g}", fontsize=8)
    if marked is not None:
        mark_pairs(ax, marked)


def mark_pairs(ax, marked) -> int:
    """Outlines each cell (query i, key j) with B[i, j] != 0 in red; returns how many."""
    from matplotlib.patches import Rectangle
    cells = np.argwhere(np.asarray(marked) != 0)
    for i, j in cells:
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="#ff2020",
                               linewidth=1.2, gid="shaken-pair"))
    return len(cells)


def _bars(ax, values, classes, title):
    ax.bar(np.arange(len(values)), values, color=[CLASS_COLORS[c] for c in classes], width=0.8)
    ax.set_xlim(-0.5, len(values) - 0.5)
    ax.set_title(f"{title}\nmax {float(np.max(values)):.3g}", fontsize=8)
    ax.tick_params(axis="y", labelsize=6)


def sentence_heatmaps(result: dict, item, run: str, bf, out_dir: str,
                      marked=None) -> list[str]:
    """One PNG per layer for one sentence; returns the paths. `marked`: B
    [n, n] of the sentence (its nonzero cells are outlined)."""
    labeller = Labeller()
    labels, classes = labeller(item.labels), [CLASSES[c] for c in item.classes]
    n = len(labels)
    layers, heads = result["alpha"].shape[:2]
    panel = min(6.0, max(2.2, 0.13 * n))
    tick = np.arange(n) if n <= MAX_LABELLED else np.arange(0, n, max(1, n // 16))
    paths = []
    for layer in range(layers):
        cols = heads + 1
        fig, axes = plt.subplots(3, cols, figsize=(panel * cols * 1.3, panel * 2.3 + 1.2),
                                 gridspec_kw={"height_ratios": [1, 0.3, 1]}, squeeze=False)
        for h in range(cols):
            whole = h == heads
            name = "layer (all heads)" if whole else f"head {h}"
            alpha = result["layer_alpha"][layer] if whole else result["alpha"][layer, h]
            fx = result["layer_fx_norm"][layer] if whole else result["fx_norm"][layer, h]
            weighted = (result["layer_weighted_norm"][layer] if whole
                        else result["alpha"][layer, h] * result["fx_norm"][layer, h][None, :])
            _heatmap(axes[0, h], alpha, f"{name}: α" + (" (mean)" if whole else ""), marked)
            _bars(axes[1, h], fx, classes, f"‖f(x)‖" + (" = ‖Σ_h f^h‖" if whole else ""))
            _heatmap(axes[2, h], weighted, "‖Σ_h α f(x)‖" if whole else "‖α f(x)‖", marked)
            for row in range(3):
                ax = axes[row, h]
                ax.set_xticks(tick)
                ax.set_xticklabels([labels[i] for i in tick] if row == 2 else [],
                                   rotation=90, fontsize=6)
                if row != 1:
                    ax.set_yticks(tick)
                    ax.set_yticklabels([labels[i] for i in tick] if h == 0 else [], fontsize=6)
                labeller.apply(ax.get_xticklabels(), [classes[i] for i in tick])
                if row != 1:   # the bars' y ticks are numbers
                    labeller.apply(ax.get_yticklabels(), [classes[i] for i in tick])
        axes[0, 0].set_ylabel("query i")
        axes[2, 0].set_ylabel("query i")
        fig.supxlabel("key j  (colour: [CLS] grey, [SEP] olive, punctuation green, postposition "
                      "red, substantive blue)" + labeller.note
                      + ("; red squares: the pairs B shakes (Eq. 1)"
                         if marked is not None and np.any(marked) else ""), fontsize=9)
        fig.suptitle(f"{run} ({_bf_text(bf)}), layer {layer}: attention weight α vs "
                     f"‖f(x)‖ vs ‖α f(x)‖ — each panel scaled to its own max", fontsize=11)
        paths.append(_save(fig, os.path.join(out_dir, f"{run}_layer{layer}.png")))
    return paths


# ---- summaries across layers ------------------------------------------------------------

def _floats(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)   # JSON null → NaN


STYLES = {"unshaken": "-", "shaken": "--"}


def plot_correlations(report: dict, path: str) -> str:
    from matplotlib.lines import Line2D
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    drawn = []
    for run, summary in report["runs"].items():
        for cls, values in summary["spearman"].items():
            per_layer = _floats(values["per_layer"])
            if np.all(np.isnan(per_layer)):
                continue   # the class never occurs (e.g. postpositions without POS tags)
            ax.plot(np.arange(len(per_layer)), per_layer, STYLES[run], marker="o",
                    color=CLASS_COLORS[cls])
            drawn += [cls] if cls not in drawn else []
    handles = [Line2D([], [], color=CLASS_COLORS[c], marker="o", label=c) for c in drawn]
    if len(report["runs"]) > 1:
        handles += [Line2D([], [], color="black", linestyle=STYLES[run],
                           label=f"{run} ({_bf_text(s['bf'])})")
                    for run, s in report["runs"].items()]
    ax.axhline(0.0, color="black", linewidth=0.6)
    ax.set_xlabel("layer")
    ax.set_ylabel("Spearman ρ(α, ‖f(x)‖), mean over heads")
    ax.set_ylim(-1.05, 1.05)
    ax.set_xticks(range(report["model"]["layers"]))
    ax.set_title("Does attention weight go to tokens with small ‖f(x)‖? (by key class)\n"
                 "a missing point: ‖f(x)‖ of that class is constant there (ρ undefined)",
                 fontsize=10)
    ax.legend(handles=handles, fontsize=7, ncol=2, loc="best")
    return _save(fig, path)


def plot_postposition_share(report: dict, path: str) -> str | None:
    runs = {k: v["postposition_to_substantive"] for k, v in report["runs"].items()}
    if not any(r["count"] for r in runs.values()):
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    layers = np.arange(report["model"]["layers"])
    for run, shares in runs.items():
        for kind, color in (("by_weight", "#1f77b4"), ("by_norm", "#ff7f0e")):
            ax.plot(layers, _floats(shares[kind]["per_layer"]), STYLES[run], marker="o",
                    color=color, label=f"{kind.replace('_', ' ')}, {run} "
                    f"({_bf_text(report['runs'][run]['bf'])})")
    baseline = next(iter(runs.values()))["uniform_baseline"]
    ax.axhline(baseline, color="grey", linestyle=":", label="uniform attention")
    ax.set_xlabel("layer")
    ax.set_ylabel("share of the postposition's attention")
    ax.set_xticks(layers)
    ax.set_ylim(0, None)
    count = next(iter(runs.values()))["count"]
    ax.set_title(f"Postposition → its substantive ({count} postpositions), whole layer")
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_received(report: dict, path: str) -> str:
    summary = report["runs"]["unshaken"]["received"]
    layers = report["model"]["layers"]
    cols = min(layers, 4)
    rows = -(-layers // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 3.0 * rows), squeeze=False,
                             sharey=True)
    x = np.arange(len(CLASSES))
    for layer in range(rows * cols):
        ax = axes.flat[layer]
        if layer >= layers:
            ax.axis("off")
            continue
        weight = [_floats(summary[c]["by_weight"])[layer] for c in CLASSES]
        norm = [_floats(summary[c]["by_norm"])[layer] for c in CLASSES]
        ax.bar(x - 0.2, weight, 0.4, label="by weight α", color="#1f77b4")
        ax.bar(x + 0.2, norm, 0.4, label="by norm ‖αf(x)‖", color="#ff7f0e")
        ax.set_xticks(x)
        ax.set_xticklabels(CLASSES, rotation=45, ha="right", fontsize=7)
        ax.set_title(f"layer {layer}", fontsize=9)
    axes[0, 0].set_ylabel("share of all attention received")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("Which token classes receive attention (unshaken, whole layer)")
    fig.tight_layout()
    return _save(fig, path)


def plot_cv(report: dict, path: str) -> str:
    runs = report["runs"]
    fig, axes = plt.subplots(1, len(runs), figsize=(4.5 * len(runs), 3.6), squeeze=False)
    for ax, (run, summary) in zip(axes[0], runs.items()):
        cv = _floats(summary["fx_norm_cv"]["per_head"])
        image = ax.imshow(cv, cmap="magma", aspect="auto", vmin=0.0)
        if cv.size <= 400:
            for (layer, head), value in np.ndenumerate(cv):
                ax.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if value < np.nanmax(cv) * 0.6 else "black")
        ax.set_xticks(range(cv.shape[1]))
        ax.set_yticks(range(cv.shape[0]))
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(f"{run}: mean CV {summary['fx_norm_cv']['mean']:.3f}", fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.05)
    fig.suptitle("Coefficient of variation of ‖f(x)‖ per head")
    fig.tight_layout()
    return _save(fig, path)


def summary_plots(report: dict, out_dir: str) -> list[str]:
    paths = [plot_correlations(report, os.path.join(out_dir, "correlation_by_class.png")),
             plot_postposition_share(report, os.path.join(out_dir, "postposition_share.png")),
             plot_received(report, os.path.join(out_dir, "received_by_class.png")),
             plot_cv(report, os.path.join(out_dir, "fx_norm_cv.png"))]
    return [p for p in paths if p]
