"""What SHAKE's B costs in memory (benchmarks/kernels/attention.py --tables
b,step): bytes of B per example, dense [seq, seq] float8 against the pairs
layout (int32 start, int32 end, float8 weight per position), from
kjax.shake.matrix's builders; and the peak bytes of the compiled train step
(fwd + bwd + AdamW) with B dense, pairs or none (XLA's buffer assignment)."""
from __future__ import annotations

import numpy as np

import harness

MIB = 1 << 20


def b_rows(seqs) -> tuple[list[str], list[dict]]:
    from ml_collections import ConfigDict
    from kjax.shake.matrix import build_shake_matrix, build_shake_pairs
    cfg = ConfigDict(dict(variant="random", p=0.08, boost_prem=1.0, group3=True,
                          tag_weights={}, position_variant="none"))
    lines = ["| seq | dense B bytes/example | pairs bytes/example | dense ÷ pairs |",
             "|---|---|---|---|"]
    rows = []
    for s in seqs:
        encoded = {"input_ids": np.zeros(s, np.int32), "word_ids": np.arange(s, dtype=np.int32)}
        dense = build_shake_matrix(encoded, s, cfg, np.random.default_rng(0)).nbytes
        pairs = sum(a.nbytes for a in build_shake_pairs(encoded, s, cfg,
                                                        np.random.default_rng(0)).values())
        lines.append(f"| {s} | {dense:,} ({dense / MIB:.2f} MiB) | {pairs:,} ({pairs / 1024:.1f} "
                     f"KiB) | {dense / pairs:.0f}× |")
        rows.append({"row": f"B per example, seq {s}", "shape": {"seq": s},
                     "figures": {"dense_bytes": dense, "pairs_bytes": pairs,
                                 "dense_vs_pairs": round(dense / pairs, 1)}})
    return lines, rows


def step_rows(shape, seqs, batch) -> tuple[list[str], list[dict], str]:
    lines = ["| seq | B | train step peak MiB | vs no shaking, MiB per example |",
             "|---|---|---|---|"]
    rows = []
    for s in seqs:
        base = None
        for layout in ("none", "dense", "pairs"):
            extra = [] if layout == "none" else [
                "--config.model.shake_factor=1.0", "--config.shake.variant=random",
                f"--config.shake.layout={layout}"]
            config = harness.preset_config(shape, s, batch, "bfloat16", extra)
            peak = harness.peak_bytes(harness.lower_step(config).compile())
            base = peak if base is None else base
            delta = None if layout == "none" else (peak - base) / batch / MIB
            lines.append(f"| {s} | {layout} | {peak / MIB:.0f} | "
                         f"{'—' if delta is None else f'{delta:+.2f}'} |")
            rows.append({"row": f"train step peak, B {layout}", "preset": shape,
                         "overrides": harness.overrides_of(extra),
                         "shape": {"seq": s, "batch": batch, "dtype": "bfloat16"},
                         "figures": {"peak_mib": round(peak / MIB, 1), **(
                             {} if delta is None else {"mib_per_example_vs_none":
                                                       round(delta, 2)})}})
    note = (f"{shape}, batch {batch}, bfloat16 compute, fp32 params + AdamW, the CPU path "
            f"(explicit attention: attention dropout is on in the preset); per-device peak from "
            f"XLA:CPU memory_analysis of the whole train step.")
    return lines, rows, note
