"""What a compiled step communicates, read from its optimized HLO text
(`kjax compile`, `make tpu-check`): per device and per step, the bytes each
kind of collective moves, every op counted as often as it runs.

An op inside a while loop runs once per iteration: the loop's trip count
comes from XLA's `known_trip_count` or, when the backend does not write it
(TPU), from its condition (`i < N`, i from 0, as jax's scans and fori
loops count), and nested loops multiply (the layer scan inside the
microbatch scan). Bytes per op are those of the whole buffer, in the type
it moves: an all-reduce's result, an all-gather's, a reduce-scatter's
times its group.
A ring algorithm sends 2(n − 1)/n of an all-reduced buffer through each
device's links and (n − 1)/n of a gathered or scattered one, n the devices
in its group: the step's `wire` bytes, what the roofline's communication
term divides by the interconnect's bandwidth (kjax/pretrain/aot.py). A
group of one device moves nothing and is not counted.
"""
from __future__ import annotations

import re

import numpy as np

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
# the op names of each kind, synchronous or the start of an asynchronous pair
_OPS = {"all-reduce": "all-reduce", "all-reduce-start": "all-reduce",
        "all-gather": "all-gather", "all-gather-start": "all-gather",
        "reduce-scatter": "reduce-scatter", "reduce-scatter-start": "reduce-scatter",
        "all-to-all": "all-to-all",
        "collective-permute": "collective-permute",
        "collective-permute-start": "collective-permute"}
_WIRE = {"all-reduce": 2.0, "all-gather": 1.0, "reduce-scatter": 1.0, "all-to-all": 1.0}

