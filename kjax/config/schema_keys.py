"""What a config key is (`Key`: default, meaning, allowed values) and the
shorthands the schema (kjax/config/schema.py) declares its keys with.

The type of a key is the type of its default (an int is accepted where a float
is expected). `choices` lists the allowed values; `min`/`max` bound numbers
(`open_min`/`open_max` exclude the bound); `special` values are allowed
outside the range (mesh axes: -1 fills).
"""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Key:
    default: Any
    meaning: str
    choices: tuple = ()
    min: float | None = None
    max: float | None = None
    open_min: bool = False
    open_max: bool = False
    special: tuple = ()

    @property
    def kind(self) -> type:
        return type(self.default)

    def allowed(self) -> str:
        """The allowed values in words, e.g. "float in (0, 1)" or "int >= 1"."""
        name = {dict: "dict", tuple: "tuple"}.get(self.kind, self.kind.__name__)
        if self.choices:
            return f"{name}: one of {', '.join(map(str, self.choices))}"
        low = "" if self.min is None else ("(" if self.open_min else "[") + f"{self.min:g}"
        high = "" if self.max is None else f"{self.max:g}" + (")" if self.open_max else "]")
        if low and high:
            text = f"{name} in {low}, {high}"
        elif low:
            text = f"{name} {'>' if self.open_min else '>='} {self.min:g}"
        elif high:
            text = f"{name} {'<' if self.open_max else '<='} {self.max:g}"
        else:
            text = name
        return text + "".join(f" or {v}" for v in self.special)

    def fits(self, value) -> bool:
        """`value` has this key's type (an int fits a float, a list a tuple)."""
        kind = self.kind
        if kind is bool:
            return isinstance(value, bool)
        if kind is int:
            return isinstance(value, int) and not isinstance(value, bool)
        if kind is float:
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind is tuple:
            return isinstance(value, (tuple, list))
        if kind is dict:
            return hasattr(value, "items")
        return isinstance(value, kind)

    def accepts(self, value) -> bool:
        """`value` (of the right type) is among the allowed values."""
        if value in self.special:
            return True
        if self.choices:
            return value in self.choices
        if self.min is not None and (value <= self.min if self.open_min else value < self.min):
            return False
        return not (self.max is not None and
                    (value >= self.max if self.open_max else value > self.max))


def positive(default, meaning):
    return Key(default, meaning, min=0, open_min=True)


def at_least(low, default, meaning, **kw):
    return Key(default, meaning, min=low, **kw)


def share(default, meaning, closed_max=False):
    """A probability-like float in [0, 1) (or [0, 1])."""
    return Key(default, meaning, min=0.0, max=1.0, open_max=not closed_max)
