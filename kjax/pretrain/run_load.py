"""The one loader of a run's config: every verb's config comes through
`load_run`, and so will every feature that reads a run's config next (a data
mixture, a mask-rate schedule, a decay branch that continues a parent run's
step counter, optimizer and data position: read them from the `Run` it
returns, never from the files again).

    load_run(config_file, overrides, workdir=W, init_from=P, phase=NAME,
             use="train" | "run" | "file" | "target", start=fn) → Run

1. **The source.** `--config FILE` when given; else the config the run
   folder recorded (W/kjax_config.py; W may be W/checkpoints[/STEP]); else,
   for a new phase (`kjax train --init-from P` into a W without a record),
   the config P recorded. Each recorded file is read once
   (kjax/pretrain/run_folder.py `read_recorded`): the `Run` carries what was
   read to the trainer (the resume check, the record of a changed config,
   a phase's parent), which reads nothing again.
2. **The overrides**, by the one override function (kjax/config/load.py
   `apply_overrides`, typed by each key), as phases and the compile checks
   apply theirs.
3. **`--init-from`** sets `init.from_run`; **`--phase NAME`** takes that
   phase of a config that lists its phases (`kjax compile`).
4. **The run folder's paths** (run_folder.py): the record's `{run}/...`
   inside its folder wherever it lies, an older record's relative paths
   against the current directory (one note), a given config's relative
   paths made absolute, the files a run keeps in its folder (tokenizer,
   knowledge resources) taken from there.
5. **The checks** (`kjax.objectives.check_config`), then `start()` (a
   multi-process run's jax.distributed start: before any device is touched).
6. **Resolution**, by `use`: "train" — the run's config resolved against its
   workdir (run_config.py: the resume policy, auto keys, flash tiles; the
   workdir's checkpoints listed and its writability checked); "run" — a verb
   that opens a run (eval, export, analyze, fill-mask, finetune, inspect)
   gets its auto keys for this host's platform; "target" — `kjax compile`,
   resolved later for the platform it compiles for; "file" — a verb that
   makes a run's inputs (tokenizer, prepare, demo): as loaded.
7. **Frozen** (ml_collections' FrozenConfigDict) but for "file" and
   "target", whose verbs derive their configs from it.

Notes about the config (which file, what differs, what was kept) are held
until a checkpoint restores (kjax/config/recorded.py `note`).
"""
from __future__ import annotations

import dataclasses

from ml_collections import ConfigDict, FrozenConfigDict

from kjax import paths
from kjax.checkpoint import storage
from kjax.config import platform_defaults
from kjax.config.load import apply_overrides, copy_of, in_folder, load_config
from kjax.config.recorded import (RECORDED_CONFIG, config_differences, note, summary,
                                  workdir_of)
from kjax.errors import KjaxError
from kjax.model.arch import architecture
from kjax.objectives import check_config
from kjax.pretrain import run_folder
from kjax.pretrain.phases import phase_config
from kjax.pretrain.run_config import READ, resolve_run
from kjax.pretrain.run_folder import Recorded

USES = ("train", "run", "target", "file")


@dataclasses.dataclass(frozen=True)
class Run:
    """A command's config and what was read to make it."""
    config: ConfigDict                   # resolved and frozen ("file", "target": as loaded)
    workdir: str | None = None           # the run folder the command works on
    recorded: Recorded | None = None     # its record, as read (None: it has none)
    parent: Recorded | None = None       # --init-from's record, where it was read
    last_step: int | None = None         # "train": the newest step listed in its checkpoints


def load_run(config_file: str | None = None, overrides=(), *, workdir: str | None = None,
             init_from: str | None = None, phase: str | None = None, use: str = "run",
             start=None) -> Run:
    """The command's config (module doc): `config_file` (None: the run's
    recorded one), `overrides` (`--config.KEY=VALUE` strings), the run folder
    `workdir`, `init_from` (`kjax train --init-from`), `phase` (`--phase`),
    `use` (how it is resolved: USES), `start` (called once the config has
    passed its checks, before a device is touched)."""
    if use not in USES:
        raise ValueError(f"use={use!r}; choose one of {USES}")
    folder = workdir_of(workdir) if workdir else None
    # a record that does not load is the error of a verb that reads it; train
    # with a --config replaces it (and says so)
    read = run_folder.recorded_or_none if use == "train" and config_file else \
        run_folder.read_recorded
    recorded = read(folder) if folder and use != "file" else None
    parent, source = None, workdir
    if use == "train" and init_from and recorded is None:   # a new phase
        parent, source = run_folder.read_recorded(workdir_of(init_from)), init_from
    config = _source(config_file, overrides, source, recorded or parent)
    if init_from:
        config.init.from_run = init_from
    if phase:
        config = phase_config(config, phase)
    if use in ("train", "run"):
        run_folder.absolute(config)
        run_folder.use_kept_files(config, recorded)
    if config_file is not None and recorded is not None and use == "run":
        _note_differences(config, recorded)   # (train notes them when it records the new one)
    check_config(config)
    if start is not None:
        start()
    if use == "train":
        return training_run(config, workdir, recorded, parent)
    if use == "run":
        # this host's platform: speed only, for a verb that reads a run
        platform_defaults.resolve(config, keys=architecture(config).auto_keys)
        config = frozen(config)
    return Run(config, folder, recorded, parent)


def frozen(config) -> ConfigDict:
    """`config` as a FrozenConfigDict; a config that lists phases (dicts in a
    tuple, which ml_collections cannot freeze) stays as it is: it is the base
    of its phases, each resolved and frozen as a run of its own."""
    return config if config.phases else FrozenConfigDict(config)


def _source(config_file, overrides, workdir, recorded: Recorded | None) -> ConfigDict:
    """The config from --config (+ overrides), else from the run's record (+ overrides)."""
    if config_file is not None:
        return load_config(config_file, list(overrides))
    if recorded is None:
        where = f"{workdir} has no {RECORDED_CONFIG}" if workdir else "no --workdir given"
        raise KjaxError(f"pass --config FILE ({where}; `kjax train` records the config of "
                        f"a run there at its first step)")
    shown = f" with {' '.join(overrides)}" if overrides else ""
    note(f"using the config recorded in {recorded.path}{shown}")
    config = apply_overrides(copy_of(recorded.config), list(overrides))
    in_folder(config, paths.parent(recorded.path))   # an override `{run}/...`, as in a file
    return config


def _note_differences(config, recorded: Recorded) -> None:
    """The keys in which a --config differs from the run's record, in a note."""
    diffs = config_differences(recorded.config, config)
    if diffs:
        note(f"this config differs from the one {recorded.folder} was trained with "
             f"({recorded.path}): {summary(diffs)}; leave out --config to use that one")


def training_run(config, workdir: str, recorded=READ, parent: Recorded | None = None) -> Run:
    """The run `kjax train` trains in `workdir` with `config` (what load_run
    gives the train verb, and what the trainer makes of a config passed to
    it as it is): the workdir's checkpoints listed and its writability
    checked (one line before anything compiles), then the config resolved
    against it (run_config.py). A config that lists phases is the phases'
    base: each phase resolves as a run of its own in WORKDIR/phases/NAME."""
    last = storage.listed_last_step(paths.join(workdir, "checkpoints"))
    storage.check_writable(workdir, last)
    if recorded is READ:
        recorded = run_folder.recorded_or_none(workdir)
    if config.phases:
        resolved = copy_of(config)
        run_folder.absolute(resolved)
        run_folder.use_kept_files(resolved, recorded)
    else:
        resolved = resolve_run(config, workdir, last, recorded)
    return Run(resolved, workdir, recorded, parent, last)
