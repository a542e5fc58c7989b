"""An experiment: data read and tokenized once, then one run per
(fine-tune bf, seed), each evaluated under every inference bf; the summary
reports mean ± std over seeds per (fine-tune bf, inference bf).

    OUT/                        one run (single seed, no sweep)
    OUT/seed<n>/                --seeds
    OUT/ft<bf>/[seed<n>/]       --sweep: fine-tune bf × (inference bf inside each run)
    OUT/summary.json, summary.md
"""
from __future__ import annotations


import jax
import numpy as np

from kjax import paths
from kjax.config import ConfigDict, apply_overrides, defaults, validate
from kjax.config.load import copy_of
from kjax.errors import KjaxError
from kjax.finetune.features import apply_input_mode
from kjax.finetune.pretrained import NO_INIT
from kjax.finetune.registry import finetune_task
from kjax.finetune.run import preempted_message, run_one
from kjax.finetune.readers import read_examples, split_examples
from kjax.finetune.trainer import FineTuner, TaskData, bf_key, write_json
from kjax.inputs import input_mode
from kjax.objectives import check_config
from kjax.parallel.mesh import make_mesh
from kjax.pretrain.trainer import PREEMPTED_EXIT, StopSignal
from kjax.tokens.factory import load_tokenizer

def finetune_settings(assignments=(), config=None) -> ConfigDict:
    """`config.finetune` (default: the defaults') with `finetune.KEY=VALUE`
    assignments applied and checked (programmatic use; the command line sets
    them as --config.finetune.KEY=VALUE like any other key)."""
    tree = copy_of(config) if config is not None else defaults()
    apply_overrides(tree, [f"--config.{a.removeprefix('--config.')}" for a in assignments])
    validate(tree)
    return tree.finetune


def check_task_settings(ft, config, task: str) -> None:
    """What the finetune section must satisfy for this model and task (the
    section alone is checked when the config loads)."""
    m = config.model
    if ft.max_seq_len > m.max_position_embeddings:
        raise KjaxError(f"finetune.max_seq_len={ft.max_seq_len} exceeds "
                        f"model.max_position_embeddings={m.max_position_embeddings}")
    names = finetune_task(task).metric_names if task else ()
    if ft.select_metric and task and ft.select_metric not in names:
        raise KjaxError(f"finetune.select_metric={ft.select_metric!r} is not a {task} metric; "
                        f"choose one of {', '.join(names)}")


def load_splits(task: str, train: str, dev: str | None, test: str | None, fmt: str,
                ft) -> dict[str, list]:
    """Reads the files; a missing dev (and test) is carved from train with the
    seeded `finetune.split`, which does not change with --seeds."""
    spec = finetune_task(task)
    splits = {"train": read_examples(train, spec, fmt)}
    if dev:
        splits["dev"] = read_examples(dev, spec, fmt)
    if test:
        splits["test"] = read_examples(test, spec, fmt)
    fractions = list(ft.split)
    if not dev and not test:
        parts = split_examples(splits["train"], fractions, ft.split_seed)
        splits.update(zip(("train", "dev", "test"), parts))
    elif not dev:
        dev_share = fractions[1] / (fractions[0] + fractions[1])
        splits["train"], splits["dev"] = split_examples(
            splits["train"], (1 - dev_share, dev_share), ft.split_seed)
    if ft.max_examples > 0:
        splits = {k: v[:ft.max_examples] for k, v in splits.items()}
    for name, part in splits.items():
        if not part:
            raise KjaxError(f"the {name} split is empty; give more examples or change "
                            f"finetune.split={tuple(ft.split)}")
    return splits


def shake_settings(config, ft) -> ConfigDict:
    """What build_shake_matrix reads: variant, boost_prem and p from
    finetune.shake; group3 and per-tag weights from the model's `shake`
    section. bf is not in B: it is the model's."""
    from kjax.shake.matrix import check_weights
    s, base = ft.shake, config.get("shake", ConfigDict())
    out = ConfigDict({"variant": s.variant, "boost_prem": s.boost_prem, "p": s.p,
                      "seed": s.seed, "group3": base.get("group3", True),
                      "tag_weights": dict(base.get("tag_weights", {}))})
    check_weights(out)  # B is float8: a weight it would round is an error, not a surprise
    return out


def combinations(ft, sweep: bool) -> tuple[list[float], list[float]]:
    s = ft.shake
    if sweep:
        return [float(b) for b in s.sweep_train], [float(b) for b in s.sweep_infer]
    return [float(s.bf_train)], [float(s.bf_infer)]


