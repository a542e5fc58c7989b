"""docs/PERFORMANCE.md's figures, written from the records (`make docs`).

    python benchmarks/report.py               # rewrite the generated blocks of PERFORMANCE.md
    python benchmarks/report.py --check       # write nothing; exit 1 if a block differs
    python benchmarks/report.py --merge DIR   # add the records of DIR/*.jsonl (a run on
                                              # another machine) to benchmarks/results

Two blocks, each between fixed marks that name this command: the current
figures (one table per platform: the CPU and GPU rows from
benchmarks/results, the TPU memory from .ci/compile_record.json) with the
command behind each row, and the open predictions with the command that
checks each. The output is a function of the files alone (no clock, no
git), so on a clean checkout it changes nothing.

Which record is "current" for a row: the newest measurement that matches the
row's benchmark, platform, preset, shape and name; on a CPU a run whose
1-minute load average exceeded the machine's cores counts only when no
quieter run exists, and its row says so.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import records  # noqa: E402
from harness.presets import ROOT  # noqa: E402

DOC = os.path.join(ROOT, "docs", "PERFORMANCE.md")
COMMAND = "python benchmarks/report.py"
CURRENT, OPEN = "current figures", "open predictions"


@dataclasses.dataclass(frozen=True)
class Row:
    """A row of a platform table: which records it shows and how to make a new one."""
    title: str
    benchmark: str
    platform: str
    preset: str
    shape: dict
    side: str                  # the kjax record's row name
    command: str
    peer: str | None = None    # part of the peer record's row name (same run)
    peer_label: str | None = None
    part: str | None = None    # the GPU suite's part
    metric: str = "ms"


CPU_FP32 = {"dtype": "float32"}
CPU_ROWS = [
    Row("BERT-base, seq 128 × batch 8, fp32", "peer", "cpu", "bert_base",
        {"seq": 128, "batch": 8, **CPU_FP32}, "kjax",
        "python benchmarks/step/peer.py --shape bert_base --batch 8 --rounds 6 --steps 2",
        "HF FlaxBertForPreTraining", "HF Flax BERT (transformers 4.57)"),
    Row("UKNOW-small, seq 128 × batch 32, fp32", "peer", "cpu", "uknow_small",
        {"seq": 128, "batch": 32, **CPU_FP32}, "kjax", "python benchmarks/step/peer.py",
        "HF FlaxBertForPreTraining", "HF Flax BERT (transformers 4.57)"),
    Row("modern_small, seq 512 × batch 8, fp32", "modern", "cpu", "modern_small",
        {"seq": 512, "batch": 8}, "kjax modern", "python benchmarks/step/modern.py peer",
        "ModernBertForMaskedLM", "PyTorch ModernBERT (transformers 5)"),
]
GPU_BERT = {"seq": 512, "batch": 32, "dtype": "bfloat16"}
MODERN = {"seq": 1024, "batch": 16, "dtype": "bfloat16"}
SUITE = "python benchmarks/gpu/suite.py"
GPU_ROWS = [
    Row("BERT-base preset as a GPU runs it (unrolled layers, rbg bits, attention dropout "
        "inside the flash kernel), 512 × 32, bf16", "peer", "gpu", "bert_base", GPU_BERT,
        "kjax preset, attention dropout in the flash kernel",
        f"{SUITE} --parts a --peer-venv runs/peer_venv", "HF FlaxBertForPreTraining",
        "HF Flax BERT (transformers 4.57)"),
    Row("the same on the explicit attention path", "peer", "gpu", "bert_base", GPU_BERT,
        "kjax preset, explicit attention", f"{SUITE} --parts a --peer-venv runs/peer_venv",
        "HF FlaxBertForPreTraining", "HF Flax BERT (transformers 4.57)"),
    Row("BERT-base, attention dropout 0 (cuDNN attention), hidden dropout 0.1", "gpu_suite",
        "gpu", "bert_base", GPU_BERT,
        "attention dropout 0, hidden dropout 0.1, auto (cuDNN), unroll + rbg",
        f"{SUITE} --parts b --b-variants cudnn-hidden-dropout", part="b"),
    Row("BERT-base, no dropout (cuDNN attention)", "gpu_suite", "gpu", "bert_base", GPU_BERT,
        "no dropout at all, auto (cuDNN), unroll + rbg",
        f"{SUITE} --parts b --b-variants no-dropout", part="b"),
    Row("modern_base as a GPU runs it (local layers on the flash kernel, global ones on "
        "cuDNN), 1024 × 16, bf16, no remat", "gpu_suite", "gpu", "modern_base", MODERN,
        "auto (GPU: local layers on the flash kernel, global ones on cuDNN)",
        f"{SUITE} --parts c", "eager", "PyTorch ModernBERT, eager (transformers 5)", part="c"),
    Row("the same, every layer on the flash kernel", "gpu_suite", "gpu", "modern_base", MODERN,
        "flash", f"{SUITE} --parts c", "eager", "PyTorch ModernBERT, eager (transformers 5)",
        part="c"),
    Row("the same, every layer on cuDNN", "gpu_suite", "gpu", "modern_base", MODERN,
        "cuDNN for every layer (dot_product)", f"{SUITE} --parts c", "eager",
        "PyTorch ModernBERT, eager (transformers 5)", part="c"),
]
# the order of the predictions: the step first, then one layer, the start, the rest
ORDER = ["gpu_suite", "peer", "attention", "modern_compile", "train_step", "loader", "checkpoint"]
# the TPU table: the slice presets and the large models alone on a v3-8
TPU_PRESETS = ("v2_8", "v3_8", "v3_32", "v4_8", "bert_base", "bert_large", "uknowbert_b",
               "modern_base")


def loaded(rec: dict) -> float | None:
    """The run's highest 1-minute load average per core, None if not recorded."""
    hw = rec.get("hardware", {})
    load = hw.get("load_average") or {}
    values = [v[0] for k, v in load.items() if k in ("before", "after", "during") and v]
    return max(values) / hw["cpu_cores"] if values and hw.get("cpu_cores") else None


