"""The training loop of one run, its checkpoints and its outputs:

    OUT/metrics.jsonl, tensorboard/   train loss per log step, dev metrics per evaluation
    OUT/checkpoints/                  the train state and the best dev params per
                                      inference bf (resume)
    OUT/metrics.json                  dev/test metrics per inference bf, the baseline, the
                                      flash calls' tiles (attention_tiles; a GPU's)
    OUT/predictions_<split>[_bf<v>].jsonl
    OUT/learning_curve.png
"""
from __future__ import annotations

import json
import os
import time

import jax
import numpy as np

from kjax import paths
from kjax.checkpoint.manager import Checkpointer
from kjax.checkpoint.recovery import restore_newest
from kjax.errors import KjaxError
from kjax.progress import Progress
from kjax.finetune.plots import plot_learning_curve
from kjax.finetune.trainer import FineTuner, bf_key, write_json
from kjax.parallel.mesh import on_mesh, put_batch
from kjax.pretrain.trainer import PREEMPTED_EXIT, PreemptionCheck, StopSignal
from kjax.train.logdir import local_log_dir, pull_logs, push_logs
from kjax.train.metrics import MetricWriter


def run_one(tuner: FineTuner, seed: int, bf_train: float, bf_infers: list[float], out_dir: str,
            progress: bool = True, stop_at: int | None = None,
            stop: StopSignal | None = None) -> dict:
    """Trains (or resumes) one run and evaluates it; returns its metrics.json.
    SIGTERM (`stop`: an experiment's, else one of its own) saves the next
    step and returns `preempted` with exit_code 143 instead, unevaluated."""
    if stop is None:
        with StopSignal() as stop:
            return run_one(tuner, seed, bf_train, bf_infers, out_dir, progress, stop_at, stop)
    ft = tuner.ft
    primary = jax.process_index() == 0
    # Outputs other than checkpoints are written to `logs`: out_dir itself, or a
    # local mirror of a gs:// --out copied up at the end (kjax/train/logdir.py).
    logs = local_log_dir(out_dir)
    if primary:
        pull_logs(out_dir, into="")
        os.makedirs(logs, exist_ok=True)
    ckpt = Checkpointer(paths.join(out_dir, "checkpoints"),
                        ft.checkpoint_every or tuner.eval_every, ft.keep_checkpoints)
    keys = [bf_key(bf) for bf in bf_infers]
    settings = run_settings(tuner, seed, bf_train, bf_infers)
    with on_mesh(tuner.mesh, tuner.config):
        found = None
        if ckpt.all_steps():  # the newest step that verifies; damaged ones are moved aside
            target = {**tuner.abstract_state(),
                      "best": {k: tuner.abstract_state()["params"] for k in keys}}
            found = restore_newest(ckpt, target, move_damaged=True)
        latest = found[2] if found is not None else None
        if found is None:
            state = tuner.init_state(seed)
            # The best params per inference bf ride along in the checkpoint.
            state["best"] = {k: tuner.copy_params(state["params"]) for k in keys}
            progress_state = {"best": {}, "bad_evals": 0, "stopped": False,
                              "settings": settings}
        else:
            state, progress_state, _ = found
            try:
                _check_settings(out_dir, progress_state.get("settings", settings), settings)
            except KjaxError:
                ckpt.close()
                raise
        start = int(jax.device_get(state["step"]))
        writer = MetricWriter(logs, enabled=primary, resume_step=start)
        train_step = tuner.train_step(bf_train)
        bar = Progress(f"finetune {paths.name(out_dir)}", total=tuner.total_steps,
                       initial=start, unit="step", enabled=progress and primary)
        began, step, signalled = time.perf_counter(), start, False
        preempted = PreemptionCheck(tuner.mesh, stop)   # several processes: one shared answer
        done = progress_state["stopped"] or start >= tuner.total_steps
        for step in range(start + 1, tuner.total_steps + 1 if not done else start + 1):
            batch = put_batch(tuner.train_batch(seed, step, bf_train), tuner.mesh)
            best = state.pop("best")
            state, metrics = train_step(state, batch)
            state["best"] = best
            bar.update()
            evaluate = step % tuner.eval_every == 0 or step == tuner.total_steps
            # Every evaluation step is logged too (the last step, an early stop's):
            # the train curve then spans the run, whatever log_every is.
            if step % ft.log_every == 0 or step == start + 1 or evaluate or step == stop_at:
                m = {k: float(v) for k, v in jax.device_get(metrics).items()}
                m["epoch"] = (step - 1) / tuner.steps_per_epoch
                writer.write(step, m)
                bar.update(0, loss=f"{m['loss']:.3f}")
            if evaluate:
                improved = _evaluate_dev(tuner, state, bf_infers, step, progress_state, writer)
                progress_state["bad_evals"] = 0 if improved else progress_state["bad_evals"] + 1
                if ft.patience and progress_state["bad_evals"] >= ft.patience:
                    progress_state["stopped"] = True
            # After this step's evaluation: its early-stopping state and best params are saved.
            signalled = preempted(metrics["loss"]) or ckpt.reached_preemption(step)
            halt = progress_state["stopped"] or step == stop_at or signalled
            # Evaluations replay exactly on resume, so a checkpoint need not follow each one.
            if halt or ckpt.should_save(step) or step == tuner.total_steps:
                writer.flush()   # the steps this checkpoint covers are logged for good
                ckpt.save(step, state, progress_state, force=True)
            if halt:
                break
        bar.close()
        ckpt.close()   # waits for the async write: a preempted run's last save is complete
        train_seconds = time.perf_counter() - began
        if signalled:
            writer.close()
            if primary:
                push_logs(out_dir, into="")
            return {"step": step, "preempted": True, "exit_code": PREEMPTED_EXIT,
                    "message": preempted_message(out_dir, step)}
        if step == stop_at and not progress_state["stopped"] and step < tuner.total_steps:
            writer.close()
            if primary:
                push_logs(out_dir, into="")
            return {"step": step, "message": f"stopped at step {step}; run again to resume"}
        result = _final_evaluation(tuner, state, seed, bf_train, bf_infers, logs,
                                   progress_state)
    writer.close()
    result.update(steps=int(jax.device_get(state["step"])), total_steps=tuner.total_steps,
                  resumed_from_step=latest, train_seconds=train_seconds,
                  attention_tiles=tuner.flash_tiles)   # the flash calls' ({} on CPU)
    if primary:
        write_json(os.path.join(logs, "metrics.json"), result)
        result["learning_curve"] = plot_learning_curve(logs, tuner.metric)
        push_logs(out_dir, into="")
    return result