def make_tuner(config, ft, task: str, train: str, dev: str | None = None,
               test: str | None = None, init: str | None = None, sweep: bool = False,
               fmt: str = "auto", tokenizer=None) -> FineTuner:
    """Checks the settings, reads and tokenizes the data once, builds the mesh:
    the FineTuner every run of the experiment shares."""
    check_config(config)
    mode = input_mode(config)
    mode.finetune_check(config)   # a mode fine-tuning cannot run yet: one line, nothing run
    check_task_settings(ft, config, task)
    # The data first: a wrong file should cost a one-line error, not a mesh and a model.
    splits = load_splits(task, train, dev, test, fmt, ft)
    spec = finetune_task(task)
    names = spec.label_names(list(splits.values()))
    trains, infers = combinations(ft, sweep)
    shaking = any(b != 0 for b in trains + infers)
    tokenizer = tokenizer or load_tokenizer(config)
    mesh_config = copy_of(config)   # (the loader's config is frozen)
    mesh_config.train.batch_size = ft.batch_size
    mesh = make_mesh(mesh_config)
    shards = mesh.shape["data"] * mesh.shape["fsdp"]
    if (ft.eval_batch_size or ft.batch_size) % shards:
        raise KjaxError(f"finetune.eval_batch_size={ft.eval_batch_size} is not divisible by "
                        f"the {shards} batch shards (mesh data×fsdp)")
    # Plain sentencepiece and imported vocabularies know no POS: line their tokens up
    # with Kiwi's morphemes.
    pos_from_kiwi = (shaking and ft.shake.variant == "pos"
                     and getattr(tokenizer, "scheme", "") in ("sentencepiece", "imported"))
    features = spec.encode(tokenizer, splits, names, ft, pos_from_kiwi)
    for feats in features.values():   # the mode's positions; labels follow them
        apply_input_mode(feats, mode, config, ft.max_seq_len)
    scale = spec.scale_targets(features)   # regress: targets at most 1, predictions back
    data = TaskData(spec.name, names, splits, features)
    init = None if (init or "").lower() in NO_INIT else init
    tuner = FineTuner(config, ft, data, mesh, init, shake_settings(config, ft), mode)
    tuner.pos_tokens_aligned = features["train"].aligned_tokens if pos_from_kiwi else None
    tuner.target_scale = scale
    # On a GPU: every flash call's tiles fixed before a step is built (nothing on CPU)
    tuner.fix_flash_tiles(trains, infers)
    return tuner


def run_experiment(config, ft, task: str, train: str, dev: str | None = None,
                   test: str | None = None, init: str | None = None, out: str = "runs/ft",
                   seeds: list[int] | None = None, sweep: bool = False, fmt: str = "auto",
                   progress: bool = True, tokenizer=None, stop_at: int | None = None) -> dict:
    """Fine-tunes and evaluates every (fine-tune bf, seed); `stop_at` checkpoints
    each run at that step and leaves it unfinished (run again to resume)."""
    tuner = make_tuner(config, ft, task, train, dev, test, init, sweep, fmt, tokenizer)
    return run_all(tuner, out, seeds or [ft.seed], sweep, progress, stop_at)


def run_all(tuner: FineTuner, out: str, seeds: list[int], sweep: bool, progress: bool = True,
            stop_at: int | None = None, stop: StopSignal | None = None) -> dict:
    """Every (fine-tune bf, seed) run of `tuner` under `out`, and their summary.
    SIGTERM ends it at the next step (saved) or between runs: the result is
    then run_one's `preempted` one, no summary (the rerun writes it)."""
    if stop is None:
        with StopSignal() as stop:
            return run_all(tuner, out, seeds, sweep, progress, stop_at, stop)
    trains, infers = combinations(tuner.ft, sweep)
    combos = [(bf_train, seed) for bf_train in trains for seed in seeds]
    runs, unfinished = [], []
    for number, (bf_train, seed) in enumerate(combos, 1):
        parts = ([f"ft{bf_key(bf_train)}"] if sweep else []) + \
            ([f"seed{seed}"] if len(seeds) > 1 else [])
        run_dir = paths.join(out, *parts)
        result = run_one(tuner, seed, bf_train, infers, run_dir, progress, stop_at, stop)
        if result.get("preempted"):
            return result
        if "results" in result:
            runs.append(result)
        else:
            unfinished.append(run_dir)
        # One process stops between runs; several would disagree here, so they
        # agree inside the next run's steps instead (run_one).
        if stop.received and number < len(combos) and jax.process_count() == 1:
            step = result.get("steps", result.get("step"))
            return {"step": step, "preempted": True, "exit_code": PREEMPTED_EXIT,
                    "message": preempted_message(run_dir, step)}
    data = tuner.data
    summary = summarize(runs, tuner.metric)
    summary.update(task=tuner.task, init=tuner.init or "random", seeds=seeds, sweep=sweep,
                   unfinished=unfinished, labels=data.label_names,
                   examples={k: len(v) for k, v in data.examples.items()},
                   pos_tokens_aligned=tuner.pos_tokens_aligned,
                   learning_rate=tuner.learning_rate, epochs=tuner.ft.epochs,
                   attention_tiles=tuner.flash_tiles)
    constant = {e.get("constant", {}).get("dev") for r in runs for e in r["results"].values()}
    summary["note"] = weak_model_note(summary, constant.pop() if len(constant) == 1 else None)
    if jax.process_index() == 0:
        write_json(paths.join(out, "summary.json"), summary)
        paths.write_text(paths.join(out, "summary.md"), summary["table"] + "\n")
    return summary


