"""Pretraining-progress curves (METHODS §1.6 "the longer the pretraining, the
larger the gain", SHAKE Fig. 4; §2.7 KorQuAD F1 vs pretraining step, UKNOW
Fig. 48–49): every saved step of one pretraining run fine-tuned with the same
data, settings and seeds, and the dev score plotted against the step.

    OUT/step<S>/...        each step's experiment (run_all: seeds, sweep, summary)
    OUT/progress.json      per step and (fine-tune bf, inference bf): mean, std, n
    OUT/progress.png       score vs pretraining step (mean ± std over seeds), one
                           line per combination, plus the lines of earlier
                           progress.json files given by --compare (other runs)

The data are read and tokenized once; each step only restores its weights.
"""
from __future__ import annotations

import json
import os

import jax

from kjax import paths
from kjax.errors import KjaxError
from kjax.finetune.experiment import make_tuner, run_all
from kjax.finetune.pretrained import resolve_checkpoint
from kjax.finetune.trainer import write_json
from kjax.pretrain.trainer import PREEMPTED_EXIT, StopSignal


def checkpoint_steps(init: str) -> tuple[str, list[int]]:
    directory, step = resolve_checkpoint(init)
    if step is not None:
        raise KjaxError(f"--every-checkpoint --init {init}: give the pretraining workdir or its "
                        f"checkpoints/ directory, not one step")
    return directory, sorted(int(d) for d in paths.listdir(directory) if d.isdigit())


def run_progress(config, ft, task: str, train: str, dev: str | None, test: str | None,
                 init: str, out: str, seeds: list[int] | None = None, sweep: bool = False,
                 fmt: str = "auto", compare: list[str] = (), progress: bool = True,
                 tokenizer=None) -> dict:
    directory, steps = checkpoint_steps(init)
    compared = [_read_curves(path) for path in compare]   # a bad --compare fails first
    tuner = make_tuner(config, ft, task, train, dev, test, None, sweep, fmt, tokenizer)
    with StopSignal() as stop:   # SIGTERM: the running experiment saves and stops
        return _run_steps(tuner, task, directory, steps, out, seeds or [ft.seed], sweep,
                          compared, progress, stop)


def _run_steps(tuner, task, directory, steps, out, seeds, sweep, compared, progress,
               stop) -> dict:
    points = []
    for number, step in enumerate(steps, 1):
        tuner.init, tuner._pretrained = paths.join(directory, str(step)), None
        summary = run_all(tuner, paths.join(out, f"step{step}"), seeds, sweep, progress,
                          stop=stop)
        if summary.get("preempted"):
            return summary
        if stop.received and number < len(steps) and jax.process_count() == 1:
            return {**summary, "preempted": True, "exit_code": PREEMPTED_EXIT,
                    "message": f"fine-tuning {paths.join(out, f'step{step}')}: stopped by a "
                               f"preemption signal after finishing it; run the same command "
                               f"to resume"}
        for row in summary["rows"]:
            stat = row["dev"].get(tuner.metric, {"mean": None, "std": None, "n": 0})
            points.append({"step": step, "bf_train": row["bf_train"],
                           "bf_infer": row["bf_infer"], **stat})
    result = {"task": task, "init": directory, "metric": tuner.metric, "points": points,
              "baseline": summary["baseline"].get("dev", {}).get(tuner.metric)}
    if jax.process_index() == 0:
        write_json(paths.join(out, "progress.json"), result)
        label = paths.name(out.rstrip("/"))
        curves = {**_curves(result, label), **{k: v for c in compared for k, v in c.items()}}
        result["png"] = plot_progress(curves, tuner.metric, result["baseline"],
                                      paths.join(out, "progress.png"))
    return result


def _curves(result: dict, label: str) -> dict:
    """{line label: [(step, mean, std)]}, one line per (fine-tune bf, inference bf)."""
    combos = sorted({(p["bf_train"], p["bf_infer"]) for p in result["points"]})
    out = {}
    for bf_train, bf_infer in combos:
        name = label if len(combos) == 1 else f"{label} ft{bf_train:+g} inf{bf_infer:+g}"
        out[name] = [(p["step"], p["mean"], p["std"]) for p in result["points"]
                     if (p["bf_train"], p["bf_infer"]) == (bf_train, bf_infer)
                     and p["mean"] is not None]
    return out


def _read_curves(path: str) -> dict:
    file = path if path.endswith(".json") else paths.join(path, "progress.json")
    if not paths.isfile(file):
        raise KjaxError(f"--compare {path}: no progress.json there; give the --out of an "
                        f"earlier `kjax finetune --every-checkpoint` run")
    return _curves(json.loads(paths.read_text(file)),
                   paths.name(os.path.dirname(file.rstrip("/")) or file))


def progress_figure(curves: dict, metric: str, baseline):
    """The figure of plot_progress; its legend below the axes, off the data
    (as the learning curve's, kjax/finetune/plots.py); labels (run folder
    names, maybe Korean) in the Hangul font of kjax/fonts.py."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from kjax.fonts import hangul_font
    font = hangul_font() or "sans-serif"
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    for name, pts in curves.items():
        if pts:
            steps, means, stds = zip(*pts)
            ax.errorbar(steps, means, yerr=stds, fmt="o-", capsize=3, label=name)
    if baseline is not None:
        ax.axhline(baseline, color="gray", ls=":", label="baseline (no model)")
    ax.set_xlabel("pretraining step")
    ax.set_ylabel(f"dev {metric} (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=min(len(handles), 2),
                   fontsize=8, frameon=False, prop={"family": font, "size": 8})
    ax.set_title("kjax: downstream score vs pretraining step")
    return fig


def plot_progress(curves: dict, metric: str, baseline, path: str) -> str:
    import matplotlib.pyplot as plt
    fig = progress_figure(curves, metric, baseline)
    local = path if "://" not in path else os.path.join("/tmp", os.path.basename(path))
    fig.savefig(local, dpi=100)
    plt.close(fig)
    if local != path:
        with open(local, "rb") as f:
            paths.write_bytes(path, f.read())
    return path
