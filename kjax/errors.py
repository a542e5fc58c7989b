"""The one exception type for bad user input: the CLI prints its message on a
single line (it names the file/key/value and the fix) and exits with 2."""


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
