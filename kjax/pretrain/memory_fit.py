"""Will it fit: the largest batch that compiles (`kjax compile --fit-batch`),
the fewest microbatches that fit the config's batch, what to change when a
step does not fit, and the report `kjax compile` prints. Every verdict is
XLA's, from the compiles of kjax/pretrain/aot.py.
"""
from __future__ import annotations

import math
import re

from kjax.config.batch_ramp import ramp_of, stage_config
from kjax.errors import KjaxError
from kjax.parallel.mesh import mesh_shape
from kjax.pretrain import aot
from kjax.pretrain.aot import GIB, StepCompile, batch_shards, with_overrides


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
        s = seen[guess] = aot.compile_step(c, devices)
        # a line's point that fits: step up from it, 1/32 then doubling
        step = (2 * step or max(1, guess // 32)) if s.fits and kind in ("line", "step") else 0
        progress(f"  batch {guess * unit}: " + (f"fits, peak {s.peak / GIB:.2f} GiB"
                                                 if s.fits else "does not fit")
                 + f" ({s.seconds:.0f} s)")
    lo = max((r for r, s in seen.items() if s.fits), default=0)
    hi = min((r for r, s in seen.items() if not s.fits), default=None)
    return lo * unit, None if hi is None else hi * unit, {r * unit: s for r, s in seen.items()}


def fewest_microbatches(config, num_devices: int, num_processes: int, largest: int) -> int | None:
    """The smallest k that splits train.batch_size into microbatches the mesh
    takes (whole rows per batch shard and process) of at most `largest` rows."""
    batch, shards = config.train.batch_size, batch_shards(config, num_devices)
    for k in range(1, batch + 1):
        rows = batch // k
        if batch % k == 0 and rows <= largest and rows % shards == 0 and rows % num_processes == 0:
            return k
    return None


def accumulation_fit(config, devices, largest: int, train: StepCompile, cache, progress) -> dict:
    """Which train.microbatches fits the config's global batch, with XLA's
    verdict on it (the summed gradients add a parameter-sized fp32 buffer, so
    a microbatch of the largest single pass may still not fit)."""
    procs = len({d.process_index for d in devices})
    k = fewest_microbatches(config, len(devices), procs, largest) if largest else None
    if k is None:
        return {"microbatches": None}
    if k == config.train.microbatches:
        return {"microbatches": k, "microbatches_fit": train.fits}
    progress(f"compiling batch {config.train.batch_size} in {k} microbatches ...")
    step = aot.compile_step(with_overrides(config, **{"train.microbatches": k}), devices, "train",
                        cache)
    return {"microbatches": k, "microbatches_fit": step.fits,
            "microbatches_peak": step.peak if step.fits else None}


def advice(config, step: StepCompile, largest: int | None = None,
           microbatches: int | None = None) -> str:
    """What to change when a step does not fit (one clause each)."""
    m, tips = config.model, []
    if microbatches and microbatches != config.train.microbatches:
        tips.append(f"--config.train.microbatches={microbatches} (the same batch by gradient "
                    f"accumulation)")
    elif not largest:
        tips.append("more --config.train.microbatches (gradient accumulation; `--fit-batch` "
                    "says how many)")
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
    elif config.train.microbatches > 1 and config.mesh.get("fsdp_gather", "step") == "step":
        tips.append("--config.mesh.fsdp_gather=microbatch (FSDP's memory: the parameters "
                    "gathered in every microbatch)")
    return "; or ".join(tips)


def not_fitting_error(config_name: str, where: str, step: StepCompile, advice_text: str):
    return KjaxError(f"{config_name} does not fit {where}: the {step.step} step at batch "
                     f"{step.batch_size} ({step.error or 'out of memory'}); use "
                     f"{advice_text}")


def layout(config, num_devices: int) -> dict:
    """Where the optimizer update runs and, under FSDP with accumulation,
    how often the parameters are gathered (what `kjax compile` says)."""
    data, fsdp, _ = mesh_shape(config.mesh, num_devices)
    out = {"update": "sliced over data (parameters gathered once a step, gradients "
                     "reduce-scattered once)" if config.mesh.get("shard_update", False)
           and data > 1 else "replicated" if data > 1 else "one data shard"}
    if fsdp > 1:
        out["fsdp_gather"] = ("once a microbatch" if config.train.microbatches > 1
                              and config.mesh.get("fsdp_gather", "step") == "microbatch"
                              else "once a step")
    return out


def stage_compiles(config, devices, cache, progress=print) -> list[dict]:
    """The train step of every stage of train.batch_ramp but the last (whose
    step is the config's own train step), each at its batch in its
    microbatches: [] without a ramp. The largest stage's memory is what must
    fit (kjax/config/batch_ramp.py: one microbatch shape)."""
    stages = []
    for stage in ramp_of(config).stages[:-1]:
        progress(f"compiling the train step of batch-ramp stage {stage.index} (batch "
                 f"{stage.batch_size} in {stage.microbatches} microbatch(es)) ...")
        stages.append({"stage": stage.index, "steps": (stage.first_step + 1, stage.end_step),
                       "batch_size": stage.batch_size, "microbatches": stage.microbatches,
                       "compile": aot.compile_step(stage_config(config, stage), devices,
                                                   "train", cache)})
    return stages


def check(config, topology_text: str, steps=("train", "eval"), fit: bool = False,
          cost: bool = True, progress=print, cache: dict | None = None) -> dict:
    """Compile `steps` for the topology; the report `kjax compile` prints."""
    devices, where, hbm, peak, bandwidth = aot.target_devices(topology_text)
    report = {"topology": where, "devices": len(devices),
              "hosts": len({d.process_index for d in devices}),
              "mesh": dict(zip(("data", "fsdp", "tensor"), mesh_shape(config.mesh, len(devices)))),
              "batch_size": config.train.batch_size,
              "microbatches": config.train.microbatches, "hbm_bytes": hbm, "steps": {},
              "layout": layout(config, len(devices))}
    for step in steps:
        progress(f"compiling the {step} step for {where} ...")
        report["steps"][step] = aot.compile_step(config, devices, step, cache)
    train = report["steps"].get("train")
    if train is not None:
        report["stages"] = stage_compiles(config, devices, cache, progress)
    if train is not None and fit and hbm:
        progress("searching the largest batch that compiles ...")
        single, first = config, train
        if config.train.microbatches > 1:   # the search is over one pass: the microbatch's
            single = with_overrides(config, **{"train.microbatches": 1, "train.batch_size":
                                               config.train.batch_size // config.train.microbatches})
            first = aot.compile_step(single, devices, "train", cache)
        largest, failing, seen = fit_batch(single, devices, first, progress=progress)
        report["fit"] = {"largest": largest, "smallest_failing": failing,
                         "compiles": {b: s.peak if s.fits else None for b, s in seen.items()},
                         **accumulation_fit(config, devices, largest, train, cache, progress)}
    if train is not None and train.fits and cost and peak:
        progress("costing every layer and microbatch (1- and 2-layer/microbatch compiles) ...")
        flops, bytes_accessed, seconds = aot.loop_counted_cost(config, devices, train)
        ici = aot.interconnect(topology_text)
        wire = train.collectives.get("wire", 0)
        report["roofline"] = {**aot.roofline(config, len(devices), peak, bandwidth, bytes_accessed,
                                             wire, ici), "wire_bytes": wire,
                              "ici_bytes_per_s": ici,
                              "xla_flops": flops, "xla_bytes": bytes_accessed,
                              "peak_flops": peak, "hbm_bytes_per_s": bandwidth,
                              "cost_compile_s": seconds}
    return report
