"""Keys whose default depends on the platform the step runs on (issue 33).

A key set to its `auto` value (`train.dropout_rng="auto"`,
`model.scan_unroll=-1`) takes the value below for the platform. A default
changes for a platform only with a measurement behind it
(docs/PERFORMANCE.md, "platform defaults"):

    GPU   dropout_rng=rbg, scan_unroll=0 (every layer unrolled): on one H200,
          BERT-base 512 × 32, the preset step went from 89.2 to 71.3 ms
          (threefry masks and the scan's zero-filled, copied residuals);
    CPU, TPU  unchanged (threefry, one layer per loop iteration): nothing
          measured says otherwise.

`kjax train` resolves them once, before its first step, and records the
resolved values in WORKDIR/kjax_config.py: a run resumed on another platform
(or with a `--config` that still says auto) keeps the values it started
with, so its masks and program, and with them bit-exact resume, do not
depend on where it resumes. Verbs that do not train (eval, export, analyze)
resolve them for the platform they run on: there they change speed only.
"""
from __future__ import annotations

import jax

AUTO = {"train.dropout_rng": "auto", "model.scan_unroll": -1}

# key → {platform: value}; "default" for every platform not named.
PLATFORM_DEFAULTS = {
    "train.dropout_rng": {"gpu": "rbg", "default": "threefry"},
    "model.scan_unroll": {"gpu": 0, "default": 1},
}


def normalize_platform(platform: str) -> str:
    """jax's platform names ('cuda', 'rocm', 'gpu', 'tpu', 'cpu') → gpu/tpu/cpu."""
    return "gpu" if platform in ("cuda", "rocm", "gpu") else platform


def platform_value(key: str, platform: str):
    choices = PLATFORM_DEFAULTS[key]
    return choices.get(normalize_platform(platform), choices["default"])


def value(config, dotted: str):
    """config's value of a dotted key ("train.dropout_rng")."""
    section, leaf = dotted.split(".")
    return config[section][leaf]


def resolve(config, platform: str | None = None, recorded=None) -> list[str]:
    """Sets every key still at its auto value, in place: to the `recorded`
    config's value where that one is concrete (a resumed run), else to the
    platform's (default: the platform jax runs on). Returns `key=value` for
    each key it set."""
    resolved = []
    for dotted, auto in AUTO.items():
        section, leaf = dotted.split(".")
        if section not in config or config[section].get(leaf, auto) != auto:
            continue
        value = None
        if recorded is not None and section in recorded and leaf in recorded[section]:
            value = recorded[section][leaf] if recorded[section][leaf] != auto else None
        if value is None:
            value = platform_value(dotted, platform or _backend())
        config[section][leaf] = value
        resolved.append(f"{dotted}={value!r}")
    return resolved


def resolved_value(key: str, value):
    """`value` of `key`, or its platform default for the backend jax runs on
    when it is the auto value (the model and step builders' fallback)."""
    return platform_value(key, _backend()) if value == AUTO[key] else value


def _backend() -> str:
    return jax.default_backend()   # called only when a value is resolved
