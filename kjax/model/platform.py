"""The platform a traced program is meant for, where it picks a code path.

Attention asks which platform it lowers for (cuDNN on a GPU, Pallas' interpret
mode on a CPU, Mosaic or Triton for the flash kernel). While a program is
traced for devices that are not here (`kjax compile`, `make tpu-check`,
`make gpu-check`: a TPU slice or an H100 described to a CPU host),
`jax.default_backend()` says "cpu"; `lowering_for` sets the target's
platform for the tracing, and `platform()` is what the model code asks.
"""
from __future__ import annotations

import contextlib
import contextvars

import jax

# the names jax gives a device's platform, as jax.default_backend() spells them
_ALIASES = {"cuda": "gpu", "rocm": "gpu"}
_TARGET: contextvars.ContextVar[str | None] = contextvars.ContextVar("kjax_platform",
                                                                     default=None)


def platform() -> str:
    """"cpu", "gpu" or "tpu": the target being lowered for, else jax's default backend."""
    return _TARGET.get() or jax.default_backend()


@contextlib.contextmanager
def lowering_for(name: str | None):
    """Trace for `name` (a device's `.platform`; None: jax's default backend)."""
    token = _TARGET.set(None if name is None else _ALIASES.get(name.lower(), name.lower()))
    try:
        yield
    finally:
        _TARGET.reset(token)
