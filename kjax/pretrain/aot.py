"""Ahead-of-time compilation of the train and eval steps for devices that
are not here (`kjax compile`): a TPU slice described by libtpu
(kjax/parallel/topology.py) or this host's own devices.

Everything is abstract: the state is `abstract_state` (shapes and
shardings, nothing initialised), the batch is the loader's shapes
(kjax/batches/synthetic.py) split over the mesh's batch axes, and the mesh
is the one `make_mesh` builds on the pod, so `check_mesh` and the batch
layout run with the topology's process count (4 hosts for a v3-32). XLA
compiles as it would on the pod and refuses a program that does not fit
the chip's HBM (RESOURCE_EXHAUSTED): that verdict, not a projection, is
what `fits` reports.

Memory per device comes from the compiled program (`memory_analysis`):
arguments (the sharded state and batch), temporaries, outputs not aliased
to donated arguments. The roofline step time is the larger of kjax's FLOP
count (kjax.train.step.flops_per_example) over the chip's peak and the
compiled program's HBM bytes over its bandwidth. XLA's cost analysis counts
a while loop's body once, so a scanned encoder (model.scan_layers) is
costed as U₁ + (L − 1)·(U₂ − U₁), U₁ and U₂ the same step with 1 and 2
unrolled layers (two more compiles, each smaller than the step itself;
the layer's AdamW update is in U₂ − U₁ as it is in the unrolled step).
"""
from __future__ import annotations

import dataclasses
import math
import re
import time

import jax

from kjax.batches.synthetic import batch_shapes
from kjax.config import platform_defaults
from kjax.config.platform import lowering_for
from kjax.errors import KjaxError
from kjax.parallel.mesh import batch_sharding, make_mesh, mesh_shape, on_mesh

GIB = 1 << 30
OOM = re.compile(r"RESOURCE_EXHAUSTED|Ran out of memory|exceeds.*memory|out of memory", re.I)


@dataclasses.dataclass
class StepCompile:
    """One compiled step on one device (bytes per device)."""
    step: str                 # train | eval
    batch_size: int           # global
    seconds: float
    fits: bool
    arguments: int = 0
    outputs: int = 0
    aliased: int = 0
    temporaries: int = 0
    peak: int = 0
    flops: float = 0.0        # XLA's cost analysis (a loop body counted once)
    bytes_accessed: float = 0.0
    error: str = ""           # XLA's verdict when it does not fit
    same_as: str = ""         # a cached compile of the same program (compile_step's cache)


def with_overrides(config, **keys):
    """A copy of `config` with dotted keys changed ({"train.batch_size": 64})."""
    c = config.copy_and_resolve_references()
    for dotted, value in keys.items():
        *sections, leaf = dotted.split(".")
        node = c
        for section in sections:
            node = node[section]
        node[leaf] = value
    return c


def lower(config, devices, step: str = "train"):
    """The step for `config` on `devices`, traced and lowered against
    abstract state and batch (nothing allocated, nothing run)."""
    return trace(config, devices, step, lower=True)


def trace(config, devices, step: str = "train", lower: bool = False):
    """The step traced (its jaxpr: `.jaxpr`) against abstract state and batch;
    `lower`: lowered too (what `lower` returns)."""
    from kjax.train.state import abstract_state, make_model, make_optimizer
    from kjax.train.step import make_eval_step, make_train_step
    config = config.copy_and_resolve_references()
    platform_defaults.resolve(config, devices[0].platform)   # the target's, not this host's
    mesh = make_mesh(config, devices)
    tx = make_optimizer(config.train)
    train_model = make_model(config, deterministic=False)
    state, shardings = abstract_state(config, mesh, train_model, tx)
    sharding = batch_sharding(mesh)
    batch = {k: jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
             for k, (shape, dtype) in batch_shapes(config, config.train.batch_size).items()}
    if step == "train":
        fn, args = make_train_step(config, mesh, train_model, tx, shardings), (state, batch)
    else:
        fn = make_eval_step(config, mesh, make_model(config, deterministic=True),
                            shardings["params"])
        args = (state["params"], batch)
    # traced for the devices' platform, not this host's (attention picks its path by it)
    with on_mesh(mesh, config), lowering_for(devices[0].platform):
        traced = fn.jitted.trace(*args)
        return traced.lower() if lower else traced


def _cost(compiled) -> tuple[float, float]:
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    cost = cost or {}
    return float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0))