def matches(rec: dict, row: Row, name: str) -> bool:
    shape = rec.get("shape") or {}
    return (rec["benchmark"] == row.benchmark and rec["kind"] == "measurement"
            and rec.get("hardware", {}).get("platform") == row.platform
            and rec.get("preset") == row.preset and rec["row"] == name
            and all(shape.get(k) == v for k, v in row.shape.items())
            and (row.part is None or rec.get("part") == row.part)
            and row.metric in rec["figures"])


def pick(recs: list[dict], row: Row) -> tuple[dict | None, dict | None]:
    """(the current record of the row's kjax side, its peer's record of the same run)."""
    mine = [r for r in recs if matches(r, row, row.side)]
    quiet = [r for r in mine if (loaded(r) or 0) <= 1]
    chosen = (quiet or mine)[-1] if mine else None   # records are in date order
    if chosen is None or row.peer is None:
        return chosen, None
    peers = [r for r in recs if r.get("run") == chosen.get("run") and r["benchmark"] ==
             row.benchmark and row.peer in r["row"] and row.metric in r["figures"]]
    return chosen, (peers[-1] if peers else None)


def machine(rec: dict) -> str:
    hw = rec["hardware"]
    if hw.get("platform") == "cpu":
        load = loaded(rec)
        where = f"{hw['cpu_cores']}-core CPU ({hw['machine']})"
        return where + (", load not recorded" if load is None else
                        f", load {load * hw['cpu_cores']:.1f}"
                        + (" (**busy**: above its cores)" if load > 1 else ""))
    return f"{hw.get('devices', 1)}× {hw['device']}"


def versions(rec: dict, peer: dict | None) -> str:
    v = rec.get("versions", {})
    mine = ", ".join(f"{k} {v[k]}" for k in ("jax", "flax") if k in v) or "not recorded"
    theirs = [f"{k[5:]} {value}" for k, value in sorted((peer or rec).get("versions", {}).items())
              if k.startswith("peer ") and k != "peer jax"]
    return mine + (f"; peer: {', '.join(theirs)}" if theirs and peer else "")


