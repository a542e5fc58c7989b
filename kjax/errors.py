"""The one exception type for bad user input: the CLI prints its message on a
single line (it names the file/key/value and the fix) and exits with 2."""


class KjaxError(Exception):
    pass
