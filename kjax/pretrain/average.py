"""`kjax average`: the mean of chosen checkpoints — of one run (the last few
steps), or of several runs of one model (mmBERT merges its decay variants
this way) — written as a run folder that every verb takes.

OUT holds
- checkpoints/STEP: the state of the *base*, the last checkpoint named (its
  step, optimizer state, dropout key and data position), with its params
  replaced by the mean of the chosen checkpoints' params (`--weights ema`:
  of their EMAs, kjax/train/ema.py). The mean is summed in float64 on the
  host and cast to the leaves' dtype (float32): within half a unit in the
  last place of the exact mean, whatever the order of the sources;
- kjax_config.py: the base's recorded config with train.ema_decay=0 (OUT
  keeps no EMA of its own: its params are the average);
- lineage.json: `averaged` (per source: run, checkpoint, step, the
  fingerprint of what was restored, recorded config, its own lineage),
  `weights`, `method` and `base`.
So eval, export, fill-mask, analyze, finetune --init and train --init-from
take OUT as any run; `kjax train --workdir OUT` would continue the base's
run from the averaged parameters. The sources are only read.

Refused in one line before any array is read: a step a run does not hold, a
run whose checkpoints are not said (--steps, --last, or RUN/checkpoints/STEP),
fewer than two checkpoints, one named twice, checkpoints whose weights differ
in names, shapes or dtypes or whose model.arch / model.input_mode differ,
`--weights ema` of a run without an EMA, an OUT that holds checkpoints or
lies inside a source's checkpoints.
One process, the weights gathered on the host (as `kjax export`).
"""
from __future__ import annotations

import os

import jax
import numpy as np

from kjax import paths
from kjax.checkpoint import fingerprint
from kjax.checkpoint.manager import Checkpointer
from kjax.checkpoint.restore import (check_weights, chosen_weights, locate_checkpoint,
                                     open_read_only, restore_read_only)
from kjax.config import platform_defaults
from kjax.config.recorded import (has_recorded_config, recorded_config_path, workdir_of,
                                  write_config_file)
from kjax.errors import KjaxError
from kjax.model.arch import architecture
from kjax.objectives import check_config
from kjax.parallel.mesh import make_mesh
from kjax.pretrain import run_folder
from kjax.pretrain.phases import read_lineage, write_lineage
from kjax.train.state import abstract_state, make_model, make_optimizer

HINT = "pass a run's workdir (with --steps or --last) or its checkpoints/STEP"
SAME_MODEL = ("model.arch", "model.input_mode")   # same shapes, another function: refused
METHOD = "the mean of the sources' weights, summed in float64, cast to the leaves' dtype"


def choose(sources: list[str], steps: list[int] | None = None,
           last: int | None = None) -> list[tuple[str, str, int]]:
    """(run, checkpoints directory, step) of every checkpoint named, in order."""
    chosen = []
    for source in sources:
        directory, step = locate_checkpoint(source, "--workdir", HINT)
        listed = sorted(int(d) for d in paths.listdir(directory) if d.isdigit())
        if step is not None:   # RUN/checkpoints/STEP: that one
            picked = [step]
        elif steps:
            missing = [s for s in steps if s not in listed]
            if missing:
                raise KjaxError(f"--steps {','.join(map(str, steps))}: {directory} holds no "
                                f"step {missing[0]} (its steps: {listed})")
            picked = sorted(steps)
        elif last:
            if len(listed) < last:
                raise KjaxError(f"--last {last}: {directory} holds {len(listed)} "
                                f"checkpoint(s) ({listed}); ask for at most {len(listed)}")
            picked = listed[-last:]
        else:
            raise KjaxError(f"--workdir {source}: say which of its checkpoints to average: "
                            f"--steps S1,S2,... or --last N (or name "
                            f"{paths.join(directory, 'STEP')})")
        chosen += [(workdir_of(directory), directory, s) for s in picked]
    names = [paths.join(d, str(s)) for _, d, s in chosen]
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice:
        raise KjaxError(f"{twice} is named twice; name each checkpoint once (a weighted "
                        f"average is not what kjax average computes)")
    if len(chosen) < 2:
        raise KjaxError(f"{len(chosen)} checkpoint ({', '.join(names)}): an average needs 2 "
                        f"or more; add --workdir, --steps or --last")
    return chosen


def source_config(run: str):
    """(the run's recorded config as written, the same resolved for building)."""
    if not has_recorded_config(run):
        raise KjaxError(f"--workdir {run}: it has no kjax_config.py, so its model is unknown; "
                        f"average runs of `kjax train` or `kjax import`")
    written = run_folder.read_recorded(run).config   # its paths as the run takes them
    built = platform_defaults.resolved(written, keys=architecture(written).auto_keys)
    check_config(built)   # the checks every verb's config passes
    return written, built


def _weight_shapes(directory: str, step: int, weights: str) -> dict[str, tuple]:
    """{leaf: (shape, dtype)} of the checkpoint's `weights`, from its metadata."""
    checkpoints = open_read_only(directory, HINT)
    try:
        saved = checkpoints.saved_shapes(step)
    finally:
        checkpoints.abandon()
    prefix = f"{weights}/"
    return {k[len(prefix):]: v for k, v in saved.items() if k.startswith(prefix)}


