"""Input modes: how an example's tokens become model positions. One module
per mode defines one object (kjax/inputs/base.py says what it owns); this
registry is the only place that lists them. Adding a mode is one new module
and one line below (docs/ARCHITECTURE.md has a worked example).

    onehot            one token per position (BERT)
    shared_position   tokens, a postposition sharing its substantive's position id
                      (SHAKE variant 5)
    multihot          one position per morpheme, Eq. 3–4 (UKnowBERT)
    merged            substantive + postposition as one position (SHAKE variant 6)
"""
from __future__ import annotations

from kjax.errors import KjaxError
from kjax.inputs import merged, multihot, onehot, shared_position
from kjax.inputs.base import InputMode

MODES: dict[str, InputMode] = {
    "onehot": onehot.MODE,
    "shared_position": shared_position.MODE,
    "multihot": multihot.MODE,
    "merged": merged.MODE,
}


def input_mode(config_or_name) -> InputMode:
    """The mode a config (model.input_mode) or a name selects."""
    name = config_or_name if isinstance(config_or_name, str) else \
        config_or_name.model.input_mode
    if name not in MODES:
        raise KjaxError(f"model.input_mode={name!r}; choose one of {', '.join(MODES)}")
    return MODES[name]


def mask_example(example: dict, config, rng) -> dict:
    """Masks for one example over whole positions of the configured mode (what
    `prepare` stores for static masking and the loader draws dynamically)."""
    return input_mode(config).mask(example, config, rng)


__all__ = ["MODES", "InputMode", "input_mode", "mask_example"]
