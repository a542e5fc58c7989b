"""The repository's text is written for its users: it names what changed and
why, never the number of an entry in a tracker they do not have (another
project's issue stays, repo-qualified: jax-ml/jax#23989), and kjax's code
carries no dates (history belongs in CHANGELOG.md, the records and git).
Pure text: no JAX. This file passes its own check: its examples are built
from pieces (ISSUE, HASH)."""
import re

from conftest import ROOT
from test_methods_doc import read_text, tracked_files

THIS = "tests/test_repository_text.py"
ISSUE, HASH = "iss" + "ue", "#"
# The word, singular or plural, any case, then a number: after a space, a line
# break (a paragraph reflowed between the two), "#", or "-" (a heading's anchor).
TRACKER_WORD = re.compile(rf"\b{ISSUE}s?[\s_-]+#?\d+", re.I)
# A number after "#" alone: not a repo-qualified reference (owner/name#N), an
# HTML entity, a colour (#1f77b4, #000000) or a URL fragment (TPU.md#14-paths).
BARE_NUMBER = re.compile(r"(?<![\w/.&#-])#\d{1,4}(?!\w)")
# Numbered things that are not tracker entries: an HLO operand, a profiler stream.
NOT_TRACKER = re.compile(r"\b(operand|stream) #\d+", re.I)
ISO_DATE = re.compile(r"\b20\d{2}-[01]\d-[0-3]\d\b")
SCANNED = ("README.md", "CHANGELOG.md", "docs/", "kjax/", "benchmarks/", "tests/", ".ci/",
           "tpu_configs/", "experiments/", "launch/")


def tracker_references(text: str) -> list[tuple[int, str]]:
    """(line, the reference) for every tracker number in text."""
    words = list(TRACKER_WORD.finditer(text))
    found = [(m.start(), m.group()) for m in words]
    taken = {at for m in [*words, *NOT_TRACKER.finditer(text)] for at in range(*m.span())}
    found += [(m.start(), m.group()) for m in BARE_NUMBER.finditer(text)
              if m.start() not in taken]
    return sorted((text.count("\n", 0, at) + 1, " ".join(ref.split())) for at, ref in found)


def dates(text: str) -> list[tuple[int, str]]:
    return [(text.count("\n", 0, m.start()) + 1, m.group()) for m in ISO_DATE.finditer(text)]


def offenders(find, prefixes) -> list[str]:
    out = []
    for path in sorted(tracked_files(ROOT)):
        if not path.startswith(prefixes):
            continue
        text = read_text(path)
        if text is not None:
            out += [f"{path}:{line}: {what}" for line, what in find(text)]
    return out


def test_no_tracker_numbers_in_the_repository():
    assert THIS in tracked_files(ROOT)   # the scan sees the repository's files
    found = offenders(tracker_references, SCANNED)
    assert not found, ("say what changed and why instead of a tracker number users do not "
                       "have (another project's issue: owner/name#N):\n" + "\n".join(found))


def test_no_dates_in_kjax_code():
    found = offenders(dates, ("kjax/",))
    assert not found, ("kjax/ carries no dates: history goes to CHANGELOG.md, the records "
                       "(docs/) or git:\n" + "\n".join(found))


def test_the_checks_can_fail():
    """Each form a tracker number takes is caught, with its line; what only
    looks like one is not."""
    text = (f"fixed in {ISSUE} 33\nsee {ISSUE}S 24/33 and the\nGPU figures of {ISSUE}s\n"
            f"34 ({HASH}35); [link](EXPERIMENTS.md#demo-{ISSUE}-16---vm)\n"
            f"{ISSUE.title()} {HASH}7 too\n")
    assert tracker_references(text) == [
        (1, f"{ISSUE} 33"), (2, f"{ISSUE}S 24"), (3, f"{ISSUE}s 34"), (4, f"{HASH}35"),
        (4, f"{ISSUE}-16"), (5, f"{ISSUE.title()} {HASH}7")]
    fine = ("jax-ml/jax#23989; colors #1f77b4 #000000 #7f7f7f; docs/TPU.md#14-paths-gs; "
            "&#1234; 'operand #0 does not dominate'; Stream #14(Compute); ## 1. Heading; "
            f"an {ISSUE} of instruction {ISSUE}; t{ISSUE} 12")
    assert tracker_references(fine) == []
    assert dates("measured 2026-11-27 on\n2026-11-24 and 20261127") == [
        (1, "2026-11-27"), (2, "2026-11-24")]
    assert dates("version 0.2.0, 2026-11, step 2026") == []


def test_the_version_is_the_changelogs_newest():
    """setup.py, kjax.__version__ and CHANGELOG.md's newest section name one
    version: a release that lands a break raises all three together."""
    import ast
    import os

    import kjax
    setup = ast.parse(open(os.path.join(ROOT, "setup.py"), encoding="utf-8").read())
    (call,) = [n for n in ast.walk(setup) if isinstance(n, ast.Call)
               and getattr(n.func, "id", None) == "setup"]
    (version,) = [k.value.value for k in call.keywords if k.arg == "version"]
    changelog = open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8").read()
    sections = re.findall(r"^## (\d+\.\d+\.\d+)\s*$", changelog, re.M)
    assert sections and sections == sorted(sections, key=lambda v: tuple(map(int, v.split("."))),
                                           reverse=True)
    assert version == kjax.__version__ == sections[0]
