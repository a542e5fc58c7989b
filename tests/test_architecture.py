"""The layering of kjax (docs/ARCHITECTURE.md): folders follow the data's
path, and a module imports only its own layer or lower ones — function-local
imports included. Also: no kjax file over 400 lines, and no branch on an input
mode's name outside kjax/inputs (consumers ask the mode).

`python tests/test_architecture.py` prints the import graph ("a.b -> c.d",
kjax. left out), the format of the closing notes' before/after lists.
"""
import ast
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "kjax")

# Lowest first. A module's layer is that of its longest listed prefix.
LAYERS = (
    ("base", ("kjax", "kjax.errors", "kjax.paths", "kjax.store_outage", "kjax.progress",
              "kjax.config")),
    ("text", ("kjax.text",)),
    ("morph", ("kjax.morph",)),
    ("tokens", ("kjax.tokens",)),
    ("knowledge", ("kjax.knowledge",)),
    ("shake", ("kjax.shake",)),
    ("examples", ("kjax.examples",)),
    ("inputs", ("kjax.inputs",)),
    ("batches", ("kjax.batches",)),
    ("model", ("kjax.model",)),
    ("objectives", ("kjax.losses", "kjax.objectives")),
    ("parallel", ("kjax.parallel",)),
    ("train", ("kjax.train",)),
    ("checkpoint", ("kjax.checkpoint",)),
    ("pretrain", ("kjax.pretrain",)),
    ("tools", ("kjax.finetune", "kjax.export", "kjax.analysis")),
    ("cli", ("kjax.cli",)),
)
# Packages that share a layer but must not import each other.
APART = ("kjax.finetune", "kjax.export", "kjax.analysis")
MAX_LINES = 400


def module_files() -> dict[str, str]:
    """{dotted module name: path} of every kjax module."""
    out = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = path
    return out


def imports_of(path: str, module: str, modules: dict) -> set[str]:
    """kjax modules `path` imports, anywhere in the file (functions included).
    `from kjax.a import b` counts as kjax.a.b when that is a module."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:   # relative: from the module's package upwards
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                     for a in node.names]
        else:
            continue
        found.update(n for n in names if n == "kjax" or n.startswith("kjax."))
    return found - {module}


def layer_of(module: str) -> tuple[int, str]:
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > len(best[1]):
                    best = (index, prefix)
    return best if best else (-1, "")


def graph() -> list[tuple[str, str]]:
    modules = module_files()
    return sorted((m, target) for m, path in modules.items()
                  for target in imports_of(path, m, modules))


def short(module: str) -> str:
    return module.removeprefix("kjax.") if module != "kjax" else "__init__"


def test_every_module_has_a_layer():
    unplaced = [m for m in module_files() if layer_of(m)[0] < 0]
    assert not unplaced, f"add these to LAYERS (and docs/ARCHITECTURE.md): {unplaced}"


def test_no_module_imports_a_later_stage():
    upward = []
    for source, target in graph():
        (low, lp), (high, hp) = layer_of(target), layer_of(source)
        if low > high:
            upward.append(f"{short(source)} ({LAYERS[high][0]}) -> {short(target)} "
                          f"({LAYERS[low][0]})")
        elif low == high and lp != hp and {lp, hp} <= set(APART):
            upward.append(f"{short(source)} -> {short(target)} (siblings kept apart)")
    assert not upward, "imports against the layering:\n" + "\n".join(upward)


def test_the_check_sees_function_local_imports(tmp_path):
    """The test itself: an import inside a function is an import."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from kjax.cli import main\n    import kjax.pretrain.trainer\n")
    modules = module_files()
    assert imports_of(str(source), "kjax.tokens.m", modules) == {"kjax.cli",
                                                                  "kjax.pretrain.trainer"}
    assert layer_of("kjax.cli") > layer_of("kjax.tokens.m")


def test_no_kjax_file_is_longer_than_400_lines():
    long = {os.path.relpath(p, ROOT): n for p in module_files().values()
            if (n := sum(1 for _ in open(p, encoding="utf-8"))) > MAX_LINES}
    assert not long, f"split these files (over {MAX_LINES} lines): {long}"


def test_no_branch_on_an_input_mode_name_outside_the_registry():
    """Consumers ask the mode (kjax/inputs); only the registry knows names."""
    from kjax.config.schema import TOKENIZER_SCHEMES
    from kjax.inputs import MODES
    # "multihot" is a tokenizer scheme too: scheme branches are the tokenizer's business.
    names = "|".join(m for m in MODES if m not in TOKENIZER_SCHEMES)
    branch = re.compile(rf"""input_mode\)?\s*(==|!=|in\b|not in\b)|(==|!=)\s*["']({names})["']"""
                        rf"""|\bin\s*\([^)]*["']({names})["']""")
    found = []
    for module, path in module_files().items():
        if module.startswith("kjax.inputs"):
            continue
        for number, line in enumerate(open(path, encoding="utf-8"), 1):
            if branch.search(line.split("#")[0]):
                found.append(f"{os.path.relpath(path, ROOT)}:{number}: {line.strip()}")
    assert not found, "ask the input mode instead:\n" + "\n".join(found)


TASK_REGISTRY = ("kjax.finetune.registry", "kjax.finetune.task", "kjax.finetune.sentence_tasks",
                 "kjax.finetune.span_tasks")


def task_branches(source: str, names) -> list[tuple[int, str]]:
    """Lines of `source` that branch on a task's name: a comparison with a
    `task` variable or with a name, membership in a tuple of names, or a
    dict keyed by names (PRIMARY = {"classify": ...})."""
    names = "|".join(map(re.escape, names))
    branch = re.compile(rf"""\btask\w*\)?\s*(==|!=|in\b|not in\b)|(==|!=)\s*["']({names})["']"""
                        rf"""|\bin\s*\([^)]*["']({names})["']|\{{\s*["']({names})["']\s*:""")
    loop = re.compile(r"\bfor\s+[\w, ()]+\s+in\b")    # `for task in tasks` iterates
    return [(n, line.strip()) for n, line in enumerate(source.splitlines(), 1)
            if branch.search(loop.sub("", line.split("#")[0]))]


def test_no_branch_on_a_task_name_outside_the_registry():
    """Consumers ask the task (kjax/finetune/registry.py); only its modules
    know names (issue 14: tasks were names branched on in heads, metrics,
    trainer)."""
    from kjax.finetune.registry import TASKS
    found = []
    for module, path in module_files().items():
        if module in TASK_REGISTRY:
            continue
        found += [f"{os.path.relpath(path, ROOT)}:{n}: {line}"
                  for n, line in task_branches(open(path, encoding="utf-8").read(), TASKS)]
    assert not found, "ask the task instead:\n" + "\n".join(found)


def test_the_task_branch_check_sees_the_old_branches():
    """The test itself: the branches this registry replaced are caught."""
    old = ('if task == "qa":\n'
           'x = hidden if self.task in ("ner", "qa") else pooled\n'
           'PRIMARY = {"classify": "macro_f1", "pair": "accuracy"}\n'
           'outputs = {"regress": 1, "qa": 2}.get(task, n)\n'
           'elif kind != "choice":\n'
           'spec = finetune_task(task)   # a lookup is not a branch\n'
           'for task in tasks:\n')
    assert [n for n, _ in task_branches(old, ["classify", "pair", "regress", "ner", "qa",
                                              "choice"])] == [1, 2, 3, 4, 5]


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    for source, target in graph():
        print(f"{short(source)} -> {short(target)}")