def compile_step(config, devices, step: str = "train", cache: dict | None = None,
                 lowered=None) -> StepCompile:
    """Compile one step; an out-of-memory verdict is a result (fits=False),
    any other failure an error. With `cache`, a program already compiled for
    the same devices (the same StableHLO: presets that differ only in data,
    e.g. B's sign) is not compiled again: its result is returned, 0 s. So
    is one that differs only in the value of a floating-point constant (SHAKE's
    bf per layer: shake_pos_plus, _minus and _random), whose buffers, and so
    memory, are the same (0 and ±1, which XLA may fold away, are kept).
    `lowered`: the step already lowered (lower()), not lowered again."""
    start = time.perf_counter()
    lowered = lower(config, devices, step) if lowered is None else lowered
    key = None
    if cache is not None:
        import hashlib
        program = _FLOAT_CONSTANT.sub(r"\1·\3", lowered.as_text())
        key = (hashlib.sha256(program.encode()).hexdigest(), len(devices),
               devices[0].device_kind, config.train.batch_size)
        if key in cache:
            return dataclasses.replace(cache[key], seconds=time.perf_counter() - start)
    result = _compile(lowered, config, step, start)
    if key is not None:
        cache[key] = dataclasses.replace(result, same_as=config.get("name", "") or "?")
    return result


# a splat floating-point constant in StableHLO, other than 0 and ±1
_FLOAT_CONSTANT = re.compile(r"(stablehlo\.constant dense<)(?!-?(?:0\.0+|1\.0+)e\+00>)"
                             r"(-?\d\.\d+e[+-]\d+)(> : tensor<[\dx]*(?:bf16|f16|f32|f64)>)")


def _compile(lowered, config, step: str, start: float) -> StepCompile:
    try:
        compiled = lowered.compile()
    except Exception as e:  # noqa: BLE001 - XlaRuntimeError has no stable import path
        text = " ".join(str(e).split())
        if not OOM.search(text):
            raise
        return StepCompile(step, config.train.batch_size, time.perf_counter() - start, False,
                           error=_oom_summary(text))
    seconds = time.perf_counter() - start
    m = compiled.memory_analysis()
    flops, bytes_accessed = _cost(compiled)
    return StepCompile(step, config.train.batch_size, seconds, True,
                       m.argument_size_in_bytes, m.output_size_in_bytes, m.alias_size_in_bytes,
                       m.temp_size_in_bytes, peak_bytes(m), flops, bytes_accessed)


def peak_bytes(memory) -> int:
    """Bytes live at the peak of one compiled step on one device, from its
    `memory_analysis()` (or the compiled program itself): the arguments, the
    outputs not aliased to donated arguments, and the temporaries."""
    m = memory.memory_analysis() if hasattr(memory, "memory_analysis") else memory
    return (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
            + m.temp_size_in_bytes)


def _oom_summary(text: str) -> str:
    """XLA's out-of-memory message, to the end of its first sentence (the one
    that says how much: "... temporaries (40.53G) exceeds available HBM (15.48G)")."""
    m = re.search(r"RESOURCE_EXHAUSTED:.*?\.(?=\s|$)", text)
    return (m.group(0) if m else text)[:240].strip()


def batch_shards(config, num_devices: int) -> int:
    data, fsdp, _ = mesh_shape(config.mesh, num_devices)
    return data * fsdp


def required_temporaries(error: str) -> tuple[int | None, int | None]:
    """(temporaries required, bytes available) from XLA's out-of-memory verdict
    ("... HLO temporaries (28.03G) exceeds available HBM (15.48G)" or "Used
    20.15G of 15.48G hbm"), or (None, None) when it names no sizes."""
    m = _REQUIRED.search(error)
    if not m:
        return None, None
    return tuple(int(float(v) * _UNITS[u.upper()]) for v, u in (m.group(1, 2), m.group(3, 4)))


_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_REQUIRED = re.compile(r"\(?([\d.]+)([KMGT])\)?\s*(?:exceeds? available HBM|of)\s*\(?"
                       r"([\d.]+)([KMGT])", re.I)


