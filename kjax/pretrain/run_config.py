"""A run's config, resolved once and frozen: the one moment that says what a
`kjax train` run is.

`resolve_run(config, workdir, last_step, recorded)` turns the loaded config
(file and overrides; kjax/pretrain/run_load.py loads it) into the run's:

1. its paths: data.dir and init.from_run absolute, the files the run keeps
   in its folder (the tokenizer, knowledge resources) its folder's copies
   once it has them (kjax/pretrain/run_folder.py); a decay branch's
   `train.decay_steps` (kjax/pretrain/branch.py `resolve`: 0 under wsd is the
   steps after its parent's);
2. the resume policy (resume_policy.py) checks it against the config the
   workdir recorded: a change that alters the run is refused in one line;
3. every `auto` key takes the recorded value, else the platform's
   (kjax/config/platform_defaults.py), so a resume on another platform keeps
   its masks and program;
4. `model.attention_tiles` takes the recorded tiles, then, where a call can
   reach the flash kernel on a GPU, the tiles chosen for every flash call a
   trace of the train and eval steps makes (`run_tiles`: the trace lists the
   calls, kjax/model/attention_core.py's `tiles_for_steps` chooses after it
   has closed, as it does for `kjax finetune`'s steps). The program built
   afterwards has every tile fixed by the config, so neither a later timing
   nor another card changes what a resume compiles;
5. it is frozen (ml_collections' FrozenConfigDict): no code after this moment
   can assign into it. The trainer records it in WORKDIR/kjax_config.py once
   the first step has run.

The caller's config is left as it was.
"""
from __future__ import annotations

import jax
from ml_collections import FrozenConfigDict

from kjax.config import platform_defaults
from kjax.config.batch_ramp import ramp_of, stage_config
from kjax.config.load import copy_of
from kjax.config.recorded import note, recorded_config_path
from kjax.model.arch import architecture
from kjax.model.attention_core import tiles_for_steps
from kjax.pretrain import aot, branch, run_folder
from kjax.pretrain.resume_policy import check_resume

READ = object()   # resolve_run's `recorded` default: read it from the workdir


def resolve_run(config, workdir: str, last_step: int | None = None,
                recorded=READ) -> FrozenConfigDict:
    """The run's config, frozen (module doc); refuses a resume that would change
    what the run computes (one line). `recorded`: the workdir's record as the
    caller read it (run_folder.Recorded or None); by default read here."""
    if recorded is READ:
        recorded = run_folder.recorded_or_none(workdir)
    c = copy_of(config)
    run_folder.absolute(c)
    run_folder.use_kept_files(c, recorded)
    branch.resolve(c, workdir)   # a decay branch's decay_steps (kjax/pretrain/branch.py)
    before = None if recorded is None else recorded.config
    for passing in check_resume(c, before, workdir, last_step):   # or one line
        note(f"resuming {workdir} with {passing} (the run's numbers stay as they are)")
    platform_defaults.resolve(c, recorded=before, keys=architecture(c).auto_keys)
    _note_kept(c, before, workdir)
    keep_recorded_tiles(c.model, None if before is None else before.model)
    c.model.attention_tiles.update(run_tiles(c))
    return FrozenConfigDict(c)


def keep_recorded_tiles(model_config, recorded_model) -> list[str]:
    """Signatures the run's recorded `model.attention_tiles` fixes and this config
    does not (and no '*' of its own covers), copied into it; returns them."""
    if recorded_model is None or "attention_tiles" not in recorded_model:
        return []
    mine = model_config.attention_tiles
    added = [s for s in recorded_model.attention_tiles if s not in mine and "*" not in mine]
    for signature in added:
        mine[signature] = recorded_model.attention_tiles[signature]
    return added


def run_tiles(config, devices=None) -> dict[str, str]:
    """{signature: tiles} of every flash call the run's steps make: the steps
    traced against abstract state on `devices` (default this host's; nothing
    runs), the calls read from the traces, their tiles chosen once the traces
    have closed (the config's, the card's cache, else a timing on a GPU);
    {} without a trace where no call can reach the kernel. A batch ramp's
    stages are steps of their own (a call's signature holds its batch)."""
    devices = devices or jax.devices()
    steps = [(config, "train")] + ([(config, "eval")] if config.train.eval_every else []) + \
        [(stage_config(config, s), "train") for s in ramp_of(config).stages[:-1]]
    return tiles_for_steps(config.model,
                           lambda: [aot.trace(c, devices, step).jaxpr for c, step in steps])


def _note_kept(config, recorded, workdir: str) -> None:
    """A note where a recorded auto value overrides this platform's."""
    here = jax.default_backend()
    kept = [f"{key}={platform_defaults.value(config, key)!r}"
            for key in architecture(config).auto_keys
            if platform_defaults.value(config, key) != platform_defaults.platform_value(key, here)]
    if recorded is not None and kept:
        note(f"keeping {', '.join(kept)} as recorded in {recorded_config_path(workdir)} (the "
             f"run's masks and program; the {here} default differs)")