def preempted_message(out_dir: str, step: int) -> str:
    return (f"fine-tuning {out_dir}: stopped by a preemption signal after saving step {step}; "
            f"run the same command to resume")


def run_settings(tuner: FineTuner, seed: int, bf_train: float, bf_infers: list[float]) -> dict:
    """What a resumed run must share with the one that wrote the checkpoint
    (JSON-normalised, as it comes back from the checkpoint)."""
    ft = tuner.ft
    settings = {"task": tuner.task, "seed": seed, "bf_train": float(bf_train),
                "bf_infer": [float(b) for b in bf_infers], "labels": tuner.data.label_names,
                "train_examples": len(tuner.data.features["train"]),
                **{k: ft[k] for k in ("epochs", "batch_size", "warmup_ratio",
                                      "weight_decay", "max_seq_len", "eval_every")},
                "learning_rate": tuner.learning_rate,
                "shake": {k: ft.shake[k] for k in ("variant", "boost_prem", "p", "seed")}}
    return json.loads(json.dumps(settings))


def _check_settings(out_dir: str, saved: dict, now: dict) -> None:
    diffs = [f"{k}: {saved.get(k)!r} → {now.get(k)!r}" for k in sorted(set(saved) | set(now))
             if saved.get(k) != now.get(k)]
    if diffs:
        raise KjaxError(f"{out_dir} holds a run with other settings ({'; '.join(diffs)[:300]}); "
                        f"rerun with the original settings to resume it, or pass another --out")


def _evaluate_dev(tuner, state, bf_infers, step, progress_state, writer) -> bool:
    improved, row = False, {}
    for bf in bf_infers:
        metrics, _ = tuner.evaluate(state["params"], "dev", bf)
        value = max(tuner.selection_value(metrics), -1e30)   # JSON-safe (no -inf)
        best = progress_state["best"].get(bf_key(bf))
        if best is None or value > best["value"]:
            progress_state["best"][bf_key(bf)] = {"value": value, "step": step}
            state["best"][bf_key(bf)] = tuner.copy_params(state["params"])
            improved = True
        row.update({f"{k}@bf{bf_key(bf)}": v for k, v in metrics.items()
                    if isinstance(v, (int, float))})
    writer.write(step, row, prefix="dev")
    return improved


def _final_evaluation(tuner, state, seed, bf_train, bf_infers, out_dir, progress_state) -> dict:
    """Best-params metrics per inference bf; predictions go to `out_dir` (local)."""
    splits = [s for s in ("dev", "test") if s in tuner.data.features]
    results = {}
    for bf in bf_infers:
        params = state["best"][bf_key(bf)]
        entry = {"best_step": progress_state["best"].get(bf_key(bf), {}).get("step"),
                 "constant": {}}
        for split in splits:
            metrics, preds = tuner.evaluate(params, split, bf)
            entry[split] = metrics
            entry["constant"][split] = constant_prediction(preds)
            suffix = "" if len(bf_infers) == 1 else f"_bf{bf_key(bf)}"
            _write_predictions(tuner, split, preds, os.path.join(
                out_dir, f"predictions_{split}{suffix}.jsonl"))
        results[bf_key(bf)] = entry
    return {"task": tuner.task, "seed": seed, "bf_train": bf_train,
            "bf_infer": [float(b) for b in bf_infers], "select_metric": tuner.metric,
            "stopped_early": progress_state["stopped"], "results": results,
            "baseline": {s: tuner.baseline(s) for s in splits},
            "examples": {s: len(e) for s, e in tuner.data.examples.items()},
            "rows": {s: len(f) for s, f in tuner.data.features.items()},   # qa: windows
            "truncated": {s: f.truncated for s, f in tuner.data.features.items()}}


def constant_prediction(preds: list) -> str | None:
    """The one prediction a run gave every example (as text), or None: a
    constant predictor can beat the training-majority baseline when another
    class happens to lead the eval split, without having learned anything."""
    distinct = {json.dumps(p, ensure_ascii=False, default=_plain) for p in preds}
    return next(iter(distinct)) if len(distinct) == 1 else None


def _write_predictions(tuner, split: str, preds: list, path: str) -> None:
    if jax.process_index() != 0:
        return
    with open(path, "w", encoding="utf-8") as f:
        for ex, pred in zip(tuner.data.examples[split], preds):
            row = {"guid": ex.guid, **tuner.spec.prediction_row(ex, pred)}
            f.write(json.dumps(row, ensure_ascii=False, default=_plain) + "\n")


def _plain(x):
    return x.item() if isinstance(x, np.generic) else str(x)
