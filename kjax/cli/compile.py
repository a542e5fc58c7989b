"""`kjax compile`: will this config fit that pod? Ahead-of-time compilation of
the train and eval steps for a TPU slice, from any machine (no TPU needed).

    pip install 'kjax[tpu]'        # libtpu: describes and compiles for TPUs
    kjax compile --config tpu_configs/v3_32.py --topology v3-32 [--fit-batch]
    kjax compile --config tpu_configs/bert_base.py --topology v3-8 \\
        --config.model.remat_policy=full --config.train.batch_size=256

--topology: an accelerator type (v2-8, v3-8, v3-32, v3-128, v4-8, ...), a
chip grid (v3:4x4) or `local` (this host's devices). Multi-host slices
compile as their hosts would: the mesh, the batch layout and every check
see the slice's process count. Prints per device: arguments, temporaries
and peak against the chip's HBM, the compile time, a roofline step time
and MFU bound (kjax/pretrain/aot.py); `--fit-batch` also searches the
largest batch that compiles (a few more compiles). A step that does not
fit is a one-line error naming what to change. How to read it: docs/TPU.md.
"""
from __future__ import annotations

import json
import sys

from kjax.cli.common import format_table


def register(verbs, add_config) -> None:
    p = verbs.add_parser("compile", help="compile the steps for a TPU slice you do not have: "
                         "memory per device, whether it fits, largest batch, roofline")
    add_config(p)
    p.add_argument("--topology", required=True,
                   help="v2-8, v3-8, v3-32, v4-8, ... (accelerator type), v3:4x4 (chip grid) "
                   "or local (this host's devices)")
    p.add_argument("--fit-batch", action="store_true",
                   help="also find the largest global batch that compiles, to within "
                   "1/32 (≤ 8 more compiles; those XLA refuses take seconds)")
    p.add_argument("--phase", default=None, metavar="NAME",
                   help="compile that phase of a config that lists its phases")
    p.add_argument("--no-eval", action="store_true", help="compile the train step only")
    p.add_argument("--no-roofline", action="store_true",
                   help="skip the roofline (saves two small compiles for a scanned encoder)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(handler=run_compile)


def _gib(n) -> str:
    return "—" if n is None else f"{n / (1 << 30):.2f}"


def format_report(config_name: str, report: dict) -> str:
    mesh = " × ".join(f"{k}={v}" for k, v in report["mesh"].items())
    shards = report["mesh"]["data"] * report["mesh"]["fsdp"]
    k = report.get("microbatches", 1)
    split = "" if k == 1 else (f" in {k} microbatches of {report['batch_size'] // k} "
                               f"({report['batch_size'] // k // shards} per batch shard; the "
                               f"memory is one microbatch's plus the summed gradients)")
    lines = [f"{config_name} on {report['topology']}, mesh {mesh}, batch "
             f"{report['batch_size']} ({report['batch_size'] // shards} per batch shard)" + split]
    rows = []
    for name, s in report["steps"].items():
        rows.append([name, f"{s.seconds:.0f}", _gib(s.arguments if s.fits else None),
                     _gib(s.temporaries if s.fits else None), _gib(s.peak if s.fits else None),
                     _gib(report["hbm_bytes"]), "yes" if s.fits else f"NO: {s.error}"])
    lines.append(format_table(["step", "compile s", "arguments GiB", "temporaries GiB",
                               "peak GiB", "HBM GiB", "fits"], rows))
    if report.get("stages"):
        lines.append(stages_table(report))
    if "fit" in report:
        f = report["fit"]
        beyond = (f"; {f['smallest_failing']} does not" if f["smallest_failing"]
                  else "; the search stopped before a batch that does not fit")
        lines.append(f"largest batch that compiles in one pass: {f['largest']} "
                     f"({f['largest'] // shards} per batch shard){beyond}")
        if f.get("microbatches") is None:
            lines.append(f"no train.microbatches splits batch {report['batch_size']} into "
                         f"microbatches of at most {f['largest']} that the mesh takes")
        else:
            lines.append(f"batch {report['batch_size']} with accumulation: "
                         f"--config.train.microbatches={f['microbatches']} (microbatches of "
                         f"{report['batch_size'] // f['microbatches']}) "
                         + ("fits" if f.get("microbatches_fit") else "does not fit either "
                            "(the summed gradients' buffer): try one more microbatch"))
    train = report["steps"].get("train")
    if train is not None and train.fits and train.collectives:
        lines.append(communication_line(train.collectives, report.get("layout", {})))
    if r := report.get("roofline"):
        wire = "" if not r.get("ici_bytes_per_s") else (
            f"; {r['wire_bytes'] / 1e9:.3f} GB on the links / "
            f"{r['ici_bytes_per_s'] / 1e9:.0f} GB/s = {r['communication_s'] * 1e3:.1f} ms")
        lines.append(
            f"roofline per device: {r['model_flops'] / 1e12:.3f} TFLOP (kjax's count) / "
            f"{r['peak_flops'] / 1e12:g} TFLOP/s = {r['compute_s'] * 1e3:.1f} ms; "
            f"{r['xla_bytes'] / 1e9:.2f} GB HBM traffic / {r['hbm_bytes_per_s'] / 1e9:g} GB/s "
            f"= {r['memory_s'] * 1e3:.1f} ms{wire} → step ≥ {r['step_s'] * 1e3:.1f} ms "
            f"({r['bound']}-bound), MFU ≤ {100 * r['mfu']:.0f} %, ≤ "
            f"{r['tokens_per_s']:,.0f} tokens/s; XLA's FLOPs with every layer and microbatch "
            f"counted: {r['xla_flops'] / 1e12:.3f} T")
    return "\n".join(lines)


def communication_line(c: dict, layout: dict) -> str:
    """The train step's collectives per device (kjax/pretrain/collectives.py)."""
    mib = lambda n: f"{n / (1 << 20):,.1f} MiB"  # noqa: E731
    kinds = ", ".join(f"{k} {mib(c[k])}" for k in ("all-reduce", "all-gather",
                                                    "reduce-scatter", "all-to-all",
                                                    "collective-permute") if c.get(k))
    text = (f"communication per device a step: {kinds or 'none'}"
            + (f" ({mib(c['in_loops'])} of it inside loops)" if c.get("in_loops") else ""))
    if layout.get("update"):
        text += f"; optimizer update {layout['update']}"
    if layout.get("fsdp_gather"):
        text += f"; FSDP parameters gathered {layout['fsdp_gather']}"
    return text


def stages_table(report: dict) -> str:
    """The train step of each batch-ramp stage (train.batch_ramp), the last
    stage being the train step above."""
    rows = []
    for st in report["stages"]:
        s, (first, end) = st["compile"], st["steps"]
        rows.append([st["stage"], f"{first}–{end}", st["batch_size"], st["microbatches"],
                     f"{s.seconds:.0f}", _gib(s.peak if s.fits else None),
                     "yes" if s.fits else f"NO: {s.error}"])
    last = report["stages"][-1]["steps"][1] + 1
    return (f"batch-ramp stages (train.batch_ramp; from step {last} on: batch "
            f"{report['batch_size']}, the train step above):\n" +
            format_table(["stage", "steps", "batch", "microbatches", "compile s", "peak GiB",
                          "fits"], rows))


def to_json(report: dict) -> dict:
    out = dict(report)
    out["steps"] = {k: vars(s) for k, s in report["steps"].items()}
    if report.get("stages"):
        out["stages"] = [{**st, "compile": vars(st["compile"])} for st in report["stages"]]
    return out


def run_compile(args, config) -> int:
    from kjax.pretrain.memory_fit import advice, check, not_fitting_error
    # (--phase: the loader took that phase already, kjax/pretrain/run_load.py)
    steps = ("train",) if args.no_eval else ("train", "eval")
    quiet = lambda *a, **k: None  # noqa: E731
    progress = quiet if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    report = check(config, args.topology, steps, fit=args.fit_batch,
                   cost=not args.no_roofline, progress=progress)
    print(json.dumps(to_json(report), indent=2, default=str) if args.json
          else format_report(args.config, report), flush=True)
    for s in [*report["steps"].values(), *(st["compile"] for st in report.get("stages", ()))]:
        if not s.fits:
            fit = report.get("fit", {})
            raise not_fitting_error(args.config, report["topology"], s,
                                    advice(config, s, fit.get("largest"), fit.get("microbatches")))
    return 0
