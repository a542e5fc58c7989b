"""A run is one folder: what its verbs need is inside it, or named by an
absolute path or a URL, so the folder moved or copied — to another
directory, machine or bucket — still resumes, evaluates, exports, fills
masks and fine-tunes.

    WORKDIR/kjax_config.py   the run's config (kjax/config/recorded.py)
    WORKDIR/tokenizer/       the run's tokenizer: tokenizer.path's files
    WORKDIR/knowledge/KEY/   the knowledge resources it names (knowledge.hypernyms, ...)
    WORKDIR/checkpoints/ ... checkpoints, metrics, lineage.json, ...

Each path key of the recorded config is one of three kinds:

- KEPT (the tokenizer, the knowledge resources: small, and what the
  checkpoints' ids and targets mean): `kjax train` copies the files into the
  folder when it records the config (its first step) and records
  `{run}/tokenizer/NAME`, a path inside the folder of the config file
  (kjax/config/load.py `in_folder`);
- ABSOLUTE (`data.dir`, the prepared shards, too large to copy, and a
  mixture's `data.sources.NAME.dir`; `init.from_run`): recorded as an
  absolute path or a URL (a relative one is read against the directory the
  command runs in);
- the rest (`data.corpus`, `tokenizer.corpus`, `data.tfds_data_dir`, read by
  `kjax prepare` alone) as given.

Which tokenizer a run uses: the one tokenizer.path names until the run
records its config, the folder's copy from then on, for every command on the
run (a resume, eval, export, fill-mask, analyze, finetune --init, inspect
--workdir) — also when a --config names the file it was copied from
(`use_kept_files`; a file that holds something else is named in a note). A
run recorded before runs kept their files (relative paths, read against
the command's directory) still opens: its relative paths are read against
the current directory, as then, in one note; its next `kjax train` session
copies the files in and records the new form.
"""
from __future__ import annotations

import dataclasses
import os

from kjax import paths
from kjax.config.load import RUN_FOLDER, ConfigDict, copy_of, load_config
from kjax.config.recorded import (has_recorded_config, note, record_config,
                                  recorded_config_path)
from kjax.errors import KjaxError
from kjax.tokens.factory import TOKENIZER_SUFFIXES

KEPT = {"tokenizer.path": "tokenizer", "knowledge.hypernyms": "knowledge/hypernyms",
        "knowledge.sense_vectors": "knowledge/sense_vectors",
        "knowledge.case_frames": "knowledge/case_frames"}
ABSOLUTE = ("data.dir", "init.from_run")


def _get(config, dotted: str):
    section, leaf = dotted.split(".")
    return config[section][leaf]


def _set(config, dotted: str, value) -> None:
    section, leaf = dotted.split(".")
    config[section][leaf] = value


def _relative(value: str) -> bool:
    return bool(value) and not paths.is_remote(value) and not os.path.isabs(paths.local(value))


@dataclasses.dataclass(frozen=True)
class Recorded:
    """A run folder's recorded config, read once: its paths resolved (`{run}/`
    inside the folder; an older run's relative ones against the current
    directory, noted)."""
    folder: str
    path: str
    config: ConfigDict


def read_recorded(folder: str) -> Recorded | None:
    """The config `folder` recorded (one read of WORKDIR/kjax_config.py), or
    None where it records none. A file that does not load is its one-line error."""
    if not has_recorded_config(folder):
        return None
    path = recorded_config_path(folder)
    config = load_config(path)
    old = absolute(config)
    if old:
        note(f"{path} names relative paths ({', '.join(old)}), recorded before runs kept "
             f"their files: read against the current directory {os.getcwd()} as then; a "
             f"`kjax train --workdir {folder}` session records them inside the run")
    return Recorded(folder, path, config)


def recorded_or_none(folder: str) -> Recorded | None:
    """`read_recorded`, but None for a record that does not load (`kjax train`
    replaces it, saying so)."""
    try:
        return read_recorded(folder)
    except KjaxError as e:
        note(f"{recorded_config_path(folder)} did not load ({e}); the run records its config "
             f"there again at its first step")
        return None


def absolute(config) -> list[str]:
    """Sets, in place, every local relative path of the KEPT and ABSOLUTE keys
    to its absolute form against the current directory; returns `key=value`
    (as it was) for each."""
    done = []
    for dotted in (*KEPT, *ABSOLUTE):
        value = _get(config, dotted)
        if _relative(value):
            _set(config, dotted, os.path.abspath(paths.local(value)))
            done.append(f"{dotted}={value!r}")
    for name, source in config.data.get("sources", {}).items():   # a mixture's own folders
        value = source.get("dir", "") if hasattr(source, "get") else ""
        if isinstance(value, str) and _relative(value):
            source["dir"] = os.path.abspath(paths.local(value))
            done.append(f"data.sources.{name}.dir={value!r}")
    return done


