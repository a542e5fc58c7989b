"""Config files and `--config.KEY=VALUE` overrides, on ml_collections' own
machinery (`config_flags` on a private absl FlagValues):

1. the file (local or a URL, fetched through kjax/paths.py) is loaded by
   `config_flags.DEFINE_config_file` and its `get_config()` called;
2. its tree is laid over `defaults()` (ConfigDict.update: the schema's types
   hold, an int given for a float becomes a float), so a file may set only the
   keys it changes, or start from `kjax.config.defaults()`;
3. the overrides are parsed by `config_flags.DEFINE_config_dict` on that
   full tree, each with its key's type (bool, int, float, str, tuple, dict);
4. every value is checked against the schema, then section by section;
5. a value that starts with `{run}/` is a path inside the folder the file lies
   in (`in_folder`): what `kjax train` records for the files it keeps in a run
   folder (WORKDIR/kjax_config.py names WORKDIR/tokenizer/... so), so the file,
   and with it the run, keeps working wherever the folder is moved or copied.

Overrides go through one function, `apply_overrides`, whoever gives them: the
command line's `--config.KEY=VALUE` strings (each parsed with its key's type),
and a phase's or the compile checks' {dotted key: value} (each value checked
against its key's type as a config file's are).

Anything wrong is one KjaxError line, naming FILE:LINE for an error inside the
file (a syntax error, an exception, a wrong type) and the key for an override.
"""
from __future__ import annotations

import contextvars
import os
from collections.abc import Mapping
import re
import sys
import traceback
import warnings

import ml_collections
from absl import flags
from ml_collections import config_flags

from kjax import paths
from kjax.config.schema import RETIRED, SCHEMA
from kjax.config.validate import validate
from kjax.errors import KjaxError

ConfigDict = ml_collections.ConfigDict
FLAG = "config"
MODULE = f"{FLAG}_config"          # the name config_flags gives the loaded file's module


def _tree(schema: dict) -> ConfigDict:
    c = ConfigDict()
    for name, node in schema.items():
        c[name] = _tree(node) if isinstance(node, dict) else (
            ConfigDict(node.default) if node.kind is dict else node.default)
    return c


def _unlock_free_form(c: ConfigDict, schema: dict) -> None:
    for name, node in schema.items():
        if isinstance(node, dict):
            _unlock_free_form(c[name], node)
        elif node.kind is dict:
            c[name].unlock()   # e.g. shake.tag_weights: its keys are the user's


_reading_file = contextvars.ContextVar("kjax_reading_config_file", default=False)


def defaults() -> ConfigDict:
    """The whole tree with every default, locked: setting a key that does not
    exist is an error (a typo never passes silently). Inside a config file
    being loaded, retired keys are there too, at their old values: a config
    recorded before (WORKDIR/kjax_config.py sets every key) still loads, and
    `conform` drops them or names what replaced them."""
    c = _tree(SCHEMA)
    if _reading_file.get():
        for dotted, (old, _) in RETIRED.items():
            section, leaf = dotted.rsplit(".", 1)
            c[section][leaf] = old
    c.lock()
    _unlock_free_form(c, SCHEMA)
    return c


def preset_dirs() -> list[str]:
    """Where the presets of tpu_configs/ are: inside an installed wheel
    (kjax/tpu_configs, setup.py ships them) or beside a source checkout."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [os.path.join(package, "tpu_configs"),
            os.path.join(os.path.dirname(package), "tpu_configs")]


def resolve_config_path(path: str) -> str:
    """`path` when it exists (a local file or a URL); else, for a bare preset
    name (`demo`, `demo.py`, `tpu_configs/demo.py`), the shipped preset, so
    the commands of the docs work from any folder with an installed wheel."""
    if paths.isfile(path):
        return path
    if not paths.is_remote(path) and os.path.dirname(os.path.normpath(path)) in ("", "tpu_configs"):
        file = os.path.basename(path) if path.endswith(".py") else os.path.basename(path) + ".py"
        for folder in preset_dirs():
            if os.path.isfile(os.path.join(folder, file)):
                return os.path.join(folder, file)
    raise KjaxError(f"config file {path!r} not found; pass a file from tpu_configs/, "
                    f"e.g. --config tpu_configs/demo.py")


# ---- errors inside a config file ------------------------------------------------------

def retired(key: str, value=None, always: bool = False) -> KjaxError | None:
    """The error for a retired key (None: not retired, or its old default)."""
    if key not in RETIRED:
        return None
    old, instead = RETIRED[key]
    if not always and value == old:
        return None
    return KjaxError(f"config key {key!r} was removed: {instead}")


def _first_line(e: BaseException) -> str:
    """One line for an exception raised while the file built its config; the
    ConfigDict's own messages said as a user would."""
    text = str(e).strip().strip("'\"")
    locked = re.search(r'Key "(\w+)" does not exist', text)
    if locked:
        leaf = locked.group(1)
        gone = [k for k in RETIRED if k.endswith("." + leaf)]
        if gone:
            return str(retired(gone[0], always=True))
        return (f"config key {leaf!r} does not exist (a typo?); every key is listed with its "
                f"meaning in kjax/config/schema.py")
    cast = re.search(r"field '(\w+)'.*?\. (.*) is of original type <class '(\w+)'> and cannot "
                     r"be casted to type <class '(\w+)'>", text, re.S)
    if cast:
        leaf, value, got, want = cast.groups()
        return f"config key {leaf!r} = {value!r} is a {got}; give a {want}"
    lines = text.splitlines()
    return f"{type(e).__name__}: {lines[0][:200]}" if lines else type(e).__name__


