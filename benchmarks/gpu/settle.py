"""The call that settles the attention questions: `suite.py --settle`, one
H100 or H200 in at most 9 minutes (benchmarks/gpu/README.md, "The call that
settles the attention questions"). Its parts, in this order:

    (s) the BERT-base step, seq 512 × batch 32, bf16: six variants built and
        timed one after another, then timed again taking turns; each ÷ the
        cuDNN baseline (attention dropout 0), and the verdict line for
        GPU_FLASH_FASTER (kjax/model/attention_core.py);
    (t) one attention layer, fwd + bwd, at 16,384 tokens (seq 512 / 2048 /
        8192, batch 32 / 8 / 2): the grid of cuDNN, flash and explicit paths
        × attention dropout 0 / 0.1 × B none / pairs "pos" / "random", the
        flash tiles' alternates at 2048 and 8192 with dropout, then jax's
        Mosaic GPU kernel beside cuDNN;
    (f) `kjax train`'s SIGKILL leg (system/train_resume.py --signals KILL);
    (m) modern_base from process start to its first step, the default alone
        (step/modern_compile.py --variants 1).

The attention part is what gives way when the steps ran long: the grid
stops (printing what it measured) where the time left would not cover the
tiles' run, (m) and (f), and Mosaic runs only if it still fits beside (m)
and (f).
"""
from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time

from harness import records
from parts import BENCHMARKS, BERT_VARIANTS, DEADLINE, child, run, say

# (key of parts.BERT_VARIANTS, what the row answers), the baseline first so
# every later row's ratio can be printed as it arrives
STEP_ROWS = [
    ("cudnn-hidden-dropout", "baseline: attention dropout 0 on cuDNN"),
    ("explicit-dropout", "the preset on the explicit path"),
    ("flash-dropout", "the preset on the fused path"),
    ("pairs-explicit-dropout", "preset + pairs B on the explicit path"),
    ("pairs-flash-dropout", "preset + pairs B on the fused path"),
    ("no-dropout", "no dropout at all"),
]
# the two questions: (flag, fused row, explicit row); both rows pin their path,
# so the verdict can turn a flag off again as well as on
QUESTIONS = [("dropout", "flash-dropout", "explicit-dropout"),
             ("shake", "pairs-flash-dropout", "pairs-explicit-dropout")]
ROUNDS = 3               # alternating rounds after each variant's own timing
STEP_TUNING_S = 10.0     # flash_tuning.BUDGET_S as a run has it: the steps run what users get
GRID_TUNING_S = 3.0      # per grid signature: the ten the steps left untimed must not eat it
GRID_CAP_S = 130.0       # the grid's share when nothing ran over
RESERVE_S = 135.0        # kept for (m) and (f), their predicted seconds and a margin
TILES_S, MOSAIC_S = 45.0, 25.0   # limits of (t)'s two runs after the grid
# seconds per part: (--tiny on CPU, GPU); (t)'s three runs have their own limits
LIMITS = {"s": (600, 250), "t": (250, GRID_CAP_S + 15 + TILES_S + MOSAIC_S), "f": (400, 100),
          "m": (300, 95)}
PREDICTED = {"s": 225, "t": 175, "f": 85, "m": 45}   # seconds on an H200, README's table


def key_of(name: str) -> str:
    return next(k for k, n, _ in BERT_VARIANTS if n == name)


def tilings() -> list[str]:
    """--tiles for the alternates: the table's tiles and flash_tiles.CANDIDATES
    for a head of 64, the options flash_tuning times in this order."""
    from kjax.model.flash.tiles import CANDIDATES, TRITON_TILES, format_tiles
    return [f"table={format_tiles(TRITON_TILES[64])}"] + [
        f"c{i}={format_tiles(t)}" for i, t in enumerate(CANDIDATES[64], 1)]


def verdict(ms: dict[str, list[float]], flags: dict[str, bool]) -> tuple[str, dict]:
    """The verdict line and its record's figures. `ms`: per row key, its step
    ms per alternating round (the same rounds for every key); `flags`:
    GPU_FLASH_FASTER as the run had it. A flag turns True only when the fused
    step beat the explicit one in every round: a tie or a mixed result keeps
    the explicit path."""
    new, said, figures = dict(flags), [], {}
    for flag, fused, explicit in QUESTIONS:
        what = "with dropout" if flag == "dropout" else "with pairs B (and dropout)"
        if not ms.get(fused) or not ms.get(explicit):
            said.append(f"{what}: not decided (a row is missing)")
            continue
        a, b = statistics.median(ms[fused]), statistics.median(ms[explicit])
        wins = sum(x < y for x, y in zip(ms[fused], ms[explicit]))
        n = min(len(ms[fused]), len(ms[explicit]))
        new[flag] = wins == n
        figures.update({f"{flag}_fused_ms": round(a, 2), f"{flag}_explicit_ms": round(b, 2),
                        f"{flag}_fused_wins": wins, f"{flag}_rounds": n})
        said.append(f"{what}: fused {a:.1f} ms vs explicit {b:.1f} ms ({a / b:.2f}×, "
                    f"faster in {wins}/{n} rounds)")
    change = "no change" if new == flags else "change kjax/model/attention_core.py"
    if new.get("shake") and not new.get("dropout"):
        change += "; a call with both still takes the explicit path (both must be True)"
    line = (f"verdict: GPU_FLASH_FASTER = {json.dumps(new)} (now {json.dumps(flags)}; "
            f"{change}): " + "; ".join(said))
    return line, {**figures, **{f"flag_{k}": v for k, v in new.items()}}


