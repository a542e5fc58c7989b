"""Runs in phases (docs/PRETRAINING.md, "Runs in phases"): BERT's 128 → 512,
ModernBERT's context extension, continued pretraining of a kjax or an
imported transformers model.

A phase is a run of its own, in its own workdir, that starts from another
run's checkpoint (`init.from_run`, `kjax train --init-from W1[/checkpoints/STEP]`):

- it takes the parent's parameters (or their EMA: `init.weights=ema`,
  kjax/train/ema.py); its own EMA, if it keeps one, starts from them; a leaf whose shape differs is named in
  one line, except a position table that grows, whose new rows are freshly
  initialised or the parent's repeated (`init.new_positions`);
- its optimizer state is fresh or the parent's (`init.optimizer`), its
  schedule its own from step 0 (its own warmup), its data iterator new;
- WORKDIR/lineage.json names the parent run, its step, the fingerprint of
  its checkpoint, its config, what `kjax import` made it from when it is an
  import (`parent_imported_from`, from the parent's import.json), and the
  parent's own lineage.

A decay branch (`init.mode=continue`, kjax/pretrain/branch.py) continues the
parent's run instead: its step counter, optimizer, data position and schedule.

A config may list its phases (`phases`): one `kjax train` runs them in order
in WORKDIR/phases/NAME, each from the last checkpoint of the one before, and
the same command again continues the phase it was in.
"""
from __future__ import annotations

import json
import os

import flax
import jax
import jax.numpy as jnp

from kjax import paths
from kjax.checkpoint import fingerprint
from kjax.checkpoint.restore import (check_weights, chosen_weights, locate_checkpoint,
                                     restore_read_only)
from kjax.config.load import apply_overrides, copy_of
from kjax.config.recorded import workdir_of
from kjax.errors import KjaxError
from kjax.pretrain import run_folder
from kjax.train import ema
from kjax.train.optimizers import with_schedule_count
from kjax.train.state import abstract_state, init_state, make_model, make_optimizer

LINEAGE = "lineage.json"
IMPORT_RECORD = "import.json"   # what `kjax import` writes beside its checkpoint
POSITION_TABLE = ("embeddings", "position_embeddings", "embedding")
HINT = "pass the parent run's workdir, its checkpoints/ or checkpoints/STEP"


def read_lineage(workdir: str) -> dict | None:
    path = paths.join(workdir, LINEAGE)
    return json.loads(paths.read_text(path)) if paths.isfile(path) else None


def write_lineage(workdir: str, lineage: dict) -> None:
    paths.write_text(paths.join(workdir, LINEAGE), json.dumps(lineage, indent=2) + "\n")


def imported_from(folder: str):
    """What `kjax import` converted into `folder` (its import.json's source: a
    transformers folder, or an ELECTRA pair's two), None for a trained run."""
    path = paths.join(folder, IMPORT_RECORD)
    return paths.read_json(path).get("source") if paths.isfile(path) else None


def describe(lineage: dict | None) -> str:
    """One line for reports: "from RUN at step N (imported from SRC)", "the
    average of N checkpoints: RUN at step S, ..." (`kjax average`), or ""."""
    if not lineage:
        return ""
    if "averaged" in lineage:
        sources = lineage["averaged"]
        return (f"the average of {len(sources)} checkpoints' {lineage['weights']}: " +
                ", ".join(f"{s['run']} at step {s['step']}" for s in sources))
    text = f"from {lineage['parent']} at step {lineage['parent_step']}"
    if lineage.get("init", {}).get("mode") == "continue":   # kjax/pretrain/branch.py
        text += ", continuing its run (a decay branch)"
    source = lineage.get("parent_imported_from")
    if isinstance(source, dict):   # an ELECTRA pair
        source = " --generator ".join(str(v) for v in source.values())
    return text + (f" (imported from {source} by `kjax import`)" if source else "")


