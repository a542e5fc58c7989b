"""The layering of kjax (docs/ARCHITECTURE.md): folders follow the data's
path, and a module imports only its own layer or lower ones — function-local
imports included. Inside a layer imports run one way too: no circle between
kjax modules, whether its imports sit at the top of a file or inside a
function (a function-local import is for an optional heavy
dependency — torch, transformers, tensorflow — never to dodge a circle; a
function-local kjax import that closes no circle is allowed). Also: no kjax
file over 400 lines, and no branch on an input mode's name outside
kjax/inputs, on an architecture's outside kjax/model/arch, or on a task's
outside the task registry (consumers ask the registry's object).

`python tests/test_architecture.py` prints the import graph ("a.b -> c.d",
kjax. left out), the format of the closing notes' before/after lists, then
every circle and every upward import (exit status 1 if there is one).
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
    return set(import_lines(path, module, modules))


def import_lines(path: str, module: str, modules: dict) -> dict[str, list[int]]:
    """{kjax module: the lines of `path` that import it}, functions included."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    found = {}
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
        for n in names:
            if (n == "kjax" or n.startswith("kjax.")) and n != module:
                found.setdefault(n, set()).add(node.lineno)
    return {n: sorted(lines) for n, lines in found.items()}


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


def circles(edges) -> list[list[str]]:
    """The import circles of `edges` ((importer, imported) pairs): for every
    group of modules that reach each other (a strongly connected component),
    the shortest circle through each member, as [a, b, ..., a], each circle
    once."""
    succ = {}
    for a, b in edges:
        succ.setdefault(a, set()).add(b)
        succ.setdefault(b, set())
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def connect(v):                       # Tarjan; kjax's graph is a few hundred nodes
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(succ[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1 or v in succ[v]:
                groups.append(group)

    for v in sorted(succ):
        if v not in index:
            connect(v)
    found, seen = [], set()
    for group in sorted(groups, key=min):
        for start in sorted(group):       # breadth-first back to `start` inside the group
            parent, frontier, path = {start: None}, [start], None
            while frontier and path is None:
                nxt = []
                for v in frontier:
                    for w in sorted(succ[v] & group):
                        if w == start:       # start ... v, then back to start
                            path = []
                            while v is not None:
                                path.append(v)
                                v = parent[v]
                            path = path[::-1] + [start]
                            break
                        if w not in parent:
                            parent[w] = v
                            nxt.append(w)
                    if path is not None:
                        break
                frontier = nxt
            key = frozenset(zip(path, path[1:]))
            if key not in seen:
                seen.add(key)
                found.append(path)
    return found


def circle_report(edges=None, modules=None) -> list[str]:
    """One line per circle: "a -> b -> a (a.py:12, b.py:30)"."""
    modules = modules if modules is not None else module_files()
    edges = edges if edges is not None else graph()
    lines = []
    for path in circles(edges):
        sites = []
        for a, b in zip(path, path[1:]):
            rows = import_lines(modules[a], a, modules).get(b, []) if a in modules else []
            sites.append(f"{os.path.relpath(modules[a], ROOT)}:{','.join(map(str, rows))}"
                         if rows else short(a))
        lines.append(" -> ".join(map(short, path)) + f"   ({'; '.join(sites)})")
    return lines


def upward_imports() -> list[str]:
    upward = []
    for source, target in graph():
        (low, lp), (high, hp) = layer_of(target), layer_of(source)
        if low > high:
            upward.append(f"{short(source)} ({LAYERS[high][0]}) -> {short(target)} "
                          f"({LAYERS[low][0]})")
        elif low == high and lp != hp and {lp, hp} <= set(APART):
            upward.append(f"{short(source)} -> {short(target)} (siblings kept apart)")
    return upward


def test_every_module_has_a_layer():
    unplaced = [m for m in module_files() if layer_of(m)[0] < 0]
    assert not unplaced, f"add these to LAYERS (and docs/ARCHITECTURE.md): {unplaced}"


def test_no_module_imports_a_later_stage():
    upward = upward_imports()
    assert not upward, "imports against the layering:\n" + "\n".join(upward)


def test_no_import_circle_between_kjax_modules():
    """Inside a package imports run one way: a circle (module-level or through
    an import inside a function) is a module that cannot be read, or loaded,
    without the one that needs it."""
    found = circle_report()
    assert not found, ("import circles; move the shared part below both, or merge the "
                       "files (a function-local import does not break a circle):\n"
                       + "\n".join(found))


def test_the_circle_check_finds_every_circle_and_only_circles():
    """The test itself: two circles sharing a module are both named, a
    longer one whole, a self-import too; a diamond is no circle."""
    edges = [("e.hf", "e.card"), ("e.card", "e.hf"), ("e.hf", "e.electra"),
             ("e.electra", "e.hf"), ("f.reg", "f.task"), ("f.task", "f.feat"),
             ("f.feat", "f.reg"), ("s", "s"), ("d.top", "d.left"), ("d.top", "d.right"),
             ("d.left", "d.low"), ("d.right", "d.low")]
    assert circles(edges) == [["e.card", "e.hf", "e.card"], ["e.electra", "e.hf", "e.electra"],
                              ["f.feat", "f.reg", "f.task", "f.feat"], ["s", "s"]]
    assert circles([e for e in edges if e[0].startswith("d.")]) == []


def test_the_circle_check_reads_function_local_imports(tmp_path):
    """The test itself: a circle closed by an import inside a function is
    found in real files, with the lines that close it."""
    pkg = tmp_path / "kjax" / "p"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text("from kjax.p import b\n")
    (pkg / "b.py").write_text("def f():\n    from kjax.p.a import g\n")
    modules = {"kjax.p.a": str(pkg / "a.py"), "kjax.p.b": str(pkg / "b.py")}
    edges = [(m, t) for m, path in modules.items() for t in imports_of(path, m, modules)]
    report = circle_report(edges, modules)
    assert len(report) == 1 and report[0].startswith("p.a -> p.b -> p.a   (")
    assert report[0].endswith("a.py:1; " + os.path.relpath(str(pkg / "b.py"), ROOT) + ":2)")


def test_the_check_sees_function_local_imports(tmp_path):
    """The test itself: an import inside a function is an import."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from kjax.cli import main\n    import kjax.pretrain.trainer\n")
    modules = module_files()
    assert imports_of(str(source), "kjax.tokens.m", modules) == {"kjax.cli",
                                                                  "kjax.pretrain.trainer"}
    assert layer_of("kjax.cli") > layer_of("kjax.tokens.m")


def test_the_model_reaches_the_flash_kernels_through_one_function():
    """kjax/model/flash is a package of its own: outside it, kjax/model imports
    only the package itself (its entry points: sharded_flash_attention, and
    flash_calls and choose_tiles for a run's config), and only
    from attention_core.py; the kernels' modules are nobody else's in the model."""
    modules = module_files()
    found = {m: sorted(t for t in imports_of(path, m, modules) if t.startswith("kjax.model.flash"))
             for m, path in modules.items()
             if m.startswith("kjax.model.") and not m.startswith("kjax.model.flash")}
    assert {m: t for m, t in found.items() if t} == {
        "kjax.model.attention_core": ["kjax.model.flash"]}
    import kjax.model.flash as flash
    assert flash.__all__ == ["MASK_VALUE", "choose_tiles", "flash_calls", "sharded_flash_attention"]


def test_the_export_package_lists_every_module():
    """kjax/export/__init__.py's map names each of its modules (a file it
    leaves out is one nobody finds)."""
    import kjax.export as export
    listed = set(re.findall(r"^    (\w+)\s", export.__doc__, re.M))
    files = {m.rsplit(".", 1)[1] for m in module_files() if m.startswith("kjax.export.")}
    assert files - listed == set() and listed - files == set(), (files - listed, listed - files)


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


# The architecture registry (each architecture's module knows its own name).
ARCH_REGISTRY = "kjax.model.arch"


def arch_branches(source: str, names) -> list[tuple[int, str]]:
    """Lines of `source` that decide by an architecture's name: `arch` (model.arch,
    enc.arch, args.arch, m.get("arch")) compared or tested for membership, or a
    value compared with a name or looked for among names (`for arch in ...`
    iterates, a string that says model.arch='electra' is no comparison)."""
    names = "|".join(map(re.escape, names))
    branch = re.compile(rf"""\barch\b["']?\)?\s*(==|!=|\bin\b|\bnot in\b)"""
                        rf"""|(==|!=)\s*["']({names})["']|["']({names})["']\s*(==|!=)"""
                        rf"""|\bin\s*[(\[{{][^)\]}}]*["']({names})["']""")
    loop = re.compile(r"\bfor\s+[\w, ()]+\s+in\b")
    return [(n, line.strip()) for n, line in enumerate(source.splitlines(), 1)
            if branch.search(loop.sub("", line.split("#")[0]))]


def test_no_branch_on_an_architecture_name_outside_the_registry():
    """Consumers ask the architecture (kjax/model/arch); only its modules know
    names (`model.arch` compared in demo, export, validate, the NSP and RTD
    objectives, FLOPs and `kjax compile` made every architecture an edit of each,
    and `kjax compile` costed ELECTRA's layer loops once)."""
    from kjax.model.arch import ARCHITECTURES
    found = []
    for module, path in module_files().items():
        if module == ARCH_REGISTRY or module.startswith(ARCH_REGISTRY + "."):
            continue
        found += [f"{os.path.relpath(path, ROOT)}:{n}: {line}"
                  for n, line in arch_branches(open(path, encoding="utf-8").read(), ARCHITECTURES)]
    assert not found, "ask the architecture instead:\n" + "\n".join(found)


def test_the_architecture_branch_check_sees_the_old_branches():
    """The test itself: the comparisons the registry replaced are caught, and
    what only names an architecture is not."""
    old = ('if config.model.arch == "electra":\n'
           'modern = args.arch == "modern"\n'
           'if m.get("arch", "bert") != "bert" or not m.scan_layers:\n'
           'return self.arch != "modern"\n'
           'if enc.arch in ("bert", "electra"):\n'
           'if "modern" == name:\n'
           'kind = name if name not in ["bert"] else None\n'
           'raise KjaxError(f"model.arch=\'electra\' with {mode}")   # a message\n'
           'for arch in ARCHITECTURES:\n'
           'arch = architecture(config)   # a lookup is not a branch\n'
           'config.model.arch = "electra"\n')
    assert [n for n, _ in arch_branches(old, ["bert", "modern", "electra"])] == [
        1, 2, 3, 4, 5, 6, 7]


def resolve_calls_without_keys(source: str) -> list[int]:
    """Lines of `source` that call platform_defaults.resolve / resolved (as an
    attribute, or a name imported from it) without `keys=`."""
    tree = ast.parse(source)
    imported = {a.asname or a.name: a.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom)
                and node.module == "kjax.config.platform_defaults" for a in node.names}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        named = (isinstance(f, ast.Attribute) and f.attr in ("resolve", "resolved")
                 and isinstance(f.value, ast.Name) and f.value.id == "platform_defaults") or \
            (isinstance(f, ast.Name) and imported.get(f.id) in ("resolve", "resolved"))
        if named and not any(k.arg == "keys" for k in node.keywords):
            found.append(node.lineno)
    return found