def steps(ctx) -> None:
    """(s): the six step rows, taking turns, their ratios and the verdict."""
    bert, tiny = ctx.bert, ctx.tiny
    chosen = [(k, n, o) for k, n, o in BERT_VARIANTS if k in dict(STEP_ROWS)]
    chosen.sort(key=lambda v: [k for k, _ in STEP_ROWS].index(v[0]))
    ctx.part("s", f"BERT-base seq {bert['seq']} batch {bert['batch']} {bert['dtype']}: the "
             f"step rows ({bert['rounds']} × {bert['steps']} steps each, then {ROUNDS} rounds "
             f"taking turns; flash tiles timed on the card, ≤ {STEP_TUNING_S:.0f} s per "
             "signature)")
    flags, rounds = {}, []

    def other(r):
        if "flash_faster" in r:
            flags.update(r["flash_faster"])
            say(f"GPU_FLASH_FASTER as run: {json.dumps(flags)}")
        elif "round" in r:
            rounds.append(r["ms"])
            say(f"round {r['round']}: " + ", ".join(f"{key_of(n)} {v:.2f} ms"
                                                    for n, v in r["ms"].items()))
    spec = {**bert, "variants": [(n, o) for _, n, o in chosen], "alternate": ROUNDS,
            "tuning_budget_s": STEP_TUNING_S}
    rows, table = child("kjax", spec, ctx.limit["s"], ctx.log("s"), [n for _, n, _ in chosen],
                        on_other=other)
    ms = {key_of(r["name"]): [r["ms"]] for r in rows}
    for key in ms:   # taking turns beats timing one after another: load drift hits all alike
        turns = [r[n] for r in rounds for n in r if key_of(n) == key]
        ms[key] = turns or ms[key]
    lines = ["| row | what it answers | ms (median) | ÷ baseline | tiles |",
             "|---|---|---|---|---|"]
    base = statistics.median(ms["cudnn-hidden-dropout"]) if "cudnn-hidden-dropout" in ms \
        else None
    tiles = {key_of(r["name"]): r.get("tiles") for r in rows}
    for key, why in STEP_ROWS:
        if key not in ms:
            lines.append(f"| {key} | {why} | not measured | | |")
            continue
        m = statistics.median(ms[key])
        ratio = f"{m / base:.2f}×" if base else "–"
        tile = "; ".join(f"{s}: {t}" for s, t in (tiles[key] or {}).items()) or "–"
        lines.append(f"| {key} | {why} | {m:.2f} | {ratio} | {tile} |")
    line, figures = verdict(ms, flags or {"dropout": False, "shake": False})
    if tiny:
        line += " (--tiny on CPU: a check of the script, no verdict)"
    for text in lines + [line]:
        say(text)
    ctx.body(table + f"\n\nms: median of {len(rounds)} rounds taking turns"
             + ("" if rounds else " (none ran: each variant's own timing)") + "\n\n"
             + "\n".join(lines) + "\n\n" + line)
    shape = {"seq": bert["seq"], "batch": bert["batch"], "dtype": bert["dtype"]}
    notes = (f"suite.py --settle: {bert['rounds']} × {bert['steps']} steps per variant, "
             f"then {len(rounds)} rounds taking turns (ms_turns)")
    # the same variants as part (b): their records feed the same rows of docs/PERFORMANCE.md
    found = [{"row": r["name"], "part": "b", "overrides": r.get("overrides", []),
              "figures": {**{k: r[k] for k in ("ms", "tokens_per_s", "mfu", "compile_s",
                                               "first_step_s", "peak_gib", "cache")
                             if r.get(k) is not None},
                          "ms_turns": round(statistics.median(ms[key_of(r["name"])]), 2),
                          **({"vs_baseline": round(statistics.median(ms[key_of(r["name"])])
                                                   / base, 3)} if base else {})},
              **({"tiles": r["tiles"]} if r.get("tiles") else {})} for r in rows]
    if figures:
        found.append({"row": "verdict: GPU_FLASH_FASTER", "part": "s", "figures": figures,
                      "flags_as_run": flags})
    records.save(ctx.args, "gpu_suite", found, load_before=ctx.load_before, notes=notes,
                 preset=bert["preset"], shape=shape)


