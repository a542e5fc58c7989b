"""A run's config, resolved once and frozen: the one moment that says what a
`kjax train` run is.

`resolve_run(config, workdir, last_step)` turns the loaded config (file and
overrides) into the run's:

1. the resume policy (resume_policy.py) checks it against the config the
   workdir recorded: a change that alters the run is refused in one line;
2. every `auto` key takes the recorded value, else the platform's
   (kjax/config/platform_defaults.py), so a resume on another platform keeps
   its masks and program;
3. `model.attention_tiles` takes the recorded tiles, then the ones a trace of
   the train and eval steps chose (on a GPU, where the flash kernel takes
   tiles: kjax/model/attention_core.py's `flash_tiles_chosen`). The program
   built afterwards has every tile fixed by the config, so neither a later
   timing nor another card changes what a resume compiles;
4. it is frozen (ml_collections' FrozenConfigDict): no code after this moment
   can assign into it. The trainer records it in WORKDIR/kjax_config.py once
   the first step has run.

The caller's config is left as it was.
"""
from __future__ import annotations

import jax
from ml_collections import ConfigDict, FrozenConfigDict

from kjax.config import platform_defaults
from kjax.config.load import load_config
from kjax.config.recorded import has_recorded_config, note, recorded_config_path
from kjax.errors import KjaxError
from kjax.model.arch import architecture
from kjax.model.attention_core import flash_tiles_chosen
from kjax.pretrain import aot, branch
from kjax.pretrain.resume_policy import check_resume


def read_recorded(workdir: str) -> ConfigDict | None:
    """The config the workdir recorded; None where there is none, or it does
    not load (record_config replaces it then, saying so)."""
    if not has_recorded_config(workdir):
        return None
    try:
        return load_config(recorded_config_path(workdir))
    except KjaxError:
        return None


def resolve_run(config, workdir: str, last_step: int | None = None) -> FrozenConfigDict:
    """The run's config, frozen (module doc); refuses a resume that would change
    what the run computes (one line)."""
    recorded = read_recorded(workdir)
    c = config.copy_and_resolve_references()
    branch.resolve(c, workdir)   # a decay branch's decay_steps (kjax/pretrain/branch.py)
    for passing in check_resume(c, recorded, workdir, last_step):   # or one line
        note(f"resuming {workdir} with {passing} (the run's numbers stay as they are)")
    platform_defaults.resolve(c, recorded=recorded, keys=architecture(c).auto_keys)
    _note_kept(c, recorded, workdir)
    keep_recorded_tiles(c.model, None if recorded is None else recorded.model)
    c.model.attention_tiles.update(traced_tiles(c))
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


def traced_tiles(config) -> dict[str, str]:
    """{signature: tiles} of every flash call the run's steps make, chosen by
    tracing them against abstract state on this host's devices (nothing runs
    but a GPU's tile timing); {} where no call can reach the kernel."""
    devices = jax.devices()

    def trace():
        aot.trace(config, devices, "train")
        if config.train.eval_every:
            aot.trace(config, devices, "eval")
    return flash_tiles_chosen(config.model.attention_impl, trace)


def _note_kept(config, recorded, workdir: str) -> None:
    """A note where a recorded auto value overrides this platform's."""
    here = jax.default_backend()
    kept = [f"{key}={platform_defaults.value(config, key)!r}"
            for key in architecture(config).auto_keys
            if platform_defaults.value(config, key) != platform_defaults.platform_value(key, here)]
    if recorded is not None and kept:
        note(f"keeping {', '.join(kept)} as recorded in {recorded_config_path(workdir)} (the "
             f"run's masks and program; the {here} default differs)")
