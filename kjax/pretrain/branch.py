"""Decay branches (docs/PRETRAINING.md, "Decay branches"): a run that
continues another run's checkpoint in a folder of its own — the decay of a
warmup-stable-decay run started from any of its stable checkpoints, as often
as wanted (`init.mode=continue`, `kjax train --decay-from P/checkpoints/S`).

A phase (kjax/pretrain/phases.py) takes a parent's parameters and starts a
run of its own from step 0. A branch continues the parent's run instead:

- its state is the parent's at step S — parameters, optimizer state, step
  counter, dropout key and EMA (a branch with `train.ema_decay` = 0 drops it;
  one that keeps an EMA where the parent kept none starts it from the
  parameters) — so its step S + 1 is the step the parent would have run next;
- its data stream continues at the parent's position with the parent's
  per-source counters: its first batch is the parent's next (the same data
  and seeds), or, for a mixture with other weights (an anneal on another mix,
  as EuroBERT's), a new mixing from that position in which each source goes
  on where it stood (kjax/batches/stream.py's `origin`);
- its schedule is its own config's over the same step counter: with
  `train.schedule=wsd` and `train.decay_steps=0` the decay spans every step
  after S (decay_steps = num_steps − S, resolved when the branch starts and
  recorded, `resolve`), so the stable phase ends where the branch begins and
  its first learning rate is the parent's there. A learning rate at S other
  than the parent's (a checkpoint inside the parent's own decay, another
  peak or warmup) is refused in one line;
- WORKDIR/lineage.json names the parent, its step, checkpoint, fingerprint
  and config, the position the branch continued at, and `init.mode`.

The parent is only read: several branches of one checkpoint, each in its
own folder, are independent, and each is exactly the run its own config
would have trained from step 0 (tests/test_decay_branch.py). A branch
changes what it computes from S on only (the schedule, the mask rate, the
mixture's weights): the model, optimizer, seeds and batches up to S must be
the parent's, each difference one line before anything compiles.
"""
from __future__ import annotations

import os

import jax

from kjax import paths
from kjax.batches.stream import mixture_weights
from kjax.checkpoint import fingerprint
from kjax.checkpoint.restore import locate_checkpoint, restore_read_only
from kjax.config.recorded import workdir_of
from kjax.config.sources import sources
from kjax.errors import KjaxError
from kjax.pretrain import phases
from kjax.train import ema
from kjax.train.optimizers import with_schedule_count
from kjax.train.schedules import learning_rate_schedule, rate_jump
from kjax.train.state import abstract_state, make_model, make_optimizer
from kjax.train.stream_meter import KEY as COUNTERS

FLAG = "--decay-from"
HINT = "pass the parent run's workdir, its checkpoints/ or checkpoints/STEP"


def continuing(config) -> bool:
    """Whether `config` starts a branch (init.mode=continue with a parent)."""
    init = config.init
    return bool(init.from_run) and init.get("mode", "phase") == "continue"


def branch_start(config, workdir: str) -> int:
    """S: the parent's step the branch continues — its lineage's, once it has
    run (a resume), else the step `init.from_run` names (or its newest)."""
    lineage = phases.read_lineage(workdir)
    if lineage and lineage.get("init", {}).get("mode") == "continue":
        return int(lineage["parent_step"])
    directory, step = locate_checkpoint(config.init.from_run, FLAG, HINT)
    if step is None:
        step = max(int(d) for d in paths.listdir(directory) if d.isdigit())
    return step


def resolve(config, workdir: str) -> None:
    """A branch's config, in place, before it is frozen: train.decay_steps=0
    under wsd set to num_steps − S (the decay spans the branch), num_steps
    past S; nothing for any other run."""
    if not continuing(config):
        return
    t, start = config.train, branch_start(config, workdir)
    if t.num_steps <= start:
        raise KjaxError(f"train.num_steps={t.num_steps}: a decay branch continues the step "
                        f"counter of {config.init.from_run} from step {start}; give the step it "
                        f"ends at (e.g. --config.train.num_steps={start + max(1, start // 10)})")
    if t.schedule == "wsd" and not t.get("decay_steps", 0):
        t.decay_steps = t.num_steps - start
    if t.schedule == "wsd" and t.num_steps - t.decay_steps < start:
        raise KjaxError(f"train.decay_steps={t.decay_steps} would start the decay at step "
                        f"{t.num_steps - t.decay_steps}, before the branch's first step "
                        f"{start + 1}; give at most {t.num_steps - start} (or 0: all of them)")


def continue_from_parent(config, mesh, model, tx, shardings, start: int,
                         recorded=None) -> tuple[dict, dict, dict]:
    """(the branch's first state, its data state, its lineage) from the
    checkpoint `init.from_run` names, at step `start` (branch_start)."""
    directory, _ = locate_checkpoint(config.init.from_run, FLAG, HINT)
    parent = workdir_of(directory)
    pconfig, recorded_path = phases.parent_config(config, parent, recorded)
    check_continuation(pconfig, config, start, parent)
    target, _ = abstract_state(pconfig, mesh, make_model(pconfig, False),
                               make_optimizer(pconfig.train))
    pstate, pdata, step = restore_read_only(directory, target, start, what=f"{FLAG} STEP")
    state = continued_state(pstate, config, mesh, model, tx, shardings, parent)
    data_state = continued_stream(pconfig, config, dict(pdata or {}), parent)
    lineage = {
        "parent": parent, "parent_checkpoint": paths.join(directory, str(step)),
        "parent_step": int(step), "parent_fingerprint": fingerprint.digest(pstate),
        "parent_config": recorded_path,
        "parent_imported_from": phases.imported_from(parent),   # None: a trained run
        "init": {"mode": "continue", "optimizer": "keep", "weights": "params"},
        "continued": {"step": int(step), "position": data_state.get("position"),
                      "learning_rate": float(learning_rate_schedule(config.train)(step)),
                      "decay_steps": int(config.train.get("decay_steps", 0))},
        "notes": [], "parent_lineage": phases.read_lineage(parent)}
    return state, data_state, lineage