GRID_ROW = re.compile(r"^\| (\S[^|]*?) \| ([\d.]+) \| (\w+) \| (\d+) \| (\d+) \| ([\d.]+) \|")


def grid_summary(lines: list[str]) -> list[str]:
    """Per seq, the ratios the flags are about, one layer at a time."""
    got = {}
    for line in lines:
        m = GRID_ROW.match(line)
        if m:
            impl, rate, layout, seq = m[1], float(m[2]), m[3], int(m[4])
            got[impl, rate, layout, seq] = float(m[6])
    out = []
    for seq in sorted({k[3] for k in got}):
        parts = []
        for label, a, b in (("flash ÷ cuDNN", ("flash", 0.0, "none"), ("cudnn", 0.0, "none")),
                            ("flash ÷ xla, dropout", ("flash", 0.1, "none"), ("xla", 0.1, "none")),
                            ("flash ÷ xla, pairs B", ("flash", 0.0, "pos"), ("xla", 0.0, "pos")),
                            ("flash ÷ xla, pairs B + dropout", ("flash", 0.1, "pos"),
                             ("xla", 0.1, "pos"))):
            x, y = got.get((*a, seq)), got.get((*b, seq))
            parts.append(f"{label} {x / y:.2f}×" if x and y else f"{label} –")
        out.append(f"- seq {seq}: " + ", ".join(parts))
    return out


def attention(ctx) -> None:
    """(t): the grid, the flash tiles' alternates, Mosaic beside cuDNN."""
    tiny = ctx.tiny
    seqs, tokens, steps_ = ("64", "128", "1") if tiny else ("512,2048,8192", "16384", "5")
    ctx.part("t", f"one attention layer, fwd + bwd, {tokens} tokens per call "
             "(kernels/attention.py --grid; flash tiles timed on the card, "
             f"≤ {GRID_TUNING_S:.0f} s per signature)")

    def spare(after=0.0):   # seconds this part may still take, (m) and (f) kept
        return float(LIMITS["t"][0]) if tiny else \
            DEADLINE[0] - time.perf_counter() - RESERVE_S - after
    cap = min(GRID_CAP_S, spare(TILES_S))
    common = [sys.executable, os.path.join(BENCHMARKS, "kernels", "attention.py"), "--grid",
              "--tokens", tokens, "--steps", steps_, *ctx.keep_records]
    runs = [("grid", ["--grid-seqs", seqs, "--impls", "cudnn,flash,xla", "--cap", f"{cap:.0f}",
                      "--tuning-budget", str(GRID_TUNING_S)],
             cap + 15 if cap >= 20 else 0)]   # + its start and the row the cap ends in
    alt = ctx.args.tiles if ctx.args.tiles is not None else tilings()
    if alt:
        labels = ",".join(t.partition("=")[0] for t in alt)
        runs.append(("tiles", ["--grid-seqs", "64" if tiny else "2048,8192", "--impls",
                               f"flash,{labels}", "--rates", "0.1", "--b", "none",
                               "--tuning-budget", str(GRID_TUNING_S)]
                     + [f"--tiles={t}" for t in alt], TILES_S))
    runs.append(("mosaic", ["--grid-seqs", "128" if tiny else seqs, "--impls", "cudnn,mosaic",
                            "--rates", "0", "--b", "none"], MOSAIC_S))
    text = []
    for name, extra, limit in runs:
        limit = min(limit, spare())
        if limit < 20:
            text.append(f"({name}) not run: the time left is kept for (m) and (f)")
            say(text[-1])
            continue
        say(f"({name})")
        lines, status = run(common + extra, limit, ctx.log(f"t_{name}"))
        text.append(f"({name})\n\n" + "\n".join(lines)
                    + ("" if status == "ok" else f"\n\nattention.py: {status}"))
        if status != "ok":
            say(f"attention.py ({name}): {status}")
        if name == "grid":
            summary = grid_summary(lines)
            text.append("per seq:\n\n" + "\n".join(summary))
            say("\n".join(summary))
    ctx.body("\n\n".join(text))


def plan(tiny: bool) -> str:
    """What the call runs and its seconds, said before it starts."""
    i = 0 if tiny else 1
    return ("settle: (s) six step rows + verdict, (t) attention grid + tiles + Mosaic, "
            "(f) SIGKILL leg, (m) modern_base start → step 1; limits "
            + ", ".join(f"{k} {v[i]} s" for k, v in LIMITS.items())
            + ("" if tiny else "; predicted " + ", ".join(f"{k} {v} s"
                                                          for k, v in PREDICTED.items())))