def _file_error(e: BaseException, local: str, shown: str) -> KjaxError:
    """FILE:LINE of the deepest frame of `local` in the exception chain."""
    if isinstance(e, SyntaxError) and e.filename and os.path.samefile(e.filename, local):
        return KjaxError(f"{shown}:{e.lineno}: syntax error in the config file: {e.msg}")
    chain, seen = [], e
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for error in reversed(chain):   # innermost first: the user's own line
        frames = [f for f in traceback.extract_tb(error.__traceback__)
                  if f.filename and os.path.exists(f.filename)
                  and os.path.samefile(f.filename, local)]
        if frames:
            return KjaxError(f"{shown}:{frames[-1].lineno}: {_first_line(error)}")
    return KjaxError(f"{shown}: the config file could not be loaded: {_first_line(chain[-1])}")


def _line_of(text: str, key: str) -> str:
    """':LINE' of the first line that names `key` (a leaf name), or ''."""
    for number, line in enumerate(text.splitlines(), 1):
        if re.search(rf"\b{re.escape(key)}\b", line):
            return f":{number}"
    return ""


def _read_file(path: str) -> tuple[object, str, str]:
    """(what get_config() returned, the file's text, the module) via config_flags."""
    with paths.local_copy(path) as local:
        text = open(local, encoding="utf-8").read()
        values = flags.FlagValues()
        holder = config_flags.DEFINE_config_file(FLAG, None, flag_values=values,
                                                 lock_config=False, sys_argv=["kjax"])
        sys.modules.pop(MODULE, None)
        reading = _reading_file.set(True)
        # No bytecode for a config file: Python trusts a .pyc whose source has
        # the same size and mtime in whole seconds, so a file rewritten within
        # the second (a sweep's script) would load its old values; and no
        # __pycache__ lands in a user's workdir beside kjax_config.py.
        wrote_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
        try:
            with warnings.catch_warnings():   # config_flags' own use of load_module()
                warnings.simplefilter("ignore", DeprecationWarning)
                values(["kjax", f"--{FLAG}={local}"])
            module = sys.modules.pop(MODULE, None)
            return holder.value, text, module
        except Exception as e:   # noqa: BLE001 - anything the user's file raises
            sys.modules.pop(MODULE, None)
            raise _file_error(e, local, path) from None
        finally:
            sys.dont_write_bytecode = wrote_bytecode
            _reading_file.reset(reading)


# ---- laying a tree over the defaults ---------------------------------------------------

def conform(tree, schema: dict, prefix: str, where) -> dict:
    """`tree` as a plain dict the defaults can take: every key known, every
    value of its key's type (lists become tuples); `where(key)` names the place
    of an error."""
    out = {}
    for name, value in dict(tree).items():
        full = prefix + name
        if full in RETIRED:
            error = retired(full, value)
            if error is None:
                continue
            raise KjaxError(f"{where(name)}{error}")
        if name not in schema:
            section = prefix.rstrip(".") or "the root"
            raise KjaxError(f"{where(name)}config key {full!r} does not exist; valid keys under "
                            f"{section}: {', '.join(schema)}")
        node = schema[name]
        if isinstance(node, dict):
            if not isinstance(value, (dict, ConfigDict)):
                raise KjaxError(f"{where(name)}config key {full!r} is a section; give a dict "
                                f"of its keys, not {value!r}")
            out[name] = conform(value, node, full + ".", where)
        elif not node.fits(value):
            raise KjaxError(f"{where(name)}config key {full!r} = {value!r} is a "
                            f"{type(value).__name__}; give a {node.allowed()}")
        else:
            out[name] = tuple(value) if node.kind is tuple else (
                dict(value) if node.kind is dict else value)
    return out


def _over_defaults(user, path: str, text: str) -> ConfigDict:
    if user is None:
        raise KjaxError(f"{path}: get_config() returned None; end it with `return c` "
                        f"(c = kjax.config.defaults() with your changes)")
    if not isinstance(user, (dict, ConfigDict)):
        raise KjaxError(f"{path}: get_config() returned a {type(user).__name__}; return a "
                        f"ConfigDict (start from kjax.config.defaults())")
    config = defaults()
    config.update(conform(user, SCHEMA, "", lambda key: f"{path}{_line_of(text, key)}: "))
    return config


# ---- overrides -------------------------------------------------------------------------