def parent_config(config, parent: str, recorded=None):
    """(The parent run's recorded config on this run's mesh, its file): from
    `recorded` (run_folder.Recorded, the parent's record as the command read
    it) when that is the parent's, else read here, once."""
    if recorded is None or not _same_folder(recorded.folder, parent):
        recorded = run_folder.read_recorded(parent)
    if recorded is None:
        raise KjaxError(f"--init-from {parent}: it has no kjax_config.py, so its model is "
                        f"unknown; {HINT} of a `kjax train` or `kjax import` run")
    c = copy_of(recorded.config)
    c.mesh = config.mesh
    return c, recorded.path


def _same_folder(a: str, b: str) -> bool:
    norm = lambda p: p.rstrip("/") if paths.is_remote(p) else os.path.abspath(p)  # noqa: E731
    return norm(a) == norm(b)


def init_from_parent(config, mesh, model, tx, shardings, recorded=None) -> tuple[dict, dict]:
    """(this run's first state, its lineage) from the run `init.from_run` names
    (`recorded`: its record, if the command read it already)."""
    directory, step = locate_checkpoint(config.init.from_run, "--init-from", HINT)
    parent = workdir_of(directory)
    pconfig, recorded = parent_config(config, parent, recorded)
    check_weights(pconfig, config.init.weights, parent, "init.weights")
    ptx = make_optimizer(pconfig.train)
    target, _ = abstract_state(pconfig, mesh, make_model(pconfig, False), ptx)
    pstate, _, step = restore_read_only(directory, target, step, what="--init-from STEP")
    state, _ = init_state(config, mesh, model, tx, shardings)
    params, notes = graft(state["params"], chosen_weights(pstate, config.init.weights), config,
                          shardings["params"])
    state = ema.with_ema(config.train, {**state, "params": params})   # from the grafted ones
    if config.init.optimizer == "keep":
        state["opt_state"] = kept_optimizer(state, pstate, pconfig, config, parent)
    lineage = {
        "parent": parent, "parent_checkpoint": paths.join(directory, str(step)),
        "parent_step": int(step),
        "parent_fingerprint": fingerprint.digest(pstate),
        "parent_config": recorded,
        "parent_imported_from": imported_from(parent),   # None: a trained run
        "init": {"optimizer": config.init.optimizer,
                 "new_positions": config.init.new_positions, "weights": config.init.weights},
        "notes": notes, "parent_lineage": read_lineage(parent)}
    return state, lineage


def graft(fresh: dict, parent: dict, config, param_shardings) -> tuple[dict, list[str]]:
    """The parent's parameters in this run's tree: same shapes taken as they
    are, a longer position table extended, every other difference refused."""
    flat_fresh, flat_parent = (flax.traverse_util.flatten_dict(t) for t in (fresh, parent))
    notes, plan = [], {}
    for key, leaf in flat_fresh.items():
        name = "/".join(key)
        if key not in flat_parent:
            notes.append(f"{name}: not in the parent, initialised")
            plan[key] = "fresh"
        elif flat_parent[key].shape == leaf.shape:
            plan[key] = "parent"
        elif key == POSITION_TABLE and flat_parent[key].shape[1:] == leaf.shape[1:] \
                and flat_parent[key].shape[0] < leaf.shape[0]:
            plan[key] = config.init.new_positions
            notes.append(f"{name}: {flat_parent[key].shape[0]} → {leaf.shape[0]} rows, the new "
                         f"ones {'copied' if plan[key] == 'copy' else 'initialised'}")
        else:
            raise KjaxError(f"--init-from {config.init.from_run}: {name} has shape "
                            f"{tuple(flat_parent[key].shape)} there and {tuple(leaf.shape)} "
                            f"here; a phase may change data, sequence length and recipe, not "
                            f"the model's sizes (only the position table may grow)")
    notes += [f"{'/'.join(k)}: the parent's, not in this model, left out"
              for k in flat_parent if k not in flat_fresh]

    def combine(fresh_leaves, parent_leaves):
        out = {}
        for key, how in plan.items():
            new, old = fresh_leaves[key], parent_leaves.get(key)
            if how == "parent":
                out[key] = old.astype(new.dtype)
            elif how == "fresh":
                out[key] = new
            else:   # a longer position table: the parent's rows, then the new ones
                rows = old.shape[0]
                extra = new[rows:] if how == "init" else jnp.take(
                    old, jnp.arange(rows, new.shape[0]) % rows, axis=0)
                out[key] = jnp.concatenate([old.astype(new.dtype), extra.astype(new.dtype)])
        return out
    used = {k: v for k, v in flat_parent.items() if plan.get(k, "fresh") != "fresh"}
    shardings = flax.traverse_util.flatten_dict(param_shardings)
    out = jax.jit(combine, out_shardings={k: shardings[k] for k in plan})(flat_fresh, used)
    return flax.traverse_util.unflatten_dict(out), notes