def test_every_resolve_of_auto_keys_passes_the_architectures():
    """kjax/config/platform_defaults.py resolves the auto keys it is given (default:
    all); which act is the architecture's (`architecture(config).auto_keys`). A
    call in kjax without them resolves model.scan_unroll for the modern recipe,
    whose check then refuses the run."""
    found = [f"{os.path.relpath(path, ROOT)}:{n}" for module, path in module_files().items()
             for n in resolve_calls_without_keys(open(path, encoding="utf-8").read())]
    assert not found, ("pass keys=architecture(config).auto_keys (kjax.model.arch):\n"
                       + "\n".join(found))


def test_the_resolve_check_sees_a_call_without_keys():
    """The test itself."""
    source = ("from kjax.config import platform_defaults\n"
              "from kjax.config.platform_defaults import resolved as r\n"
              "platform_defaults.resolve(c)\n"
              "platform_defaults.resolved(c, keys=a.auto_keys)\n"
              "r(c, 'cuda')\n"
              "other.resolve(c)\n")
    assert resolve_calls_without_keys(source) == [3, 5]


# The registry and the modules that define tasks (each knows its own name).
TASK_REGISTRY = ("kjax.finetune.registry", "kjax.finetune.contract",
                 "kjax.finetune.sentence_tasks", "kjax.finetune.choice", "kjax.finetune.wic",
                 "kjax.finetune.ner", "kjax.finetune.qa")


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
    know names (a task name branched on in heads, metrics and the trainer
    made every new task an edit of each)."""
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
    found, upward = circle_report(), upward_imports()
    print(f"\ncircles: {len(found) or 'none'}")
    print("\n".join(f"  {line}" for line in found))
    print(f"upward imports: {len(upward) or 'none'}")
    print("\n".join(f"  {line}" for line in upward))
    sys.exit(1 if found or upward else 0)
