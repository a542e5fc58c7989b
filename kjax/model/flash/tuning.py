"""The flash kernels' tiles chosen on the user's card: timed once, then kept.

Which tiling free of spills (kjax/model/flash/tiles.py) is fastest depends on
the GPU, the call's shape and its features, and ptxas cannot say it. A flash
call's signature is (seq, head size, batch, heads, dtype as one device sees
them; attention dropout, B's layout, segments, the local window), and its
tiles come from the first of:

  1. `model.attention_tiles`: the signature's entry, else '*' ('F/DQ/DKV',
     or 'table' for the table of tiles.py). A run's tiles arrive this way:
     kjax train traces its steps once before it builds them, writes what
     every signature chose (`chosen`) into its config and records it, so its
     program, and with it bit-exact resume, does not depend on a later
     timing or another card (kjax/pretrain/run_config.py);
  2. this process's earlier choice for the signature;
  3. the cache file (`cache_path`: beside jax's compilation cache, else in
     kjax's cache folder), one entry per device kind and signature;
  4. timing, on a GPU that this process drives alone: forward + backward on
     random data of the signature's shape for the table's tiles, then
     tiles.CANDIDATES, until BUDGET_S seconds have passed (compiles
     included); the fastest is kept in the cache. Elsewhere (TPU, the CPU's
     interpret mode, a deviceless compile, several processes, which must all
     compile one program) the table.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import statistics
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from kjax import paths
from kjax.model.flash.tiles import candidates, fit, format_tiles, kernel_tiles, parse_tiles

BUDGET_S = 10.0          # per signature, compiles included: a handful of tilings
REPS = 5                 # timed calls per tiling, after one that compiles and warms up
CACHE_FILE = "kjax_flash_tiles.json"

_chosen: dict[str, str] = {}     # signature → the tiles it ran with, this process


@dataclasses.dataclass(frozen=True)
class Call:
    """What a flash call's tiles depend on (one device's view of it)."""
    batch: int
    seq: int
    heads: int
    head_dim: int
    dtype: str
    dropout: float = 0.0
    shake: str = "none"            # none | dense | pairs
    segments: bool = False
    local_window: int | None = None

    @property
    def signature(self) -> str:
        parts = [f"s{self.seq}", f"d{self.head_dim}", f"b{self.batch}", f"h{self.heads}",
                 self.dtype]
        parts += ["dropout"] if self.dropout else []
        parts += [] if self.shake == "none" else [self.shake]
        parts += ["segments"] if self.segments else []
        parts += [] if self.local_window is None else [f"w{self.local_window}"]
        return "_".join(parts)


def chosen() -> dict[str, str]:
    """{signature: 'F/DQ/DKV'} of every flash call this process traced."""
    return dict(_chosen)


def cache_path() -> str:
    folder = jax.config.jax_compilation_cache_dir or paths.cache_root()
    return paths.join(folder, CACHE_FILE)


def tiles_for(call: Call, fixed=(), measure: Callable | None = None):
    """The (forward, dq, dk/dv) tiles of a flash call on Triton (module doc).
    `fixed`: model.attention_tiles as (signature, value) pairs; `measure`:
    tiles → seconds (default: timed on this process's first GPU, if any)."""
    fixed = dict(fixed)
    value = fixed.get(call.signature, fixed.get("*"))
    if value is not None:
        tiles = kernel_tiles(call.seq, True, head_dim=call.head_dim) if value == "table" \
            else fit(parse_tiles(value), call.seq)
    elif call.signature in _chosen:
        tiles = parse_tiles(_chosen[call.signature])
    else:
        tiles = _cached_or_timed(call, measure)
    _chosen[call.signature] = format_tiles(tiles)
    return tiles


def _cached_or_timed(call: Call, measure):
    table = kernel_tiles(call.seq, True, head_dim=call.head_dim)
    if measure is None and not can_time():
        return table
    kind = device_kind()
    path = cache_path()
    cache = _read(path)
    if call.signature in cache.get(kind, {}):
        return fit(parse_tiles(cache[kind][call.signature]), call.seq)
    best, _ = fastest(candidates(call.seq, call.head_dim), measure or _on_device(call))
    if best is None:
        return table
    cache = _read(path)                      # another run may have written meanwhile
    cache.setdefault(kind, {})[call.signature] = format_tiles(best)
    try:
        paths.write_json(path, cache)
    except OSError:
        pass   # a read-only cache folder: the choice holds for this process
    return best


def fastest(options, measure, clock=time.perf_counter, budget_s: float | None = None):
    """(the fastest of `options` by `measure`, [(tiles, seconds)]): options in
    order until budget_s (default BUDGET_S) has passed; one that fails to
    compile or run is skipped (None if every one failed)."""
    budget_s = BUDGET_S if budget_s is None else budget_s
    start, timings = clock(), []
    for tiles in options:
        if timings and clock() - start > budget_s:
            break
        try:
            seconds = measure(tiles)
        except Exception:  # noqa: BLE001  a tiling this card or compiler refuses
            continue
        if math.isfinite(seconds):
            timings.append((tiles, seconds))
    if not timings:
        return None, []
    return min(timings, key=lambda t: t[1])[0], timings


def can_time() -> bool:
    """Whether this process may time kernels: a GPU of its own, no peer process."""
    return jax.process_count() == 1 and jax.local_devices()[0].platform == "gpu"


def device_kind() -> str:
    return jax.local_devices()[0].device_kind


def _read(path: str) -> dict:
    try:
        return paths.read_json(path) if paths.isfile(path) else {}
    except (OSError, ValueError):
        return {}    # unreadable: timed again, then rewritten


def _on_device(call: Call, reps: int = REPS, interpret: bool = False):
    """tiles → median seconds of the call's forward + backward on random data.
    Runs while a step is being traced: in a thread of its own, where no trace,
    mesh or lowering target of the step's is current (jax keeps them per thread)."""
    from kjax.model.flash.attention import flash_attention
    b, s, h, d = call.batch, call.seq, call.heads, call.head_dim
    rng = np.random.default_rng(0)
    pos = np.broadcast_to(np.arange(s, dtype=np.int32), (b, s))
    extra = {"segment_ids": np.zeros((b, s), np.int32) if call.segments else None,
             "local_window": call.local_window, "bf": 0.5,
             "shake": {"pairs": {"key_start": pos, "key_end": pos + 2,   # B near the diagonal
                                 "weight": np.ones((b, s), np.float32)},
                       "dense": (rng.random((b, s, s)) < 0.01).astype(np.float32),
                       "none": None}[call.shake]}
    qkv = [(rng.standard_normal((b, s, h, d)) / 4).astype(np.float32) for _ in range(3)]

    def run(tiles):
        q, k, v = (jnp.asarray(x, call.dtype) for x in qkv)
        loss = lambda q, k, v: flash_attention(  # noqa: E731
            q, k, v, jnp.ones((b, s), jnp.int32), dropout_rate=call.dropout,
            dropout_words=jnp.asarray([1, 2], jnp.int32), tiles=tiles, interpret=interpret,
            **extra).astype(jnp.float32).sum()
        step = jax.jit(jax.grad(loss, (0, 1, 2)))
        jax.block_until_ready(step(q, k, v))
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            jax.block_until_ready(step(q, k, v))
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    def measure(tiles):
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(run, tiles).result()
    return measure


def forget() -> None:
    """Drops this process's choices (tests; a new run in the same process)."""
    _chosen.clear()