def fit_batch(config, devices, first: StepCompile, budget: int = 8,
              progress=print) -> tuple[int, int | None, dict]:
    """The largest global batch whose train step compiles (XLA's verdict),
    in rows per batch shard, to within 1/32 of itself (exact up to 32 rows),
    with at most `budget` more compiles.

    A compile that fits is dear (it generates the whole program); one that
    XLA refuses is mostly cheap (seconds; near the limit it may try for
    minutes) and names the temporaries it needed and the bytes it had. Those
    two figures share one accounting (a fitting program's memory_analysis
    counts differently: above the "available" figure on a v3), so the search
    steers by refusals alone: it probes 64× the largest fitting size, then a
    quarter past where the needed bytes, if proportional to the rows, would
    fit, then compiles where the line through the two smallest refused sizes
    meets the limit. Refused guesses close in from above; a fitting one is
    followed by steps of 1/32, doubling, and bisection once bracketed (also
    when the verdicts name no sizes). Returns (largest fitting global batch
    (0: none), smallest refused one (None: none compiled), {global batch:
    StepCompile})."""
    shards = batch_shards(config, len(devices))
    procs = len({d.process_index for d in devices})
    unit = shards * procs // math.gcd(shards, procs)   # rows divisible by shards and processes
    seen = {max(1, first.batch_size // unit): first}
    step = 0   # > 0: stepping up from a fitting guess
    for _ in range(budget):
        lo = max((r for r, s in seen.items() if s.fits), default=0)
        hi = min((r for r, s in seen.items() if not s.fits), default=None)
        if hi is not None and hi - lo <= max(1, lo // 32):
            break                   # bracketed closely enough
        needed, limit = {}, None
        for r, s in seen.items():
            if not s.fits:
                bytes_needed, available = required_temporaries(s.error)
                if bytes_needed and available:
                    needed[r], limit = bytes_needed, available
        guess, kind = None, "probe"
        if hi is None:              # probe far beyond: cheap if refused
            guess = 64 * lo if 64 * lo not in seen else 8 * lo
        elif step:
            guess, kind = lo + step, "step"
        elif hi in needed and len(needed) >= 2:
            r2 = min(r for r in needed if r > hi)
            slope = (needed[r2] - needed[hi]) / (r2 - hi)
            if slope > 0:           # errs high (far refusals are cheap), but moves ≥ 1/32
                guess, kind = min(hi - int((needed[hi] - limit) // slope),
                                  hi - max(1, hi // 32)), "line"
        elif hi in needed:          # a second refusal, for the line: a quarter past
            guess = int(1.25 * hi * limit / needed[hi])   # where bytes ∝ rows would fit
        if guess is None:
            guess, kind = (lo + hi) // 2, "bisect"
        guess = min(max(guess, lo + 1), hi - 1) if hi is not None else guess
        if guess < 1:
            break
        c = with_overrides(config, **{"train.batch_size": guess * unit})
        s = seen[guess] = compile_step(c, devices)
        # a line's point that fits: step up from it, 1/32 then doubling
        step = (2 * step or max(1, guess // 32)) if s.fits and kind in ("line", "step") else 0
        progress(f"  batch {guess * unit}: " + (f"fits, peak {s.peak / GIB:.2f} GiB"
                                                 if s.fits else "does not fit")
                 + f" ({s.seconds:.0f} s)")
    lo = max((r for r, s in seen.items() if s.fits), default=0)
    hi = min((r for r, s in seen.items() if not s.fits), default=None)
    return lo * unit, None if hi is None else hi * unit, {r * unit: s for r, s in seen.items()}


def loop_counted_cost(config, devices, scanned: StepCompile) -> tuple[float, float, float]:
    """(FLOPs, HBM bytes) per device of one train step with every layer
    counted, and the seconds the extra compiles took (0: none needed)."""
    m = config.model
    if m.get("arch", "bert") != "bert" or not m.scan_layers or m.num_layers < 2:
        return scanned.flops, scanned.bytes_accessed, 0.0
    one, two = (compile_step(with_overrides(config, **{"model.num_layers": n,
                                                       "model.scan_layers": False}), devices)
                for n in (1, 2))
    seconds = one.seconds + two.seconds
    if not (one.fits and two.fits):
        return scanned.flops, scanned.bytes_accessed, seconds
    more = m.num_layers - 1   # a layer: forward, backward and its AdamW update
    return (one.flops + more * (two.flops - one.flops),
            one.bytes_accessed + more * (two.bytes_accessed - one.bytes_accessed), seconds)


def roofline(config, num_devices: int, peak_flops: float, hbm_bytes_per_s: float,
             xla_bytes: float) -> dict:
    """Step time bounds per device and the MFU they allow (kjax's FLOPs)."""
    from kjax.train.step import flops_per_example
    d = config.data
    flops = flops_per_example(config.model, d.max_seq_len, d.max_predictions_per_seq) \
        * config.train.batch_size / num_devices
    compute, memory = flops / peak_flops, xla_bytes / hbm_bytes_per_s
    step = max(compute, memory)
    return {"model_flops": flops, "compute_s": compute, "memory_s": memory, "step_s": step,
            "bound": "compute" if compute >= memory else "memory",
            "mfu": flops / (step * peak_flops) if step else 0.0,
            "tokens_per_s": config.train.batch_size * d.max_seq_len / step if step else 0.0}


def advice(config, step: StepCompile, largest: int | None = None) -> str:
    """What to change when a step does not fit (one clause each)."""
    m, tips = config.model, []
    if largest:
        tips.append(f"--config.train.batch_size={largest} (the largest that compiles)")
    else:
        tips.append("a smaller --config.train.batch_size (`--fit-batch` finds the largest)")
    if m.remat_policy in ("none", "everything_saveable", "dots_saveable"):
        tips.append("--config.model.remat_policy=dots_with_no_batch_dims_saveable (or full)")
    elif m.remat_policy != "full":
        tips.append("--config.model.remat_policy=full")
    if config.mesh.fsdp == 1:
        tips.append("--config.mesh.fsdp=-1 --config.mesh.data=1 (shards params and Adam state)")
    return "; or ".join(tips)


def not_fitting_error(config_name: str, where: str, step: StepCompile, advice_text: str):
    return KjaxError(f"{config_name} does not fit {where}: the {step.step} step at batch "
                     f"{step.batch_size} ({step.error or 'out of memory'}); use "
                     f"{advice_text}")


def target_devices(topology_text: str):
    """(devices, description, HBM bytes per device | None, peak FLOP/s per
    device | None, HBM bytes/s per device | None) for `--topology`: a TPU
    slice (libtpu) or `local` (this host's devices, e.g. the 8 CPU devices
    of the tests: the same code path, no memory limit)."""
    if topology_text.strip().lower() == "local":
        devices = jax.devices()
        hosts = len({d.process_index for d in devices})
        return (devices, f"local: {len(devices)}× {devices[0].device_kind} on {hosts} "
                f"process(es)", None, None, None)
    from kjax.parallel.topology import parse_topology, topology_devices
    from kjax.train.metrics import DATASHEET_PEAKS
    topo = parse_topology(topology_text)
    devices = topology_devices(topo)
    hosts = len({d.process_index for d in devices})
    return (devices, f"{topo.accelerator} ({topo.name}: {len(devices)} devices on {hosts} "
            f"host(s))", topo.chip.hbm_bytes, DATASHEET_PEAKS[f"TPU {topo.generation}"],
            topo.chip.hbm_bytes_per_s)


def check(config, topology_text: str, steps=("train", "eval"), fit: bool = False,
          cost: bool = True, progress=print, cache: dict | None = None) -> dict:
    """Compile `steps` for the topology; the report `kjax compile` prints."""
    devices, where, hbm, peak, bandwidth = target_devices(topology_text)
    report = {"topology": where, "devices": len(devices),
              "hosts": len({d.process_index for d in devices}),
              "mesh": dict(zip(("data", "fsdp", "tensor"), mesh_shape(config.mesh, len(devices)))),
              "batch_size": config.train.batch_size, "hbm_bytes": hbm, "steps": {}}
    for step in steps:
        progress(f"compiling the {step} step for {where} ...")
        report["steps"][step] = compile_step(config, devices, step, cache)
    train = report["steps"].get("train")
    if train is not None and fit and hbm:
        progress("searching the largest batch that compiles ...")
        largest, failing, seen = fit_batch(config, devices, train, progress=progress)
        report["fit"] = {"largest": largest, "smallest_failing": failing,
                         "compiles": {b: s.peak if s.fits else None for b, s in seen.items()}}
    if train is not None and train.fits and cost and peak:
        progress("costing every layer of the scanned encoder (1- and 2-layer compiles) ...")
        flops, bytes_accessed, seconds = loop_counted_cost(config, devices, train)
        report["roofline"] = {**roofline(config, len(devices), peak, bandwidth, bytes_accessed),
                              "xla_flops": flops, "xla_bytes": bytes_accessed,
                              "peak_flops": peak, "hbm_bytes_per_s": bandwidth,
                              "cost_compile_s": seconds}
    return report
