"""The platform a program is for, in one place: kjax's name for it ("cpu",
"gpu", "tpu", whatever jax calls the device's platform), and the target a
traced program is lowered for.

Attention asks which platform it lowers for (cuDNN on a GPU, Pallas'
interpret mode on a CPU, Mosaic or Triton for the flash kernel), and so do
the keys whose default depends on the platform (platform_defaults.py).
While a program is traced for devices that are not here (`kjax compile`,
`make tpu-check`, `make gpu-check`: a TPU slice or an H100 described to a
CPU host), `jax.default_backend()` says "cpu"; `lowering_for` sets the
target's platform for the tracing, and `platform()` is what the code asks.
"""
from __future__ import annotations

import contextlib
import contextvars

import jax

# jax's names for a device's platform that kjax calls otherwise
_ALIASES = {"cuda": "gpu", "rocm": "gpu"}
_TARGET: contextvars.ContextVar[str | None] = contextvars.ContextVar("kjax_platform",
                                                                     default=None)


def normalize(name: str) -> str:
    """jax's platform names ("cuda", "rocm", "gpu", "tpu", "cpu") → gpu/tpu/cpu."""
    name = name.lower()
    return _ALIASES.get(name, name)


def platform() -> str:
    """"cpu", "gpu" or "tpu": the target being lowered for, else jax's default backend."""
    return _TARGET.get() or normalize(jax.default_backend())


@contextlib.contextmanager
def lowering_for(name: str | None):
    """Trace for `name` (a device's `.platform`; None: jax's default backend)."""
    token = _TARGET.set(None if name is None else normalize(name))
    try:
        yield
    finally:
        _TARGET.reset(token)
