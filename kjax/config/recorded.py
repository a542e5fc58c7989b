"""The config a workdir was trained with, kept in the workdir.

`kjax train` writes the resolved config (file + overrides, every key) to
WORKDIR/kjax_config.py at the first step of each session (process 0; on
gs:// too). It is an ordinary config file: `--config WORKDIR/kjax_config.py`
loads it, from anywhere (the files a run keeps in its folder are named
`{run}/...`: kjax/config/load.py `in_folder`, kjax/pretrain/run_folder.py).
eval, export, analyze, finetune (--init) and inspect read it when no
--config is given, and when one is given that differs, they say which keys
differ (stderr), so a mismatch is visible before any checkpoint is restored
(kjax/pretrain/run_load.py reads it, once per command). `kjax import` writes
the same file for an imported model.
"""
from __future__ import annotations

import pprint
import sys

from kjax import paths
from kjax.config.load import ConfigDict, load_config
from kjax.config.platform_defaults import AUTO
from kjax.errors import KjaxError

RECORDED_CONFIG = "kjax_config.py"
MAX_SHOWN = 8   # differing keys named in one note


def recorded_config_path(workdir: str) -> str:
    return paths.join(workdir, RECORDED_CONFIG)


def has_recorded_config(workdir: str | None) -> bool:
    """Whether `workdir` (a run folder) holds the config a run recorded."""
    return bool(workdir) and paths.isfile(recorded_config_path(workdir))


def config_file_text(config: ConfigDict, header: str) -> str:
    """A config file (`get_config()` setting every key on the defaults) with a
    docstring."""
    def line(key, value):
        if isinstance(value, dict):
            text = pprint.pformat(value, indent=1, width=86).replace("\n", "\n" + " " * 15)
            return f"    c.{key}.update({text})"
        return f"    c.{key} = {pprint.pformat(value, width=86)}"
    body = "\n".join(line(k, v) for k, v in config.to_dict().items())
    return (f'"""{header}"""\nfrom kjax.config import defaults\n\n\n'
            f"def get_config():\n    c = defaults()\n{body}\n    return c\n")


def write_config_file(config: ConfigDict, path: str, header: str) -> None:
    paths.write_text(path, config_file_text(config, header))


def _flat(tree, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, (dict, ConfigDict)):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return out


def config_differences(old: ConfigDict, new: ConfigDict) -> list[str]:
    """`key: old → new` for every leaf that differs, in key order."""
    a, b = _flat(old.to_dict()), _flat(new.to_dict())
    # An auto key (platform_defaults) against a value is no difference: a run
    # resolves it to the value it recorded.
    return [f"{k}: {a.get(k)!r} → {b.get(k)!r}" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k) and AUTO.get(k, object()) not in (a.get(k), b.get(k))]


def summary(diffs: list[str]) -> str:
    """The differences in one note: the first MAX_SHOWN, and how many more."""
    more = f"; and {len(diffs) - MAX_SHOWN} more" if len(diffs) > MAX_SHOWN else ""
    return "; ".join(diffs[:MAX_SHOWN]) + more


_pending: list[str] = []


def note(message: str) -> None:
    """A note about the config a verb runs with. Held back until the run's
    checkpoint has restored (`flush_notes`): if the verb fails before that,
    the CLI folds the notes into its one error line instead (`take_notes`), so
    a user error stays one line on stderr."""
    _pending.append(message)


def flush_notes() -> None:
    for message in take_notes():
        print(f"kjax: note: {message}", file=sys.stderr, flush=True)


def take_notes() -> list[str]:
    held = list(_pending)
    _pending.clear()
    return held


_READ = object()


def record_config(config: ConfigDict, workdir: str, previous=_READ,
                  written: ConfigDict | None = None) -> str:
    """Writes WORKDIR/kjax_config.py: `written`, the file's form of `config`
    (default `config` itself; a run names the files it keeps in its folder
    `{run}/...`: kjax/pretrain/run_folder.py), saying which keys of `config`
    changed if an earlier session recorded another config (`previous`: that
    config as the caller read it, None for none; by default read here)."""
    path = recorded_config_path(workdir)
    if previous is _READ:
        try:
            previous = load_config(path) if paths.isfile(path) else None
        except KjaxError:   # unreadable: it is replaced below
            previous = None
            note(f"{workdir} was trained with another config before (the previous file did "
                 f"not load); {path} now records this one")
    diffs = [] if previous is None else config_differences(previous, config)
    if diffs:
        note(f"{workdir} was trained with another config before; {path} now records "
             f"this one ({summary(diffs)})")
    write_config_file(written or config, path,
                      f"The resolved config `kjax train` ran with in {workdir}\n"
                      f"(written at its first step). Load it with --config {path}.")
    return path


def workdir_of(path: str) -> str:
    """The run folder of a workdir, WORKDIR/checkpoints or WORKDIR/checkpoints/STEP."""
    path = path.rstrip("/") or path
    if paths.name(path).isdigit() and paths.name(paths.parent(path)) == "checkpoints":
        return paths.parent(paths.parent(path))
    if paths.name(path) == "checkpoints":
        return paths.parent(path)
    return path
