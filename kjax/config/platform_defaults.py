"""Keys whose default depends on the platform the step runs on.

A key set to its `auto` value (`train.dropout_rng="auto"`,
`model.scan_unroll=-1`) takes the value below for the platform: on a GPU rbg
dropout bits and every layer unrolled, elsewhere threefry and one layer per
loop iteration. A default changes for a platform only with a measurement
behind it (docs/PERFORMANCE.md, "What decides speed: unrolled layers and the
dropout generator"). The platform is kjax.config.platform's: the target a
program is traced for, else the backend jax runs on.

`kjax train` resolves them once, before its first step, and records the
resolved values in WORKDIR/kjax_config.py: a run resumed on another platform
(or with a `--config` that still says auto) keeps the values it started
with, so its masks and program, and with them bit-exact resume, do not
depend on where it resumes. Verbs that do not train (eval, export, analyze)
resolve them for the platform they run on when they load the config: there
they change speed only. `kjax compile` resolves them for its target. Model
and step builders take only resolved values (`require_resolved`).
"""
from __future__ import annotations

from kjax.config import platform as platforms

AUTO = {"train.dropout_rng": "auto", "model.scan_unroll": -1}

# key → {platform: value}; "default" for every platform not named.
PLATFORM_DEFAULTS = {
    "train.dropout_rng": {"gpu": "rbg", "default": "threefry"},
    "model.scan_unroll": {"gpu": 0, "default": 1},
}


def platform_value(key: str, platform: str):
    choices = PLATFORM_DEFAULTS[key]
    return choices.get(platforms.normalize(platform), choices["default"])


def value(config, dotted: str):
    """config's value of a dotted key ("train.dropout_rng")."""
    section, leaf = dotted.split(".")
    return config[section][leaf]


def resolve(config, platform: str | None = None, recorded=None,
            keys: tuple = tuple(AUTO)) -> list[str]:
    """Sets every key of `keys` still at its auto value, in place: to the
    `recorded` config's value where that one is concrete (a resumed run), else
    to the platform's (default: kjax.config.platform's, the one traced for).
    Returns `key=value` for each key it set. `keys`: the auto keys that act on
    the config's architecture (kjax/model/arch: `architecture(config).auto_keys`;
    the modern recipe has no scanned loop for model.scan_unroll, which it
    refuses unless left at auto), which the verbs pass; default every one."""
    resolved = []
    for dotted in keys:
        auto, (section, leaf) = AUTO[dotted], dotted.split(".")
        if section not in config or config[section].get(leaf, auto) != auto:
            continue
        value = None
        if recorded is not None and section in recorded and leaf in recorded[section]:
            value = recorded[section][leaf] if recorded[section][leaf] != auto else None
        if value is None:
            value = platform_value(dotted, platform or platforms.platform())
        config[section][leaf] = value
        resolved.append(f"{dotted}={value!r}")
    return resolved


def resolved(config, platform: str | None = None, keys: tuple = tuple(AUTO)):
    """A copy of `config` with its auto keys (`keys`, as `resolve`'s) set for
    `platform` (default: the one traced for, else this backend); the config
    itself is left as it is."""
    copy = config.copy_and_resolve_references()
    resolve(copy, platform, keys=keys)
    return copy


def require_resolved(key: str, value):
    """`value`, or a ValueError where it is still `key`'s auto value: models and
    steps are built from resolved configs only (`resolve`; kjax train's
    kjax/pretrain/run_config.py), so what a program is never depends on where
    a builder happens to read it."""
    if value == AUTO[key]:
        raise ValueError(f"{key}={value!r} (auto) reached a builder unresolved: resolve the "
                         f"config for its platform first (kjax.config.platform_defaults.resolve)")
    return value
