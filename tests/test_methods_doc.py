"""The repository stands alone: every "METHODS §…" / "Eq. …" /
"Table …" / "Fig. …" citation resolves in docs/METHODS.md, every function and
test that page names exists, and no tracked file points outside the
repository into the workspace's shared folder. Pure text and AST: no JAX."""
import ast
import os
import re
import subprocess

import pytest

from conftest import ROOT

DOC = os.path.join("docs", "METHODS.md")
# Directories whose citations use METHODS' numbering even without the word
# "METHODS" in front; elsewhere (docs, README) only "METHODS §…" and "Eq. …".
CODE_DIRS = ("kjax", "tests", "benchmarks", "experiments", "tpu_configs")
TEXT_EXT = (".py", ".sh", ".md", ".tsv", ".txt", ".cfg", ".toml", ".yaml", ".yml", ".json")
THIS = os.path.join("tests", "test_methods_doc.py")   # its synthetic citations are examples

DASH = r"\s*[–-]\s*"
SECTION = re.compile(rf"(?<!\.md )§ ?(\d+(?:\.\d+)?)(?:{DASH}(\d+(?:\.\d+)?))?")
METHODS_SECTION = re.compile(rf"METHODS §(\d+(?:\.\d+)?)(?:{DASH}(\d+(?:\.\d+)?))?")
EQUATION = re.compile(rf"\bEq\. ?(\d+)(?:{DASH}(\d+))?")
TABLE = re.compile(r"\bTables? (\d+)(?: and (\d+))?")
FIGURE = re.compile(rf"\bFig\. (\d+)(?:{DASH}(\d+))?")
HEADING = re.compile(r"^#{2,3} (\d+)\.(\d+)? .*$", re.M)
LABELLED_EQUATION = re.compile(r"\(Eq\. (\d+)\)\s*$", re.M)
REFERENCE = re.compile(r"`([\w./-]+\.py)::([\w.]+)`")


def expand_sections(first: str, last: str | None) -> list[str]:
    """'2.1'..'2.3' → 2.1, 2.2, 2.3 (a range stays inside one chapter)."""
    if not last:
        return [first]
    if "." not in first or "." not in last:
        return [str(n) for n in range(int(first.split(".")[0]), int(last.split(".")[0]) + 1)]
    major, lo = first.split(".")
    return [f"{major}.{n}" for n in range(int(lo), int(last.split(".")[1]) + 1)]


def expand_numbers(first: str, last: str | None) -> list[str]:
    return [str(n) for n in range(int(first), int(last or first) + 1)]


def citations(text: str, bare_sections: bool) -> set[tuple[str, str]]:
    """{("§", "1.2"), ("Eq.", "1"), ("Table", "7"), ("Fig.", "4"), …} cited in text."""
    found = set()
    for m in (SECTION if bare_sections else METHODS_SECTION).finditer(text):
        found |= {("§", s) for s in expand_sections(*m.groups())}
    for m in EQUATION.finditer(text):
        found |= {("Eq.", n) for n in expand_numbers(*m.groups())}
    if bare_sections:   # docs number tables of their own; the thesis's say "METHODS"
        for m in TABLE.finditer(text):
            found |= {("Table", n) for n in m.groups() if n}
        for m in FIGURE.finditer(text):
            found |= {("Fig.", n) for n in expand_numbers(*m.groups())}
    return found


def sections_of(doc: str) -> dict[str, str]:
    """Section number → its text up to the next numbered heading."""
    heads = list(HEADING.finditer(doc))
    return {f"{m.group(1)}.{m.group(2)}" if m.group(2) else m.group(1):
            doc[m.end():heads[i + 1].start() if i + 1 < len(heads) else len(doc)]
            for i, m in enumerate(heads)}


def defined(doc: str) -> set[tuple[str, str]]:
    """What the page defines: its numbered sections, its labelled equations,
    and the tables and figures it names."""
    out = {("§", s) for s in sections_of(doc)}
    out |= {("Eq.", n) for n in LABELLED_EQUATION.findall(doc)}
    out |= {c for c in citations(doc, bare_sections=True) if c[0] in ("Table", "Fig.")}
    return out


