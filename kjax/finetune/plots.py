"""The learning-curve PNG of a fine-tuning run: training loss by step and the
dev selection metric (one line per inference bf) on a second axis."""
from __future__ import annotations

import os

from kjax.train.metrics import read_metrics


def plot_learning_curve(out_dir: str, metric: str) -> str | None:
    rows = read_metrics(out_dir)
    if not rows:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    # Rows keyed by step: a resumed run may log a step twice.
    loss = sorted({r["step"]: r["loss"] for r in rows
                   if r["split"] == "train" and "loss" in r}.items())
    if loss:
        ax.plot(*zip(*loss), "-", color="tab:blue", label="train loss")
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.grid(alpha=0.3)
    dev_keys = sorted({k for r in rows if r["split"] == "dev" for k in r
                       if k.startswith(metric + "@")})
    if dev_keys:
        right = ax.twinx()
        for key in dev_keys:
            pts = sorted({r["step"]: r[key] for r in rows
                          if r["split"] == "dev" and key in r}.items())
            right.plot(*zip(*pts), "o--", label=f"dev {key}")
        right.set_ylabel(f"dev {metric}")
        right.legend(loc="center right", fontsize=8)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(f"kjax fine-tuning: {os.path.basename(os.path.abspath(out_dir))}")
    path = os.path.join(out_dir, "learning_curve.png")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