def check_continuation(pconfig, config, start: int, parent: str) -> None:
    """What a branch must keep of its parent, each difference one line: the
    weights it continues, the seeds, the learning rate at the step it
    branches at (no jump: a stable checkpoint)."""
    if config.init.weights != "params":
        raise KjaxError(f"init.weights={config.init.weights!r}: a decay branch continues the "
                        f"parameters of {parent} (its EMA goes on as the EMA); set "
                        f"init.weights=params, or start a phase from the EMA "
                        f"(init.mode=phase)")
    for key in ("data.seed", "train.seed", "train.optimizer", "train.packing"):
        section, leaf = key.split(".")
        mine, theirs = config[section][leaf], pconfig[section][leaf]
        if mine != theirs:
            raise KjaxError(f"{key}={mine!r}: a decay branch continues the run of {parent}, "
                            f"which has {key}={theirs!r}; keep it, or start a new phase "
                            f"(init.mode=phase)")
    jump = rate_jump(pconfig.train, config.train, start)
    if jump:
        raise KjaxError(
            f"{parent} runs step {start + 1} at learning rate {jump[0]:.4g} (its "
            f"{pconfig.train.schedule} schedule), this branch at {jump[1]:.4g}: a decay branch "
            f"starts where its parent's rate is, from a checkpoint of its stable phase; pick "
            f"a checkpoint before the parent's decay, or keep its learning_rate and "
            f"warmup_steps")


def _shapes(tree):
    return jax.tree.structure(tree), [tuple(x.shape) for x in jax.tree.leaves(tree)]


def continued_state(pstate: dict, config, mesh, model, tx, shardings, parent: str) -> dict:
    """The parent's state in the branch's layout: the same parameter and
    optimizer trees (else one line), the schedule's clock at the parent's
    step, the EMA kept, dropped or started as the branch's config says."""
    target, _ = abstract_state(config, mesh, model, tx)
    for key in ("params", "opt_state"):
        if _shapes(pstate[key]) != _shapes(target[key]):
            raise KjaxError(f"{FLAG} {parent}: its {key} differ from this config's in structure "
                            f"or shape; a decay branch continues the parent's model and "
                            f"optimizer as they are; keep them, or start a new phase "
                            f"(init.mode=phase)")
    step = int(jax.device_get(pstate["step"]))
    state = {"step": pstate["step"], "params": pstate["params"], "rng": pstate["rng"],
             "opt_state": with_schedule_count(pstate["opt_state"], step)}
    if ema.KEY in target:
        state[ema.KEY] = pstate[ema.KEY] if ema.KEY in pstate else ema.start(pstate["params"])
    return jax.device_put(state, shardings)


def _norm(path: str) -> str:
    return path.rstrip("/") if paths.is_remote(path) else os.path.abspath(path)


def continued_stream(pconfig, config, pdata: dict, parent: str) -> dict:
    """The branch's data state: the parent's as it is where the stream is
    the same (data.dir, or the same sources and weights); a new mixing at the
    parent's position, each source from where it stood, where a mixture's
    weights change (stream.py's origin). Another data.dir, a source that
    moved, or one source against a mixture is one line."""
    theirs, mine = sources(pconfig), sources(config)
    if not theirs and not mine:
        if _norm(pconfig.data.dir) != _norm(config.data.dir):
            raise KjaxError(f"data.dir={config.data.dir}: a decay branch continues the data "
                            f"stream of {parent}, which reads {pconfig.data.dir}; keep it (an "
                            f"anneal on other data is a mixture, data.sources, with other "
                            f"weights), or start a new phase (init.mode=phase)")
        return pdata
    if bool(theirs) != bool(mine):
        raise KjaxError(f"data.sources: {parent} read "
                        f"{'a mixture' if theirs else 'one source, data.dir'}, this branch "
                        f"{'a mixture' if mine else 'one source'}; a decay branch continues "
                        f"the parent's stream (a mixture may change its weights)")
    where = {s.name: _norm(s.dir) for s in theirs}
    moved = [s.name for s in mine if s.name in where and where[s.name] != _norm(s.dir)]
    if moved:
        raise KjaxError(f"data.sources.{moved[0]}: its folder differs from the one {parent} "
                        f"read; a branch continues each source where it stood in its own folder")
    same = [s.name for s in theirs] == [s.name for s in mine] and \
        mixture_weights(pconfig, theirs) == mixture_weights(config, mine)
    if same:
        return pdata
    if "position" not in pdata:
        raise KjaxError(f"data.sources: the weights change, but the data state of {parent} is "
                        f"a packer's, not a position; keep the weights")
    counters = pdata.get(COUNTERS, {})
    origin = {"position": int(pdata["position"]),
              "source_examples": dict(counters.get("examples", {}))}
    return {"position": int(pdata["position"]), "origin": origin, COUNTERS: counters}
