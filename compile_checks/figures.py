"""The memory figures the presets' headers and docs/TPU.md and docs/GPU.md
quote, written from the compile record (.ci/compile_record.json), so that a
model change is re-recorded with one command and no figure is copied by hand.

    python -m compile_checks.figures           # rewrite them from the record
    python -m compile_checks.figures --check   # exit 1 naming each file that differs

`make tpu-check RECORD=write` and `make gpu-check RECORD=write` run it after
they write the record. What it writes, each between fixed marks that name
this command:

- in every tpu_configs/*.py header, the paragraph that begins HEADER_MARK:
  XLA's verdict and memory for the preset alone on its slice;
- in docs/TPU.md, the table of every `make tpu-check` case;
- in docs/GPU.md, the table of every `make gpu-check` case.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import sys
import textwrap

from compile_checks.cases import (GPU_CASES, TPU_CASES, gpu_case_id, header_case,
                                       tpu_case_id)
from compile_checks.record import CHECKOUT, RECORD, Record
from compile_checks.targets import device_memory, h100_target
from kjax.parallel.topology import parse_topology

GIB = 1 << 30
COMMAND = "python -m compile_checks.figures"
HEADER_MARK = "Memory, from .ci/compile_record.json"
WIDTH = 79
TPU_TABLE, GPU_TABLE = "the tpu-check table", "the gpu-check table"
# XLA's out-of-memory verdict, as aot._oom_summary keeps it
_REFUSED = re.compile(r"temporaries \(([\d.]+)G\) exceeds available HBM \(([\d.]+)G\)")


class MissingFigures(ValueError):
    """A generated place or a record entry that is not there (one line)."""


def gib(n: int) -> str:
    return f"{n / GIB:.2f}"


def _slice(topology: str) -> tuple[int, int, str, int]:
    """(devices, hosts, "core" | "chip", HBM GiB per device) of a TPU slice."""
    t = parse_topology(topology)
    unit = "chip" if t.chip.devices_per_chip == 1 else "core"
    return t.num_devices, t.hosts, unit, t.chip.hbm_bytes // GIB


def _refusal(error: str) -> str:
    m = _REFUSED.search(error)
    return (f"temporaries {m.group(1)} GiB needed of {m.group(2)} usable" if m
            else " ".join(error.split())[:200])


def _entry(entries: dict, case: str) -> dict:
    if case not in entries:
        kind = case.split()[0]
        raise MissingFigures(f"{os.path.relpath(RECORD)} has no verdict for `{case}`: run "
                             f"`make {kind}-check RECORD=write`")
    return entries[case]


def _wrap(text: str) -> list[str]:
    """Lines of at most WIDTH characters; a `code span` or a "doc.md §N" reference
    is never broken (a § alone at a line's start would read as a METHODS citation)."""
    spans = re.sub(r"`[^`]*`|\.md §", lambda m: m.group(0).replace(" ", "\0"), text)
    return [line.replace("\0", " ") for line in
            textwrap.wrap(spans, WIDTH, break_on_hyphens=False, break_long_words=False)]


def header_paragraph(preset: str, entry: dict, root: str = CHECKOUT) -> list[str]:
    """The lines of the preset header's memory paragraph."""
    v, versions, topology = entry["verdict"], entry["versions"], entry["topology"]
    devices, hosts, unit, hbm = _slice(topology)
    where = f"a {topology}" + (f" as its {hosts} hosts would" if hosts > 1 else "")
    batch = v["batch_size"]
    text = (f"{HEADER_MARK} (`make tpu-check RECORD=write` writes this paragraph): "
            f"compiled for {where} (jax {versions['jax']}, libtpu {versions['libtpu']}, "
            f"no TPU), at batch {batch} ({batch // devices} per {unit}) the train step ")
    if v["fits"]:
        text += (f"needs {gib(v['peak'])} GiB per {unit} of {hbm} (arguments "
                 f"{gib(v['arguments'])}, temporaries {gib(v['temporaries'])}): fits.")
    else:
        text += f"does not fit: {_refusal(v['error'])}."
    if v.get("same_as"):
        other = v["same_as"]
        other += ".py" if os.path.exists(_preset_path(other, root)) else ""
        text += (f" XLA compiled its program once for it and {other} (the same up to "
                 f"floating-point constants).")
    text += (f" `kjax compile --config tpu_configs/{preset}.py --topology {topology}` says "
             f"it again; with `--fit-batch`, also the largest batch that compiles "
             f"(docs/TPU.md §15).")
    return _wrap(text)


def _versions(entries: list[dict], names: tuple[str, ...]) -> str:
    seen = sorted({", ".join(f"{n} {e['versions'].get(n, '—')}" for n in names)
                   for e in entries})
    return "; ".join(seen)


def tpu_table(entries: dict, cases=TPU_CASES) -> list[str]:
    """docs/TPU.md's table: every tpu-check case, in the checks' order."""
    rows = [(case, _entry(entries, tpu_case_id(case))) for case in cases]
    lines = [f"Recorded with {_versions([e for _, e in rows], ('jax', 'libtpu'))}; per "
             f"device; \"compile s\" is the wall time of the compile that was recorded, "
             f"\"CPU s\" its process's CPU time (all threads):", "",
             "| preset / change | topology (hosts) | batch | compile s | CPU s | arguments GiB "
             "| temporaries GiB | peak GiB | HBM GiB | all-reduce / all-gather / reduce-scatter "
             "MiB a step | fits |", "|---" * 11 + "|"]
    for (preset, topology, _, note, _), entry in rows:
        v = entry["verdict"]
        _, hosts, _, hbm = _slice(topology)
        change = f"`{preset}.py`" + (f" + {note}" if note else "")
        memory = ([gib(v[k]) for k in ("arguments", "temporaries", "peak")] if v["fits"]
                  else ["—"] * 3)
        verdict = "yes" if v["fits"] else f"**no**: {_refusal(v['error'])}"
        if v.get("same_as"):
            verdict += f" (the program of {v['same_as']}: not compiled again)"
        lines.append(f"| {change} | {topology} ({hosts}) | {v['batch_size']} | "
                     f"{v['seconds']:.0f} | {v['cpu_s']:.0f} | {' | '.join(memory)} | {hbm} | "
                     f"{collectives_cell(v)} | {verdict} |")
    return lines


def collectives_cell(v: dict) -> str:
    """A step's collectives per device in MiB (kjax/pretrain/collectives.py),
    and what of it runs inside loops; — when not recorded or not compiled."""
    c = v.get("collectives")
    if not c or not v.get("fits", v.get("compiled")):
        return "—"
    cell = " / ".join(f"{c.get(k, 0) / (1 << 20):.0f}"
                      for k in ("all-reduce", "all-gather", "reduce-scatter"))
    return cell + (f" ({c['in_loops'] / (1 << 20):.0f} in loops)" if c.get("in_loops") else "")


def checks_cell(v: dict) -> str:
    """The GPU table's checks column: HLO scatters; ptxas on the Pallas kernels, if any."""
    cell = "clean" if not v["hlo_findings"] else f"**{len(v['hlo_findings'])} scatter(s)**"
    if v.get("kernels"):
        bad = len(v["ptx_findings"])
        cell += f"; {len(v['kernels'])} Pallas kernels, " + (
            f"**{bad} spill/wgmma finding(s)**" if bad else "no spills (ptxas)")
    return cell


def attention_cell(v: dict) -> str:
    """The GPU table's attention column: which paths the compiled step runs
    (the Pallas kernel, cuDNN's fused attention, or XLA's own ops)."""
    paths = [name for name, key in (("Pallas", "pallas_attention"), ("cuDNN", "cudnn_attention"))
             if v.get(key)]
    return " + ".join(paths) or "XLA"


def gpu_table(entries: dict, memory: int, cases=GPU_CASES) -> list[str]:
    """docs/GPU.md's table: every gpu-check case, in the checks' order."""
    rows = [(case, _entry(entries, gpu_case_id(case))) for case in cases]
    names = ("jax", "jax-cuda13-plugin", "nvidia-cuda-nvcc", "nvidia-cudnn-cu13")
    lines = [f"Recorded with {_versions([e for _, e in rows], names)} (ptxas is "
             f"nvidia-cuda-nvcc's); \"compile s\" is the wall time of the compile that was "
             f"recorded, \"CPU s\" its process's CPU time:", "",
             "| preset | seq × batch | compile s | CPU s | arguments GiB | temporaries GiB | "
             "peak GiB | HBM GiB | all-reduce / all-gather / reduce-scatter MiB a step | "
             "HLO checks | attention |", "|---" * 11 + "|"]
    for (preset, _, label, *_), entry in rows:
        v = entry["verdict"]
        if not v["compiled"]:
            lines.append(f"| {preset} | {label} | {v['seconds']:.0f} | | | | | "
                         f"{memory // GIB} | — | **not compiled**: {v['error'][:120]} | |")
            continue
        lines.append(f"| {preset} | {label} | {v['seconds']:.0f} | {v.get('cpu_s', 0):.0f} | "
                     f"{gib(v['arguments'])} | {gib(v['temporaries'])} | {gib(v['peak'])} | "
                     f"{memory // GIB} | {collectives_cell(v)} | {checks_cell(v)} | "
                     f"{attention_cell(v)} |")
    return lines


def _preset_path(preset: str, root: str = CHECKOUT) -> str:
    return os.path.join(root, "tpu_configs", f"{preset}.py")


def with_header(text: str, lines: list[str], path: str) -> str:
    """`text` (a preset file) with its memory paragraph replaced by `lines`."""
    old = text.split("\n")
    start = next((i for i, line in enumerate(old) if line.startswith(HEADER_MARK)), None)
    if start is None or "\n".join(old[:start]).count('"""') != 1:   # not in the docstring
        raise MissingFigures(f"{os.path.relpath(path)}: its docstring has no paragraph "
                             f"beginning {HEADER_MARK!r}; add one ({COMMAND} writes it)")
    end = start
    while end < len(old) and old[end].strip() and '"""' not in old[end]:
        end += 1
    return "\n".join(old[:start] + lines + old[end:])


def with_table(text: str, name: str, lines: list[str], path: str) -> str:
    """`text` (a Markdown file) with the block between `name`'s marks replaced."""
    begin = (f"<!-- {name}: written from .ci/compile_record.json by `{COMMAND}` (make "
             f"tpu-check / gpu-check RECORD=write run it); edit the record, not this -->")
    return between_marks(text, begin, f"<!-- end of {name} -->", lines, path)


def between_marks(text: str, begin: str, end: str, lines: list[str], path: str) -> str:
    """`text` with what lies between the lines `begin` and `end` replaced by
    `lines` (a blank line on each side); MissingFigures unless there is
    exactly one such pair, in that order. Every generated Markdown block of
    the repository is written through it."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise MissingFigures(f"{os.path.relpath(path)}: no one pair of marks "
                             f"({begin} ... {end})")
    head, rest = text.split(begin)
    return head + "\n".join([begin, "", *lines, "", end]) + rest.split(end, 1)[1]


def render(root: str | None = None, record_path: str = RECORD, tpu_cases=None,
           gpu_cases=None) -> dict[str, str]:
    """{path: the file's text with every figure written from the record}
    (default: this checkout's files and the checks' cases)."""
    root = CHECKOUT if root is None else root
    tpu_cases = TPU_CASES if tpu_cases is None else tpu_cases
    gpu_cases = GPU_CASES if gpu_cases is None else gpu_cases
    entries = Record(record_path).entries
    out = {}
    for path in sorted(glob.glob(_preset_path("*", root))):
        preset = os.path.basename(path)[:-3]
        case = header_case(preset, tpu_cases)
        if case is None:
            raise MissingFigures(f"{os.path.relpath(path)} has no case of its own in "
                                 f"compile_checks/cases.py (TPU_CASES); add one")
        entry = _entry(entries, tpu_case_id(case))
        with open(path, encoding="utf-8") as f:
            out[path] = with_header(f.read(), header_paragraph(preset, entry, root), path)
    memory = device_memory(h100_target())
    for doc, name, lines in (("TPU.md", TPU_TABLE, tpu_table(entries, tpu_cases)),
                             ("GPU.md", GPU_TABLE, gpu_table(entries, memory, gpu_cases))):
        path = os.path.join(root, "docs", doc)
        with open(path, encoding="utf-8") as f:
            out[path] = with_table(f.read(), name, lines, path)
    return out


def stale(root: str | None = None, record_path: str = RECORD, **cases) -> list[str]:
    """The files whose text differs from what the record writes."""
    return [path for path, text in render(root, record_path, **cases).items()
            if open(path, encoding="utf-8").read() != text]


def write(root: str | None = None, record_path: str = RECORD, **cases) -> list[str]:
    """Rewrites every file whose figures differ from the record's; returns them."""
    changed = []
    for path, text in render(root, record_path, **cases).items():
        if open(path, encoding="utf-8").read() != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            changed.append(path)
    return changed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 naming each file whose figures differ")
    ap.add_argument("--record-file", default=RECORD, help="the record (default: %(default)s)")
    args = ap.parse_args(argv)
    try:
        paths = (stale if args.check else write)(CHECKOUT, args.record_file)
    except (ValueError, OSError) as e:   # MissingFigures, a broken record, a missing file
        print(f"figures: {e}", file=sys.stderr)
        return 2
    for path in paths:
        print(f"figures: {'differs from the record' if args.check else 'wrote'} "
              f"{os.path.relpath(path)}", file=sys.stderr)
    if args.check and paths:
        print(f"figures: run `{COMMAND}` and commit the files", file=sys.stderr)
    return 1 if args.check and paths else 0


if __name__ == "__main__":
    sys.exit(main())
