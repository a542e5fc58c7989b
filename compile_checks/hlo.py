"""Checks on a compiled step's optimized HLO text (`make gpu-check`).

A scatter is how XLA writes the gradient of a gather. Two kinds cost a GPU
step dearly (the H100 profile of bert_base, docs/GPU.md):

- a scatter-add into a small table (fewer than SMALL_TABLE_ROWS rows, the
  token-type or position embeddings): thousands of updates collide on a few
  rows and serialise on atomics. The model computes those lookups as
  one-hot matmuls instead, whose gradient is a matmul;
- a bf16 or f16 scatter whose indices are not declared unique: XLA emits a
  compare-and-swap loop per element for a 16-bit atomic add, and rounds
  after each of the colliding adds. The tables are fp32 and gathered from
  in fp32, so their scatters are fp32 adds.

`scatter_findings(text)` returns one line per offending instruction, empty
when the program is clean. `kernel_traffic(text)` counts the entry
computation's kernels (fusions and custom calls), those that transpose, and
the bytes of their operands and results summed: an upper bound on the step's
memory traffic, what the hlo_traffic records compare across changes
(benchmarks/step/hlo_traffic.py prints it). Both read the text only (no XLA, no
GPU), so the suite tests them on hand-written snippets (tests/test_hlo_checks.py).
"""
from __future__ import annotations

import re

import numpy as np

from kjax.model.lookup import SMALL_TABLE_ROWS   # below it the model uses one-hot products

NARROW_FLOATS = ("bf16", "f16")

# `%name = SHAPE scatter(` with SHAPE an array (bf16[2,768]{1,0}) or, for a
# variadic scatter, a tuple of arrays; `ROOT` and `%` are optional in XLA's text.
_SCATTER = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\(.*?\)|\S+)\s+scatter\(")
# DTYPE[DIMS] in a shape: bf16[2,768], pred[8], f8e4m3fn[4,4], s32[]
_ARRAY = re.compile(r"\b([a-z]\w*?)\[([\d,]*)\]")
_ROW_INDEXED = re.compile(r"scatter_dims_to_operand_dims=\{0\}")
# XLA's op name without the jit and autodiff wrappers: "jit(train_step)/
# transpose(jvp(BertForPreTraining))/BertForPreTraining.encode/embeddings/..."
_OP_NAME = re.compile(r'op_name="(?:jit\([\w.]+\)/)?(?:(?:\w+\()+[\w.]*\)+/)?([^"]*)"')


def scatter_findings(hlo_text: str, small_rows: int = SMALL_TABLE_ROWS) -> list[str]:
    """'NAME: DTYPE[SHAPE]: reason; reason (at OP_NAME)' for each scatter
    that breaks a check; the op name, from XLA's metadata, says which lookup."""
    out, seen = [], set()
    for line in hlo_text.splitlines():
        m = _SCATTER.match(line)
        if not m or m.group(1) in seen:
            continue
        seen.add(m.group(1))
        arrays = _arrays(m.group(2))
        reasons = []
        # (a) rows of a table, indexed by its first dimension alone: a
        # take_along_axis gradient (indices on several dimensions, e.g. the
        # loss' [batch, 2]) is not a table lookup and is left to (b).
        if _ROW_INDEXED.search(line):
            for dtype, dims in arrays:
                if len(dims) >= 2 and dims[0] < small_rows:
                    reasons.append(f"a scatter-add into a table of {dims[0]} rows "
                                   f"(< {small_rows}: use a one-hot matmul)")
                    break
        # (b) 16-bit floats updated by indices XLA may not assume unique
        narrow = [dtype for dtype, _ in arrays if dtype in NARROW_FLOATS]
        if narrow and "unique_indices=true" not in line:
            reasons.append(f"{narrow[0]} updates with indices not declared unique "
                           f"(16-bit atomic adds)")
        if reasons:
            shape = ", ".join(f"{d}[{','.join(map(str, s))}]" for d, s in arrays)
            where = _OP_NAME.search(line)
            at = f" (at {where.group(1)})" if where else ""
            out.append(f"{m.group(1)}: {shape}: {'; '.join(reasons)}{at}")
    return out


def _arrays(shape: str) -> list[tuple[str, list[int]]]:
    """[(dtype, dims)] of an array shape or a tuple of them."""
    return [(dtype, [int(d) for d in dims.split(",") if d])
            for dtype, dims in _ARRAY.findall(shape)]


# `%name = SHAPE op(operands), attributes` in the entry computation
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?(%[\w.\-]+)\s*=\s*(\(.*?\)|\S+)\s+([\w\-]+)\((.*?)\)")


def _nbytes(shape: str) -> int:
    total = 0
    for dtype, dims in _arrays(shape):
        width = re.search(r"\d+", dtype)     # pred: a byte; token[]: no data
        bits = 8 if dtype == "pred" else int(width.group()) if width else 0
        total += int(np.prod(dims, dtype=np.int64)) * bits // 8
    return total


def kernel_traffic(hlo_text: str) -> dict:
    """{"kernels", "transposes", "bytes"} of the entry computation's fusions
    and custom calls: how many, how many transpose (by XLA's fusion name, or
    a transpose op of their own), and their operands' and results' bytes."""
    entry = re.search(r"^ENTRY [^\n]*\{\n(.*?)\n\}", hlo_text, re.M | re.S)
    shapes, out = {}, {"kernels": 0, "transposes": 0, "bytes": 0}
    for line in (entry.group(1) if entry else "").splitlines():
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        name, shape, op, operands = m.groups()
        shapes[name] = shape
        if op not in ("fusion", "custom-call", "transpose"):
            continue
        out["kernels"] += op != "transpose"
        out["transposes"] += op == "transpose" or "transpose" in name
        out["bytes"] += _nbytes(shape) + sum(_nbytes(shapes.get(a.strip(), ""))
                                             for a in operands.split(","))
    return out