def weak_model_note(summary: dict, constant: str | None = None) -> str | None:
    """A line saying so when no combination beat the no-model baseline on dev,
    or when every run predicted one answer for all of dev (`constant`): a
    model that always says the class that leads dev but not train "beats"
    the majority baseline without learning anything (docs/FINETUNE.md,
    "Sanity table")."""
    metric, base = summary["metric"], summary["baseline"].get("dev", {}).get(summary["metric"])
    scores = [r["dev"][metric]["mean"] for r in summary["rows"]
              if r.get("dev", {}).get(metric, {}).get("mean") is not None]
    constant = constant if scores else None
    if constant is None and (base is None or not scores or max(scores) > base + 0.01):
        return None
    why = (f"the encoder is too weak for this task (a tiny or briefly pretrained model), or it "
           f"did not train (learning rate {summary.get('learning_rate'):g}, "
           f"{summary.get('epochs')} epochs); pretrain longer, or raise "
           f"--config.finetune.learning_rate / epochs")
    if constant is not None:
        return (f"note: every run predicted {constant} for all of dev (dev {metric} "
                f"{max(scores):.4f}, the no-model baseline {base if base is None else f'{base:.4f}'}): "
                f"a constant predictor: {why}")
    return (f"note: dev {metric} {max(scores):.4f} does not beat the no-model baseline "
            f"{base:.4f}: {why}")


def mean_std(values: list[float | None]) -> dict:
    v = [x for x in values if x is not None]
    if not v:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": float(np.mean(v)), "std": float(np.std(v, ddof=1)) if len(v) > 1 else 0.0,
            "n": len(v)}


def summarize(runs: list[dict], metric: str) -> dict:
    """Mean ± std (sample std over seeds) of every scalar metric, per
    (fine-tune bf, inference bf) and split, and the markdown table."""
    rows = []
    combos = sorted({(r["bf_train"], k) for r in runs for k in r["results"]},
                    key=lambda c: (c[0], float(c[1])))
    splits = [s for s in ("dev", "test") if runs and s in runs[0]["baseline"]]
    for bf_train, key in combos:
        group = [r["results"][key] for r in runs if r["bf_train"] == bf_train]
        row = {"bf_train": bf_train, "bf_infer": float(key), "seeds": len(group)}
        for split in splits:
            names = [k for k, v in group[0][split].items() if isinstance(v, (int, float))
                     or v is None]
            row[split] = {k: mean_std([g[split][k] for g in group]) for k in names}
        rows.append(row)
    baseline = runs[0]["baseline"] if runs else {}
    return {"metric": metric, "rows": rows, "baseline": baseline,
            "table": table(rows, baseline, splits, metric)}


def _fmt(stat: dict) -> str:
    if stat["mean"] is None:
        return "undefined"   # e.g. Pearson of a constant predictor (every seed)
    return f"{stat['mean']:.4f} ± {stat['std']:.4f}" if stat["n"] > 1 else f"{stat['mean']:.4f}"


def results_lines(summary: dict) -> list[str]:
    """Every scalar dev/test metric of each (fine-tune bf, inference bf), one
    line per split, for the console (the table shows the selection metric only)."""
    lines, rows = [], summary["rows"]
    for r in rows:
        where = f" (bf fine-tune {r['bf_train']:+g}, inference {r['bf_infer']:+g})" \
            if len(rows) > 1 or r["bf_train"] or r["bf_infer"] else ""
        for split in ("dev", "test"):
            if split in r:
                cells = ", ".join(f"{k} {_fmt(v)}" for k, v in r[split].items())
                lines.append(f"{split}{where}: {cells}")
    return lines


def table(rows: list[dict], baseline: dict, splits: list[str], metric: str) -> str:
    head = "| bf fine-tune | bf inference | " + " | ".join(f"{s} {metric}" for s in splits) + \
        " | seeds |"
    lines = [head, "|" + "---|" * (3 + len(splits))]
    for r in rows:
        cells = [_fmt(r[s].get(metric, {"mean": None, "n": 0})) for s in splits]
        lines.append(f"| {r['bf_train']:+g} | {r['bf_infer']:+g} | " + " | ".join(cells) +
                     f" | {r['seeds']} |")
    if baseline:
        cells = [f"{baseline[s][metric]:.4f}" if baseline[s].get(metric) is not None
                 else "undefined" for s in splits]
        lines.append("| baseline (no model) | | " + " | ".join(cells) + " | |")
    return "\n".join(lines)