def kept_optimizer(state, pstate, pconfig, config, parent: str):
    """The parent's optimizer state (init.optimizer=keep): same optimizer, same
    shapes; its moments as they are, its schedule's clock at 0, so the phase
    runs its own schedule from step 0 (optax counts the updates an optimizer
    state has made: kept as is, the phase would apply its schedule at the
    parent's step count plus its own)."""
    if pconfig.train.optimizer != config.train.optimizer:
        raise KjaxError(f"init.optimizer=keep: {parent} trained with train.optimizer="
                        f"{pconfig.train.optimizer!r}, this run with "
                        f"{config.train.optimizer!r}; set --config.init.optimizer=fresh")
    same = jax.tree.structure(state["opt_state"]) == jax.tree.structure(pstate["opt_state"]) \
        and all(a.shape == b.shape for a, b in zip(jax.tree.leaves(state["opt_state"]),
                                                   jax.tree.leaves(pstate["opt_state"])))
    if not same:
        raise KjaxError(f"init.optimizer=keep: the optimizer state of {parent} does not fit "
                        f"this model (a grown position table, another optimizer setting); "
                        f"set --config.init.optimizer=fresh")
    return with_schedule_count(pstate["opt_state"], 0)


def phase_configs(config) -> list[tuple[str, object]]:
    """(name, config) of every phase `phases` lists, each checked as a run of
    its own before anything compiles."""
    from kjax.objectives import check_config
    out, example = [], "{'name': 'seq128', 'overrides': {'data.max_seq_len': 128}}"
    for i, phase in enumerate(config.phases):
        name = phase.get("name") if hasattr(phase, "get") else None
        if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum():
            raise KjaxError(f"phases[{i}]={phase!r}: give each phase as {example} (a name of "
                            f"letters, digits, - and _)")
        if name in dict(out):
            raise KjaxError(f"phases: two phases are named {name!r}; name each once")
        c = copy_of(config)
        c.phases = ()
        # the one override function, typed by each key (kjax/config/load.py)
        apply_overrides(c, dict(phase.get("overrides", {})), where=f"phases[{i}] ({name}): ")
        check_config(c)
        out.append((name, c))
    return out


def phase_config(config, name: str):
    """The config of the phase `name` (`kjax compile --phase`, the compile cases)."""
    configs = dict(phase_configs(config))
    if name not in configs:
        listed = ", ".join(configs) or "none"
        raise KjaxError(f"--phase {name}: the config lists no such phase (phases: {listed})")
    return configs[name]


def run_phases(config, workdir: str, train, recorded=None, **kwargs) -> dict:
    """Trains each listed phase in WORKDIR/phases/NAME, in order, each from the
    last checkpoint of the one before (the first from `init.from_run`, if any);
    a finished phase returns at once, so the same command continues the phase
    it was in. Stops, and returns, where a phase stops before its end.
    `recorded`: WORKDIR's record as the command read it (run_folder.Recorded)."""
    configs = phase_configs(config)
    if jax.process_index() == 0:   # `kjax train --workdir W` resumes with it
        run_folder.record_run(config, workdir, recorded)
    previous, done = config.init.from_run, []
    for name, c in configs:
        c.init.from_run = previous
        sub = paths.join(workdir, "phases", name)
        result = train(c, sub, **kwargs)
        done.append(name)
        if result.get("preempted") or result.get("final_step", result.get("step")) \
                < c.train.num_steps:
            break
        previous = sub
    return {**result, "phase": done[-1], "phases": [n for n, _ in configs],
            "phase_workdir": sub}
