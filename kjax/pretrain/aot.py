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
to donated arguments. What a step communicates per device comes from the
optimized HLO (kjax/pretrain/collectives.py: every collective, each loop's
trip count). The roofline step time is the largest of kjax's FLOP count
(kjax.train.step.flops_per_example) over the chip's peak, the compiled
program's HBM bytes over its bandwidth, and the bytes its collectives put
through each device's links over the interconnect's (topology.py). XLA's
cost analysis counts a while loop's body once, so a scanned encoder
(model.scan_layers) is costed as U₁ + (L − 1)·(U₂ − U₁), U₁ and U₂ the same
step with 1 and 2 unrolled layers (two more compiles, each smaller than the
step itself; the layer's AdamW update is in U₂ − U₁ as it is in the
unrolled step). The architecture says which loops it scans
(kjax/model/arch: `scanned_loops`; ELECTRA's generator has its own). An
accumulated step (k microbatches) is costed likewise from 1 and 2
microbatches, their loop unrolled: bilinear in (layers, microbatches).
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import time

import jax

from kjax.batches.synthetic import batch_shapes
from kjax.config import platform_defaults
from kjax.config.load import apply_overrides, copy_of
from kjax.config.platform import lowering_for
from kjax.model.arch import architecture
from kjax.parallel.mesh import batch_sharding, make_mesh, mesh_shape, on_mesh
from kjax.pretrain import collectives as comm
from kjax.train import accumulation

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
    # bytes a step moves per device, per kind of collective (collectives.summary)
    collectives: dict = dataclasses.field(default_factory=dict)


def with_overrides(config, **keys):
    """A copy of `config` with dotted keys changed ({"train.batch_size": 64}),
    each value typed by its key (the one override function, apply_overrides)."""
    return apply_overrides(copy_of(config), keys)


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
    platform_defaults.resolve(config, devices[0].platform,   # the target's, not this host's
                              keys=architecture(config).auto_keys)
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
    with on_mesh(mesh, config), lowering_for(devices[0].platform, devices[0].device_kind):
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
                       m.temp_size_in_bytes, peak_bytes(m), flops, bytes_accessed,
                       collectives=comm.summary(compiled.as_text()))


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


def loop_counted_cost(config, devices, scanned: StepCompile) -> tuple[float, float, float]:
    """(FLOPs, HBM bytes) per device of one train step with every layer of
    every scanned loop and every microbatch counted, and the seconds the extra
    compiles took (0: none needed). U₁ has every loop at one unrolled layer;
    for each depth L, U₂ has the loops of that depth at two (loops of one
    depth, as ELECTRA's generator following its discriminator, share their
    compiles) and adds (L − 1)·(U₂ − U₁). With k microbatches each of those
    is compiled at 1 and 2 microbatches of the same size, their loop
    unrolled, and the microbatch term added bilinearly: a layer's forward and
    backward run per microbatch, its update once."""
    loops = architecture(config).scanned_loops(config.model)
    deep: dict[int, list[str]] = {}
    for key, depth in loops:
        if depth >= 2:
            deep.setdefault(depth, []).append(key)
    k = config.train.microbatches
    if not deep and k == 1:
        return scanned.flops, scanned.bytes_accessed, 0.0
    single = {**{key: 1 for key, _ in loops}, "model.scan_layers": False} if deep else {}
    variants = {0: single, **{depth: {**single, **{key: 2 for key in keys}}
                              for depth, keys in deep.items()}}
    cost = {}
    for variant, keys in variants.items():
        for micro in (1, 2) if k > 1 else (1,):
            over = dict(keys)
            if k > 1:   # microbatches of the same size, their loop unrolled
                over.update({"train.microbatches": micro,
                             "train.batch_size": config.train.batch_size // k * micro})
            with accumulation.unrolled() if k > 1 else contextlib.nullcontext():
                cost[variant, micro] = compile_step(with_overrides(config, **over), devices)
    seconds = sum(c.seconds for c in cost.values())
    if not all(c.fits for c in cost.values()):
        return scanned.flops, scanned.bytes_accessed, seconds

    def total(field):
        def at(variant, micro):
            return getattr(cost[variant, micro], field)
        out = at(0, 1) + ((k - 1) * (at(0, 2) - at(0, 1)) if k > 1 else 0)
        for depth in deep:
            layer = at(depth, 1) - at(0, 1)
            if k > 1:
                layer += (k - 1) * (at(depth, 2) - at(depth, 1) - at(0, 2) + at(0, 1))
            out += (depth - 1) * layer
        return out
    return total("flops"), total("bytes_accessed"), seconds


def roofline(config, num_devices: int, peak_flops: float, hbm_bytes_per_s: float,
             xla_bytes: float, wire_bytes: float = 0.0, ici_bytes_per_s: float | None = None
             ) -> dict:
    """Step time bounds per device and the MFU they allow (kjax's FLOPs):
    compute, HBM traffic and the collectives' bytes on the device's links."""
    from kjax.train.step import flops_per_example
    d = config.data
    flops = flops_per_example(config.model, d.max_seq_len, d.max_predictions_per_seq) \
        * config.train.batch_size / num_devices
    compute, memory = flops / peak_flops, xla_bytes / hbm_bytes_per_s
    communication = wire_bytes / ici_bytes_per_s if ici_bytes_per_s else 0.0
    bounds = {"compute": compute, "memory": memory, "communication": communication}
    step = max(bounds.values())
    return {"model_flops": flops, "compute_s": compute, "memory_s": memory,
            "communication_s": communication, "step_s": step,
            "bound": max(bounds, key=bounds.get),
            "mfu": flops / (step * peak_flops) if step else 0.0,
            "tokens_per_s": config.train.batch_size * d.max_seq_len / step if step else 0.0}


def interconnect(topology_text: str) -> float | None:
    """Interconnect bytes/s per device of a TPU slice (None: `local`)."""
    if topology_text.strip().lower() == "local":
        return None
    from kjax.parallel.topology import parse_topology
    return parse_topology(topology_text).chip.ici_bytes_per_s


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
    from kjax.train.peak_flops import DATASHEET_PEAKS
    topo = parse_topology(topology_text)
    devices = topology_devices(topo)
    hosts = len({d.process_index for d in devices})
    return (devices, f"{topo.accelerator} ({topo.name}: {len(devices)} devices on {hosts} "
            f"host(s))", topo.chip.hbm_bytes, DATASHEET_PEAKS[f"TPU {topo.generation}"],
            topo.chip.hbm_bytes_per_s)
