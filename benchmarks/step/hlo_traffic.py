"""What a change does to the step a GPU would run, without a GPU: the train
step compiled for an H100 described to this CPU host (.ci/h100_sxm.txtpb, as
`make gpu-check` does) and counted in its optimized HLO: kernels (fusions and
custom calls), transposes, the bytes their operands and results move (an
upper bound on the step's memory traffic; compile_checks/hlo.py
kernel_traffic) and XLA's temporaries. Not timings: docs/PERFORMANCE.md
turns the bytes into a predicted ms against the card's bandwidth. Only the
entry computation is counted: the GPU's default unrolls the layers; a
scanned stack (CPU/TPU default) keeps its layers in a loop body not counted.

    build/gpu-venv/bin/python benchmarks/step/hlo_traffic.py             # bert_base 512×32
    build/gpu-venv/bin/python benchmarks/step/hlo_traffic.py \\
        --variant "no dropout=model.dropout_rate=0.0,model.attention_dropout_rate=0.0" \\
        --variant preset= --hlo runs/hlo
    python benchmarks/step/hlo_traffic.py --target cpu --config demo --seq 64 --batch 8

Each --variant is a label, '=', comma-separated config overrides on top of
the preset (default: the preset alone). Needs jax's CUDA plugin for the
H100 target (`make gpu-check` builds build/gpu-venv); `--target cpu`
compiles for this host instead. `--hlo DIR` keeps each optimized HLO. One
record per variant (benchmarks/results/hlo_traffic.jsonl). Nothing runs on
a device, so jax runs on its CPU backend whatever JAX_PLATFORMS says.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

# Before anything imports jax, which reads JAX_PLATFORMS once: only compiling
# happens here, and any other value ("", "cuda") has jax start the CUDA plugin
# as a backend, which on a host without a GPU leaves no topology to compile for.
if os.environ.get("JAX_PLATFORMS", "cpu") != "cpu":
    print(f"hlo_traffic: JAX_PLATFORMS={os.environ['JAX_PLATFORMS']!r} replaced by 'cpu' "
          f"(the programs are compiled, not run)", file=sys.stderr)
os.environ["JAX_PLATFORMS"] = "cpu"

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import records  # noqa: E402


def devices(target: str):
    import jax
    return jax.devices("cpu")[:1] if target == "cpu" else harness.step.h100_devices()


def measure(config, devs, hlo_path: str | None) -> dict:
    from kjax.pretrain import aot
    from compile_checks.hlo import kernel_traffic
    start = time.perf_counter()
    compiled = aot.lower(config, devs).compile()
    seconds = time.perf_counter() - start
    text = compiled.as_text()
    if hlo_path:
        with open(hlo_path, "w", encoding="utf-8") as f:
            f.write(text)
    return {**kernel_traffic(text), "seconds": seconds,
            "temporaries": compiled.memory_analysis().temp_size_in_bytes}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="bert_base", help="a preset of tpu_configs/")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--target", default="h100", choices=("h100", "cpu"))
    ap.add_argument("--variant", action="append", metavar="LABEL=OVERRIDES")
    ap.add_argument("--hlo", help="folder for each variant's optimized HLO")
    records.add_arguments(ap)
    args = ap.parse_args()
    devs = devices(args.target)
    if args.hlo:
        os.makedirs(args.hlo, exist_ok=True)
    print(f"{args.config} seq {args.seq} batch {args.batch}, compiled for "
          f"{'an H100 (.ci/h100_sxm.txtpb)' if args.target == 'h100' else 'this CPU'}\n")
    print("| variant | compile s | kernels | transposes | traffic GB / step | temporaries GiB |")
    print("|---|---|---|---|---|---|")
    rows = []
    for i, spec in enumerate(args.variant or ["preset="]):
        label, _, rest = spec.partition("=")
        extra = [f"--config.{o}" for o in rest.split(",") if o]
        config = harness.preset_config(args.config, args.seq, args.batch, extra=extra)
        hlo = os.path.join(args.hlo, f"variant{i}.hlo.txt") if args.hlo else None
        r = measure(config, devs, hlo)
        print(f"| {label} | {r['seconds']:.1f} | {r['kernels']} | {r['transposes']} | "
              f"{r['bytes'] / 1e9:.2f} | {r['temporaries'] / 2**30:.2f} |", flush=True)
        rows.append({"row": label, "overrides": harness.overrides_of(extra), "figures": {
            "kernels": r["kernels"], "transposes": r["transposes"],
            "traffic_gb": round(r["bytes"] / 1e9, 2),
            "temporaries_gib": round(r["temporaries"] / 2**30, 2)}})
    records.save(args, "hlo_traffic", rows, preset=args.config,
                 shape={"seq": args.seq, "batch": args.batch},
                 target="H100 SXM, compiled deviceless" if args.target == "h100" else "this CPU")


if __name__ == "__main__":
    main()