def names_in(path: str) -> set[str]:
    """Top-level functions and classes of a Python file, and Class.method."""
    tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names |= {f"{node.name}.{n.name}" for n in node.body
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return names


def reference_problems(doc: str, root: str) -> list[str]:
    """Each `path::name` the page names must exist; each section must name at
    least one implementation and one test."""
    problems, cache = [], {}
    for path, name in REFERENCE.findall(doc):
        full = os.path.join(root, path)
        if not os.path.isfile(full):
            problems.append(f"{path}::{name}: no such file")
            continue
        if full not in cache:
            cache[full] = names_in(full)
        if name not in cache[full]:
            problems.append(f"{path}::{name}: no such function or class in {path}")
    sections = sections_of(doc)
    for number, body in sections.items():
        if any(other.startswith(number + ".") for other in sections):
            continue   # a chapter whose text lives in its subsections
        refs = [p for p, _ in REFERENCE.findall(body)]
        if not any(not p.startswith("tests/") for p in refs) or "Implemented in:" not in body:
            problems.append(f"§{number} names no implementing function ('Implemented in:')")
        if not any(p.startswith("tests/") for p in refs) or "Checked by:" not in body:
            problems.append(f"§{number} names no test ('Checked by:')")
    return problems


def tracked_files(root: str) -> list[str]:
    """`git ls-files`, or every file under root outside hidden and build folders."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True,
                             check=True, timeout=60).stdout.decode()
        return [p for p in out.split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        files = []
        for top, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in
                       ("runs", "build", "dist", "__pycache__") and not d.endswith(".egg-info")]
            files += [os.path.relpath(os.path.join(top, n), root) for n in names]
        return files


def read_text(path: str) -> str | None:
    try:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            return f.read()
    except (UnicodeDecodeError, OSError):
        return None   # binary (a font, a picture) or a file listed but absent


def cited_in_repository() -> dict[tuple[str, str], str]:
    """Every citation of the tracked files → the first file that makes it."""
    first = {}
    for path in sorted(tracked_files(ROOT)):
        if path == THIS or path == DOC or not path.endswith(TEXT_EXT):
            continue
        text = read_text(path)
        if text is None:
            continue
        bare = path.split("/")[0] in CODE_DIRS
        for c in citations(text, bare_sections=bare):
            first.setdefault(c, path)
    return first


@pytest.fixture(scope="module")
def doc() -> str:
    return open(os.path.join(ROOT, DOC), encoding="utf-8").read()


def test_every_citation_resolves_in_methods(doc):
    have = defined(doc)
    cited = cited_in_repository()
    assert ("Eq.", "1") in cited and ("§", "2.5") in cited   # the scan really reads the code
    missing = [f"{kind} {n} (cited in {path})" for (kind, n), path in sorted(cited.items())
               if (kind, n) not in have]
    assert not missing, f"docs/METHODS.md lacks: {missing}"


def test_every_named_function_and_test_exists(doc):
    assert len(REFERENCE.findall(doc)) > 50
    assert reference_problems(doc, ROOT) == []


def test_the_checks_can_fail():
    """A page with a missing section, equation and function, and a code
    citation it cannot answer, is caught on every count."""
    fake = ("## 1. A\n\n### 1.1 B\n\n    y = x                 (Eq. 1)\n\n"
            "Implemented in: `kjax/model/attention.py::no_such_function`.\n"
            "Checked by: `tests/test_shake.py::test_no_such_test`.\n\n"
            "### 1.2 C\n\nNo references at all.\n")
    have = defined(fake)
    code = citations("see METHODS §1.3 and §2.1–2.2, Eq. 3–4; Table 7 (§1.5, 6)", True)
    assert {("§", "1.3"), ("§", "2.1"), ("§", "2.2"), ("Eq.", "3"), ("Eq.", "4"),
            ("Table", "7"), ("§", "1.5")} <= code
    assert ("§", "1.1") in have and ("Eq.", "1") in have
    assert code - have == code   # none of these resolve in the fake page
    problems = reference_problems(fake, ROOT)
    assert any("no_such_function" in p for p in problems)
    assert any("test_no_such_test" in p for p in problems)
    assert any(p.startswith("§1.2 names no implementing") for p in problems)
    assert ("§", "4") not in citations("docs/TPU.md §4", True)   # another doc's own sections


SHARED = ".." + "/shared"   # built, so this file does not flag itself


def test_no_tracked_file_points_into_the_shared_folder():
    files = tracked_files(ROOT)
    assert THIS in files or os.path.isfile(os.path.join(ROOT, THIS))
    offenders = [path for path in files
                 if SHARED in (read_text(path) or "")]
    assert not offenders, (f"these files point into {SHARED}, which a user's clone does not "
                           f"have (name the data or take a --data argument): {offenders}")


def test_help_and_readme_say_where_the_methods_are():
    from kjax.cli import build_parser
    assert "docs/METHODS.md" in build_parser().format_help()
    first_screen = "\n".join(open(os.path.join(ROOT, "README.md"), encoding="utf-8")
                             .read().splitlines()[:25])
    assert "docs/METHODS.md" in first_screen
