"""The learning-curve PNG of a fine-tuning run: training loss by step and the
dev selection metric (one line per inference bf) on a second axis.

The legend sits below the axes, outside them, so it covers no point however
the curves fall (inside the axes it hid dev points); the run logs
its training loss at every evaluation too, the last step included, so the
train line spans the whole run (kjax/finetune/run.py). Text is drawn in the
Hangul font of kjax/fonts.py (a run folder may have a Korean name).
"""
from __future__ import annotations

import os

from kjax.train.metrics import read_metrics


def learning_curve_figure(rows: list[dict], metric: str, title: str):
    """The figure (matplotlib, Agg) of metrics.jsonl `rows`; None when empty."""
    if not rows:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from kjax.fonts import hangul_font
    font = hangul_font()
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    # Rows keyed by step: a resumed run may log a step twice.
    loss = sorted({r["step"]: r["loss"] for r in rows
                   if r["split"] == "train" and "loss" in r}.items())
    if loss:
        ax.plot(*zip(*loss), "-", color="tab:blue", label="train loss")
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    dev_keys = sorted({k for r in rows if r["split"] == "dev" for k in r
                       if k.startswith(metric + "@")})
    if dev_keys:
        right = ax.twinx()
        for i, key in enumerate(dev_keys):   # colours after the train line's C0
            pts = sorted({r["step"]: r[key] for r in rows
                          if r["split"] == "dev" and key in r and r[key] is not None}.items())
            if pts:
                right.plot(*zip(*pts), "o--", color=f"C{i % 9 + 1}", label=f"dev {key}")
        right.set_ylabel(f"dev {metric}")
        more = right.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=min(len(handles), 3),
                   frameon=False, prop={"family": font or "sans-serif", "size": 8})
    ax.set_title(f"kjax fine-tuning: {title}", fontfamily=font or "sans-serif")
    return fig


def plot_learning_curve(out_dir: str, metric: str) -> str | None:
    fig = learning_curve_figure(read_metrics(out_dir), metric,
                                os.path.basename(os.path.abspath(out_dir)))
    if fig is None:
        return None
    import matplotlib.pyplot as plt
    path = os.path.join(out_dir, "learning_curve.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