_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s+\(")
_NAME = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*")
_ARRAY = re.compile(r"\b([a-z]\w*?)\[([\d,]*)\]")
_CALLEE = re.compile(r"\b(body|condition|calls|to_apply|branch_computations|"
                     r"true_computation|false_computation)=(\{[^}]*\}|%?[\w.\-]+)")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_LT_CONSTANT = re.compile(r"[su]\d+\[\]\S*\s+constant\((\d+)\)")
_PARTITIONS = re.compile(r"num_partitions=(\d+)")


def nbytes(shape: str) -> int:
    """Bytes of an HLO shape: an array (bf16[2,768]{1,0}) or a tuple of them."""
    total = 0
    for dtype, dims in _ARRAY.findall(shape):
        width = re.search(r"\d+", dtype)     # pred: a byte; token[]: no data
        bits = 8 if dtype == "pred" else int(width.group()) if width else 0
        total += int(np.prod([int(d) for d in dims.split(",") if d], dtype=np.int64)) * bits // 8
    return total


def _split_shape(rest: str) -> tuple[str, str]:
    """(shape, what follows) of an instruction's right-hand side: a tuple
    shape's parentheses balanced (layouts hold parentheses of their own)."""
    if not rest.startswith("("):
        shape, _, tail = rest.partition(" ")
        return shape, tail
    depth = 0
    for i, ch in enumerate(rest):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return rest[:i + 1], rest[i + 1:].lstrip()
    return rest, ""


def _operands(tail: str) -> list[str]:
    """The operand names of `op(%a, %b), attrs`."""
    depth, start = 0, tail.find("(")
    for i in range(start, len(tail)):
        depth += tail[i] == "("
        depth -= tail[i] == ")"
        if depth == 0:
            return re.findall(r"%([\w.\-]+)", tail[start:i])
    return []


def parse(hlo_text: str) -> tuple[dict, str]:
    """({computation: [(name, shape, op, operands, line)]}, the entry's name)."""
    computations, entry, current = {}, "", None
    for line in hlo_text.splitlines():
        if current is None:
            m = _HEADER.match(line)
            if m and line.rstrip().endswith("{"):
                current = computations.setdefault(m.group(1), [])
                entry = m.group(1) if line.startswith("ENTRY") else entry
            continue
        if line.startswith("}"):
            current = None
            continue
        m = _NAME.match(line)
        if not m:
            continue
        shape, tail = _split_shape(line[m.end():])
        op = tail.split("(", 1)[0].strip()
        current.append((m.group(1), shape, op, _operands(tail), line))
    return computations, entry


def trip_count(while_line: str, computations: dict) -> int | None:
    """A while loop's iterations: XLA's known_trip_count, else the constant its
    condition compares the counter against (LT); None when neither says."""
    if m := _TRIP.search(while_line):
        return int(m.group(1))
    cond = re.search(r"condition=%?([\w.\-]+)", while_line)
    lines = [i[4] for i in computations.get(cond.group(1) if cond else "", [])]
    if not any("direction=LT" in line for line in lines):
        return None
    constants = [int(m.group(1)) for line in lines if (m := _LT_CONSTANT.search(line))]
    return constants[0] if len(constants) == 1 else None


def executions(computations: dict, entry: str) -> tuple[dict, list[str]]:
    """({computation: times it runs in one execution of the entry}, loops whose
    trip count is unknown: counted once)."""
    calls, unknown = {}, []
    for caller, instructions in computations.items():
        for name, _, op, _, line in instructions:
            if op.endswith(("-done", "-update")):
                continue   # the start of an asynchronous pair holds the work
            for key, value in _CALLEE.findall(line):
                if key in ("condition", "to_apply"):
                    continue
                factor = 1
                if key == "body":
                    trips = trip_count(line, computations)
                    if trips is None:
                        unknown.append(name)
                    factor = trips or 1
                for callee in re.findall(r"[\w.\-]+", value.replace("%", " ")):
                    calls.setdefault(callee, []).append((caller, factor))
    memo = {entry: 1}

    def count(c, seen=()):
        if c not in memo:
            memo[c] = 0 if c in seen else sum(count(caller, seen + (c,)) * f
                                              for caller, f in calls.get(c, ()))
        return memo[c]
    return {c: count(c) for c in computations}, unknown


def _group_size(line: str, devices: int) -> int:
    """Devices per replica group of a collective (all of them: `{}` or none)."""
    if m := re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", line):
        sizes = dict(re.findall(r"'([^']+)'=(\d+)", m.group(1)))
        return int(np.prod([int(sizes[a]) for a in re.findall(r"'([^']+)'", m.group(2))]))
    if m := re.search(r"replica_groups=\[([\d,]+)\]<=", line):
        return int(m.group(1).split(",")[-1])
    if m := re.search(r"replica_groups=\{\{([\d,]*)\}", line):
        return len([d for d in m.group(1).split(",") if d])
    return devices


def _buffer_bytes(kind: str, op: str, shape: str, operands: list[str], group: int) -> int:
    """The whole buffer a collective reduces or gathers, in the type it moves
    (XLA:TPU may all-reduce an f32 operand as bf16: the result's type). An
    asynchronous start's result is a tuple holding its operands as well: its
    operands then, an all-gather's times the group."""
    if not op.endswith("-start") or kind == "all-reduce":
        return nbytes(shape) * (group if kind == "reduce-scatter" else 1)
    ins = sum(nbytes(s) for s in (operands[:1] if kind == "collective-permute" else operands))
    return ins * (group if kind == "all-gather" else 1)


def collectives(hlo_text: str) -> list[dict]:
    """Every collective op: {kind, name, bytes (one run), group, runs (a step),
    computation, op_name (jax's, from the metadata)}."""
    computations, entry = parse(hlo_text)
    runs, _ = executions(computations, entry)
    m = _PARTITIONS.search(hlo_text[:4000])
    devices = int(m.group(1)) if m else 1
    out = []
    for comp, instructions in computations.items():
        shapes = {name: shape for name, shape, *_ in instructions}
        for name, shape, op, operands, line in instructions:
            kind = _OPS.get(op)
            if kind is None or not runs.get(comp):
                continue
            group = 1 if kind == "collective-permute" else _group_size(line, devices)
            size = _buffer_bytes(kind, op, shape, [shapes.get(o, "") for o in operands], group)
            if group == 1 and kind != "collective-permute":
                continue   # a group of one device: nothing crosses a link
            where = re.search(r'op_name="([^"]*)"', line)
            out.append({"kind": kind, "name": name, "bytes": size, "group": group,
                        "runs": runs[comp], "computation": comp,
                        "op_name": where.group(1) if where else ""})
    return out


def summary(hlo_text: str) -> dict:
    """Per device and step: bytes per kind (every run counted), `in_loops`
    (the bytes of ops that run more than once a step), `wire` (what crosses
    the device's links, ring algorithms), `ops` (collective ops in the
    program) and `unknown_loops` (loops counted once: no trip count found)."""
    ops = collectives(hlo_text)
    computations, entry = parse(hlo_text)
    _, unknown = executions(computations, entry)
    out = {kind: 0 for kind in KINDS}
    out.update(in_loops=0, wire=0, ops=len(ops), unknown_loops=len(unknown))
    for c in ops:
        total = c["bytes"] * c["runs"]
        out[c["kind"]] += total
        out["in_loops"] += total if c["runs"] > 1 else 0
        n = c["group"]
        out["wire"] += int(total * (_WIRE.get(c["kind"], 0.0) * (n - 1) / n
                                    if c["kind"] != "collective-permute" else 1.0))
    return out


def grew(before: dict, after: dict, tolerance: float = 0.01) -> list[str]:
    """The kinds (and `wire`) whose bytes a step moves grew by more than
    `tolerance` (a share) from `before` to `after`: one phrase each."""
    out = []
    for key in (*KINDS, "wire"):
        old, new = before.get(key, 0), after.get(key, 0)
        if new > old * (1 + tolerance) and new - old > 1 << 16:
            out.append(f"{key} {old / 2**20:.1f} → {new / 2**20:.1f} MiB")
    return out