def _override_key(assignment: str) -> tuple[str, str]:
    if not assignment.startswith(f"--{FLAG}.") or "=" not in assignment:
        raise KjaxError(f"override {assignment!r} must look like --config.key=value")
    dotted, value = assignment[len(FLAG) + 3:].split("=", 1)
    return dotted, value


def _check_key(config: ConfigDict, dotted: str) -> None:
    if dotted in RETIRED:
        raise retired(dotted, always=True)
    node, keys = config, dotted.split(".")
    for depth, key in enumerate(keys):
        if not isinstance(node, ConfigDict) or key not in node:
            where = ".".join(keys[:depth]) or "the root"
            valid = ", ".join(node.keys()) if isinstance(node, ConfigDict) else "(a leaf)"
            raise KjaxError(f"config key {dotted!r} does not exist; valid keys under {where}: "
                            f"{valid}")
        node = node[key]


def apply_overrides(config: ConfigDict, overrides, where: str = "") -> ConfigDict:
    """Overrides applied to `config` in place (and returned): `--config.a.b=value`
    strings, each parsed by config_flags with the type its key has in `config`
    (the command line), or a mapping {"a.b": value} (a phase's overrides, the
    compile checks'), each value checked against its key's schema type as a
    config file's values are (an int fits a float key; a list becomes a tuple).
    `where` prefixes an error ("phases[1] (seq512): ")."""
    if isinstance(overrides, Mapping):
        return _apply_values(config, overrides, where)
    overrides = list(overrides or [])
    for assignment in overrides:
        _check_key(config, _override_key(assignment)[0])
    if not overrides:
        return config
    values = flags.FlagValues()
    argv = ["kjax", *overrides]
    config_flags.DEFINE_config_dict(FLAG, config, flag_values=values, sys_argv=argv,
                                    lock_config=False)
    try:
        values(argv)
    except flags.Error as e:
        text = str(e).splitlines()[0]
        match = re.match(rf"flag --{FLAG}\.([\w.]+)=(.*?): (.*)", text)
        if match:
            key, value, why = match.groups()
            raise KjaxError(f"config key {key!r}: cannot set {value!r} ({why[:160]})") from None
        raise KjaxError(f"bad override ({text[:200]})") from None
    return config


def _apply_values(config: ConfigDict, values: Mapping, where: str) -> ConfigDict:
    tree: dict = {}
    for dotted, value in values.items():
        *sections, leaf = str(dotted).split(".")
        node = tree
        for section in sections:
            node = node.setdefault(section, {})
            if not isinstance(node, dict):
                raise KjaxError(f"{where}overrides set {dotted!r} and a section above it")
        node[leaf] = value
    config.update(conform(tree, SCHEMA, "", lambda key: where))
    return config


def copy_of(config) -> ConfigDict:
    """A copy of `config` that may be assigned into (of a frozen one too:
    FrozenConfigDict.as_configdict() is the frozen config's own ConfigDict,
    which an assignment would change under every later as_configdict())."""
    if isinstance(config, ml_collections.FrozenConfigDict):
        config = config.as_configdict()
    return config.copy_and_resolve_references()


def apply_override(config: ConfigDict, assignment: str) -> None:
    """One `--config.a.b=value` (programmatic use, tests)."""
    apply_overrides(config, [assignment])


def load_config(path: str, overrides: list[str] | None = None) -> ConfigDict:
    """The config of `path` (+ overrides), checked key by key and section by
    section before anything is compiled. Checks that need the input-mode and
    objective registries run in `kjax.objectives.check_config`."""
    path = resolve_config_path(path)
    user, text, module = _read_file(path)
    if module is not None and hasattr(module, "get_finetune_config"):
        raise KjaxError(f"{path}{_line_of(text, 'get_finetune_config')}: get_finetune_config() "
                        f"is no longer read; set the keys in get_config() as "
                        f"c.finetune.KEY = VALUE (docs/FINETUNE.md)")
    config = apply_overrides(_over_defaults(user, path, text), overrides or [])
    in_folder(config, paths.parent(path))
    validate(config)
    return config


RUN_FOLDER = "{run}"   # a value's prefix: the folder of the config file that holds it


def in_folder(config: ConfigDict, folder: str) -> list[str]:
    """Every string value `{run}/REST` of `config` set, in place, to `folder`/REST;
    returns the dotted keys it set. `folder` is where the config file lies
    (local or a URL): a run folder's kjax_config.py names the files the run
    keeps inside it so, and they are found wherever the folder is."""
    done = []
    for key, value in list(config.items()):
        if isinstance(value, ConfigDict):
            done += [f"{key}.{k}" for k in in_folder(value, folder)]
        elif isinstance(value, str) and (value == RUN_FOLDER or
                                         value.startswith(RUN_FOLDER + "/")):
            rest = value[len(RUN_FOLDER) + 1:]
            config[key] = paths.join(folder, rest) if rest else folder
            done.append(key)
    return done