def _sources(config, dotted: str) -> list[str]:
    """The files a KEPT key's value names (the tokenizer: one per suffix of its scheme)."""
    value = _get(config, dotted)
    if not value:
        return []
    if dotted != "tokenizer.path":
        return [value]
    suffixes = TOKENIZER_SUFFIXES.get(config.tokenizer.scheme, ("",))
    return [value + suffix for suffix in suffixes]


def _kept_value(config, dotted: str, folder: str) -> str:
    """Where the KEPT key's files lie once kept in `folder` (a path there)."""
    return paths.join(folder, KEPT[dotted], paths.name(_get(config, dotted)))


def _inside(value: str, folder: str) -> bool:
    base = folder if paths.is_remote(folder) else os.path.abspath(paths.local(folder))
    return bool(value) and value.startswith(base.rstrip("/") + "/")


def use_kept_files(config, recorded: Recorded | None) -> list[str]:
    """The run's own files (`recorded`: its folder's record) set in `config`, in
    place, for each KEPT key the run keeps in its folder; a config that named
    other files whose bytes differ is told so in a note. Returns the keys set."""
    if recorded is None:
        return []
    done = []
    for dotted in KEPT:
        kept = _get(recorded.config, dotted)
        mine = _get(config, dotted)
        if not _inside(kept, recorded.folder) or mine == kept or \
                not paths.isfile(_sources(recorded.config, dotted)[0]):
            continue   # (a copy gone from the folder: the given files, kept again at the record)
        if mine and any(paths.isfile(a) and (not paths.isfile(b) or
                                             paths.read_bytes(a) != paths.read_bytes(b))
                        for a, b in zip(_sources(config, dotted),
                                        _sources(recorded.config, dotted))):
            note(f"{recorded.folder} keeps its own {dotted.split('.')[0]} ({kept}); the "
                 f"files {dotted}={mine!r} names differ from it and are not used (start a "
                 f"new run, or a phase with --init-from, to train with them)")
        _set(config, dotted, kept)
        done.append(dotted)
    return done


def as_the_run_takes_it(config, recorded: Recorded | None) -> ConfigDict:
    """A copy of `config` with its paths as the run `recorded` takes them
    (`absolute`, `use_kept_files`): what a given config is compared with a
    run's record in."""
    c = copy_of(config)
    absolute(c)
    use_kept_files(c, recorded)
    return c


def keep_files(config, folder: str) -> ConfigDict:
    """Copies the KEPT keys' files into `folder` (each left as it is where it
    already holds the same bytes) and returns a copy of `config` that names
    them `{run}/...`, as the folder's kjax_config.py records them."""
    out = copy_of(config)
    for dotted in KEPT:
        if not _get(config, dotted):
            continue
        target = _kept_value(config, dotted, folder)
        for source in _sources(config, dotted):
            dest = target + source[len(_get(config, dotted)):]
            if not paths.isfile(source) or source == dest:
                continue
            data = paths.read_bytes(source)
            if not (paths.isfile(dest) and paths.read_bytes(dest) == data):
                paths.write_bytes(dest, data)
        _set(out, dotted, f"{RUN_FOLDER}/{KEPT[dotted]}/{paths.name(_get(config, dotted))}")
    return out


def named_in_folder(config, folder: str) -> ConfigDict:
    """A copy of `config` whose KEPT paths that lie inside `folder` are named
    `{run}/...`: the form a config file in `folder` records them in (`kjax
    import` keeps the tokenizer it copies beside its config so)."""
    out = copy_of(config)
    base = folder if paths.is_remote(folder) else os.path.abspath(paths.local(folder))
    for dotted in KEPT:
        value = _get(config, dotted)
        if _inside(value, folder):
            _set(out, dotted, f"{RUN_FOLDER}/{value[len(base.rstrip('/')) + 1:]}")
    return out


def record_run(config, workdir: str, previous: Recorded | None = None) -> str:
    """WORKDIR/kjax_config.py for `config` (what this session trains with), its
    files kept in the folder (`keep_files`); a note names the keys that
    changed since `previous` (the folder's record as this session read it)."""
    return record_config(config, workdir, None if previous is None else previous.config,
                         written=keep_files(config, workdir))
