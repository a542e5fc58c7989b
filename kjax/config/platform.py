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
import re

import jax

# jax's names for a device's platform that kjax calls otherwise
_ALIASES = {"cuda": "gpu", "rocm": "gpu"}
_TARGET: contextvars.ContextVar[str | None] = contextvars.ContextVar("kjax_platform",
                                                                     default=None)
_KIND: contextvars.ContextVar[str | None] = contextvars.ContextVar("kjax_device_kind",
                                                                  default=None)


def normalize(name: str) -> str:
    """jax's platform names ("cuda", "rocm", "gpu", "tpu", "cpu") → gpu/tpu/cpu."""
    name = name.lower()
    return _ALIASES.get(name, name)


def platform() -> str:
    """"cpu", "gpu" or "tpu": the target being lowered for, else jax's default backend."""
    return _TARGET.get() or normalize(jax.default_backend())


def tpu_generation() -> int | None:
    """The TPU generation lowered for (2 for "TPU v2", 5 for "TPU v5 lite", ...),
    None off TPU: what a Pallas kernel may ask of Mosaic depends on it."""
    if platform() != "tpu":
        return None
    kind = _KIND.get() or jax.devices()[0].device_kind
    match = re.search(r"v(\d+)", kind)
    return int(match.group(1)) if match else None


@contextlib.contextmanager
def lowering_for(name: str | None, device_kind: str | None = None):
    """Trace for `name` (a device's `.platform`; None: jax's default backend)
    and, where given, that device's `.device_kind` ("TPU v3")."""
    token = _TARGET.set(None if name is None else normalize(name))
    kind = _KIND.set(device_kind)
    try:
        yield
    finally:
        _KIND.reset(kind)
        _TARGET.reset(token)