def _shown(entry) -> str:
    return "absent" if entry is None else f"{entry[1]}{list(entry[0])}"


def check_same_model(chosen, configs: dict, weights: str) -> None:
    """One line unless every checkpoint holds the same weights of one model."""
    run0, dir0, step0 = chosen[0]
    first = _weight_shapes(dir0, step0, weights)
    for run, directory, step in chosen:
        check_weights(configs[run][1], weights, run)
        for key in SAME_MODEL:
            section, leaf = key.split(".")
            mine, theirs = (configs[r][1][section][leaf] for r in (run, run0))
            if mine != theirs:
                raise KjaxError(f"{run} has {key}={mine!r}, {run0} {theirs!r}: average "
                                f"checkpoints of one model")
        shapes = _weight_shapes(directory, step, weights) if (directory, step) != (
            dir0, step0) else first
        differ = sorted(k for k in set(first) | set(shapes) if first.get(k) != shapes.get(k))
        if differ:
            k = differ[0]
            raise KjaxError(f"{paths.join(directory, str(step))} and "
                            f"{paths.join(dir0, str(step0))} hold different models "
                            f"({weights}/{k}: {_shown(shapes.get(k))} and "
                            f"{_shown(first.get(k))}); average checkpoints of one model")


def _within(path: str, folder: str) -> bool:
    def norm(p):
        return p.rstrip("/") if paths.is_remote(p) else os.path.abspath(p)
    return (norm(path) + "/").startswith(norm(folder) + "/")


def _target(config):
    return abstract_state(config, make_mesh(config), make_model(config, False),
                          make_optimizer(config.train))


def average(sources: list[str], out: str, steps: list[int] | None = None,
            last: int | None = None, weights: str = "params") -> dict:
    """`kjax average` (module doc): writes OUT and returns what it wrote."""
    out_checkpoints = paths.join(out, "checkpoints")
    if paths.isdir(out_checkpoints) and paths.listdir(out_checkpoints):
        raise KjaxError(f"--out {out}: {out_checkpoints} already holds checkpoints; pass a "
                        f"new or empty --out (kjax average never writes over a run)")
    chosen = choose(sources, steps, last)
    inside = next((d for _, d, _ in chosen if _within(out, d)), None)
    if inside:   # orbax would list it as a step of that run
        raise KjaxError(f"--out {out} is inside {inside}, a source's checkpoints; write the "
                        f"average to a folder of its own")
    configs = {run: source_config(run) for run, _, _ in chosen}
    check_same_model(chosen, configs, weights)
    targets, total, sources_seen = {}, None, []
    for run, directory, step in chosen:   # one state at a time; the sum in float64
        if run not in targets:
            targets[run] = _target(configs[run][1])[0]
        # (the last one restored is the base: its state goes on into OUT)
        state, iterator, _ = restore_read_only(directory, targets[run], step, hint=HINT,
                                               what="--steps")
        host = jax.device_get(chosen_weights(state, weights))
        total = jax.tree.map(lambda x: np.asarray(x, np.float64), host) if total is None \
            else jax.tree.map(lambda t, x: t + np.asarray(x, np.float64), total, host)
        dtypes = jax.tree.map(lambda x: x.dtype, host)
        sources_seen.append({"run": run, "checkpoint": paths.join(directory, str(step)),
                             "step": step, "fingerprint": fingerprint.digest(state),
                             "config": recorded_config_path(run), "lineage": read_lineage(run)})
    mean = jax.tree.map(lambda t, d: (t / len(chosen)).astype(d), total, dtypes)
    base_run, base_dir, base_step = chosen[-1]
    written = configs[base_run][0].copy_and_resolve_references()
    written.train.ema_decay = 0.0   # OUT's params are the average; it keeps no EMA of its own
    built = platform_defaults.resolved(written, keys=architecture(written).auto_keys)
    _, shardings = _target(built)
    state = {k: v for k, v in state.items() if k in shardings}   # the base's, its EMA left out
    state["params"] = jax.device_put(mean, shardings["params"])
    config_path = recorded_config_path(out)
    # OUT is a run folder of its own: the base's tokenizer kept in it (run_folder.py)
    write_config_file(run_folder.keep_files(written, out), config_path,
                      f"Written by `kjax average`: the config of {base_run}, whose checkpoint "
                      f"{base_step} is the base of the average\n(train.ema_decay=0: the params "
                      f"are the average). Load it with --config {config_path}.")
    write_lineage(out, {"averaged": sources_seen, "weights": weights, "method": METHOD,
                        "base": paths.join(base_dir, str(base_step))})
    checkpoints = Checkpointer(out_checkpoints, 1, built.train.keep_checkpoints)
    try:   # the checkpoint last: OUT is a run once it is committed
        checkpoints.save(base_step, state, iterator, force=True)
        checkpoints.close()
    except BaseException:
        checkpoints.abandon()
        raise
    return {"out": out, "step": base_step, "weights": weights,
            "checkpoints": [s["checkpoint"] for s in sources_seen],
            "tensors": len(jax.tree.leaves(mean)), "config": config_path,
            "lineage": paths.join(out, "lineage.json")}