def commit(rec: dict) -> str:
    c = rec.get("commit")
    return "not recorded" if not c else f"{c}*" if rec.get("dirty") else c


def ms(fig: dict) -> str:
    if "ms" not in fig:
        return "—"
    return f"{fig['ms']:,.0f}" if fig["ms"] >= 1000 else f"{fig['ms']:.1f}"


def table(recs: list[dict], rows: list[Row]) -> list[str]:
    lines = ["| row | kjax ms/step | MFU | peer | peer ms/step | kjax ÷ peer, tokens/s "
             "| machine | versions | commit | date |", "|---" * 10 + "|"]
    for n, row in enumerate(rows, 1):
        rec, peer = pick(recs, row)
        if rec is None:
            lines.append(f"| {n}. {row.title} | not measured yet | | {row.peer_label or '—'} "
                         "| | | | | | |")
            continue
        f = rec["figures"]
        mfu = f"{f['mfu']:.1%}" if "mfu" in f else "—"
        ratio = "—"
        if peer is not None and "ratio_vs_peer" in f:
            ratio = f"**{f['ratio_vs_peer']:.2f}×**" + (
                f" ({f['ratio_low']:.2f}–{f['ratio_high']:.2f})" if "ratio_low" in f else "")
        elif peer is not None:
            ratio = f"**{peer['figures']['ms'] / f['ms']:.2f}×**"
        lines.append(f"| {n}. {row.title} | {ms(f)} | {mfu} | {row.peer_label or '—'} | "
                     f"{ms(peer['figures']) if peer else '—'} | {ratio} | {machine(rec)} | "
                     f"{versions(rec, peer)} | {commit(rec)} | {rec['date']} |")
    return lines


def tpu_table() -> list[str]:
    """docs/TPU.md's table (compile_checks/figures.py), for the slice presets and
    the large models only."""
    from compile_checks import cases, figures
    from compile_checks.record import RECORD, Record
    chosen = [c for c in cases.TPU_CASES if c[0] in TPU_PRESETS and not c[2]]
    try:
        entries = Record(RECORD).entries
        dates = sorted({entries[cases.tpu_case_id(c)]["date"] for c in chosen
                        if cases.tpu_case_id(c) in entries})
        lines = figures.tpu_table(entries, chosen)
    except (ValueError, KeyError, OSError) as e:
        return [f"(not written: {e}; `make tpu-check RECORD=write` records the cases)"]
    return lines + ["", f"Compiled without a TPU (`make tpu-check`), recorded "
                    f"{', '.join(dates)} in .ci/compile_record.json for the programs of the "
                    "code that recorded them; every case: docs/TPU.md §15."]


def current(recs: list[dict]) -> list[str]:
    out = []
    for title, rows in (("CPU: kjax against HF Flax BERT and PyTorch ModernBERT", CPU_ROWS),
                        ("GPU: kjax against HF Flax BERT and PyTorch ModernBERT", GPU_ROWS)):
        out += [f"### {title}", "", *table(recs, rows), ""]
    out += ["\\* measured on a working tree with changes not yet committed on top of that "
            "commit. A ratio is kjax's tokens/s over the peer's, the median of rounds that "
            "alternate the two in one process group (the per-round range in brackets).", "",
            "### TPU: memory per device, compiled (no TPU has run these)", "", *tpu_table(),
            "", "### How to reproduce each row", ""]
    for title, rows in (("CPU", CPU_ROWS), ("GPU", GPU_ROWS)):
        for n, row in enumerate(rows, 1):
            out.append(f"- {title} {n}: `{row.command}`")
    return out


def _span(fig: dict, key: str, unit: str) -> str | None:
    lo, hi = fig.get(f"{key}_low"), fig.get(f"{key}_high")
    if lo is not None and hi is not None:
        return f"{lo:g}–{hi:g}{unit}"
    return f"{fig[key]:g}{unit}" if isinstance(fig.get(key), (int, float)) else None


