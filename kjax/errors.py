"""The one exception type for bad user input: the CLI prints its message on a
single line (it names the file/key/value and the fix) and exits with 2."""
import math
import os


class KjaxError(Exception):
    pass


def import_extra(module: str, purpose: str, extra: str):
    """Imports an optional dependency, or says which kjax extra provides it."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise KjaxError(f"{purpose} needs {module.split('.')[0]}, which cannot be imported "
                        f"({e}); install it with: pip install 'kjax[{extra}]'") from None


def env_seconds(name: str, default: float, what: str, allow_zero: bool = False) -> float:
    """A duration in seconds from the environment variable `name` (unset or
    empty: `default`); anything but a number > 0 (≥ 0 with `allow_zero`) is
    one line naming the variable, its value and `what` it sets."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value >= 0 if allow_zero else value > 0):
        raise KjaxError(f"{name}={text!r} is not a number of seconds "
                        f"{'>= 0' if allow_zero else '> 0'} ({what}; default {default:.0f})")
    return value