def _short(x: float) -> str:
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.0f}k" if x >= 1e4 else f"{x:g}"


def predicted(fig: dict) -> str:
    parts = [p for p in (_span(fig, "ms", " ms"), _span(fig, "ms_saved", " ms less"),
                         _span(fig, "ratio", "×"), _span(fig, "seconds", " s"),
                         _span(fig, "ms_per_gb", " ms per GB")) if p]
    if "mfu_low" in fig:
        parts.append(f"{100 * fig['mfu_low']:g}–{100 * fig['mfu_high']:g} % MFU")
    if "from_ms" in fig:
        parts.append(f"from {fig['from_ms']:g} ms measured before")
    if "baseline_ms" in fig:
        parts.append(f"against a {fig['baseline_ms']:g} ms baseline")
    for key, value in fig.items():   # a projection's figures at several MFUs
        if key.endswith("_at_30_40_50_mfu"):
            parts.append(f"{key[:-16].replace('_', ' ')} "
                         f"{' / '.join(_short(x) for x in value)} at 30 / 40 / 50 % MFU")
    if not parts:   # say every figure rather than nothing
        parts = [f"{k.replace('_', ' ')} {v:g}" for k, v in fig.items()
                 if isinstance(v, (int, float))]
    return ", ".join(parts)


def predictions(recs: list[dict]) -> list[str]:
    out = []
    for kind, title in (("prediction", "Predictions for today's code, not yet measured"),
                        ("projection", "Projections for hardware nobody here has run")):
        chosen = sorted((r for r in recs if r["kind"] == kind
                         and r.get("status", "open") == "open"),
                        key=lambda r: ORDER.index(r["benchmark"]) if r["benchmark"] in ORDER
                        else len(ORDER))
        out += [f"**{title}** ({len(chosen)}):", ""]
        for r in chosen:
            shape = r.get("shape") or {}
            where = " × ".join(str(shape[k]) for k in ("seq", "batch") if k in shape)
            what = ", ".join(x for x in (r.get("preset"), where,
                                         r.get("hardware", {}).get("device")) if x)
            out.append(f"- {r['row']}{f' ({what})' if what else ''}: "
                       f"{predicted(r['figures']) or 'see the record'}; written at "
                       f"{commit(r)} on {r['date']}. Check: `{r.get('check', 'not given')}`")
        out.append("")
    return out[:-1]


def with_block(text: str, name: str, lines: list[str]) -> str:
    begin = (f"<!-- {name}: written by `{COMMAND}` (make docs) from benchmarks/results "
             f"and .ci/compile_record.json; edit those, not this -->")
    from compile_checks.figures import MissingFigures, between_marks
    try:
        return between_marks(text, begin, f"<!-- end of {name} -->", lines, DOC)
    except MissingFigures as e:
        raise SystemExit(f"report: {e}") from None


def render(text: str, recs: list[dict]) -> str:
    """PERFORMANCE.md's `text` with both generated blocks written from `recs`."""
    return with_block(with_block(text, CURRENT, current(recs)), OPEN, predictions(recs))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if the document differs")
    ap.add_argument("--merge", metavar="DIR", help="add DIR/*.jsonl to benchmarks/results")
    ap.add_argument("--results", default=records.RESULTS)
    args = ap.parse_args(argv)
    if args.merge:
        for name in sorted(os.listdir(args.merge)):
            if name.endswith(".jsonl"):
                new = records.read_file(os.path.join(args.merge, name))
                for r in new:
                    records.check(r)
                records.add(os.path.join(args.results, name), new)
                print(f"report: {len(new)} record(s) of {name} merged")
        return 0
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    new = render(text, records.read(args.results))
    if args.check:
        if new != text:
            print(f"report: {os.path.relpath(DOC)} differs from the records: run `make docs` "
                  "and commit it", file=sys.stderr)
        return int(new != text)
    if new != text:
        with open(DOC, "w", encoding="utf-8") as f:
            f.write(new)
        print(f"report: wrote {os.path.relpath(DOC)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
