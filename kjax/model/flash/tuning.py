"""The flash kernels' tiles: what a traced call runs with, and the choice
of better ones on the user's card, as values.

Which tiling free of spills (kjax/model/flash/tiles.py) is fastest depends on
the GPU, the call's shape and its features, and ptxas cannot say it. A flash
call's signature is (seq, head size, batch, heads, dtype as one device sees
them; attention dropout, B's layout, segments, the local window).

While a step is traced, a call takes its tiles from `model.attention_tiles`
(`traced_tiles`): the signature's entry, else '*' ('F/DQ/DKV', or 'table'
for the table of tiles.py), else — on a GPU this process drives alone — the
card's cached choice for the signature, else the table. Nothing is timed and
nothing is kept while a trace is open: the call only names itself in the
trace (`Call.scope`, a jax.named_scope, which the lowered program's text
does not hold), so a trace of a config's steps lists the calls it makes
(`calls_in(jaxpr)`).

Choosing is a separate step, outside any trace (`choose_tiles(calls, fixed)`
→ {signature: tiles}): for each call the config's entry, else the cache file
(`cache_path`: beside jax's compilation cache, else in kjax's cache folder;
one entry per device kind and signature), else timing on a GPU that this
process drives alone: forward + backward on random data of the signature's
shape for the table's tiles, then tiles.CANDIDATES, until BUDGET_S seconds
have passed (compiles included), the fastest kept in the cache. Elsewhere
(TPU, the CPU's interpret mode, a deviceless compile, several processes,
which must all compile one program) the table. `kjax train` does this before
it builds anything and writes the result into its config
(kjax/pretrain/run_config.py), so its program has every tile fixed by the
config and a resume compiles the same kernels; `kjax finetune` does the same
for its train and eval steps (kjax/finetune/trainer.py `fix_flash_tiles`).
"""
from __future__ import annotations

import dataclasses
import math
import re
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
SCOPE = "kjax_flash"     # the named scope a traced call carries: kjax_flash[field=value;...]


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

    @property
    def scope(self) -> str:
        """The name of the jax.named_scope a traced call runs in: every field,
        so a trace's jaxpr says which calls it makes (`calls_in`)."""
        fields = ";".join(f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self))
        return f"{SCOPE}[{fields}]"

    @classmethod
    def from_scope(cls, text: str) -> "Call":
        values = dict(item.split("=", 1) for item in text.split(";"))
        kinds = {"batch": int, "seq": int, "heads": int, "head_dim": int, "dtype": str,
                 "dropout": float, "shake": str, "segments": lambda v: v == "True",
                 "local_window": lambda v: None if v == "None" else int(v)}
        return cls(**{k: kinds[k](v) for k, v in values.items()})


_SCOPED = re.compile(re.escape(SCOPE) + r"\[([^\]]*)\]")


def calls_in(jaxpr) -> list[Call]:
    """The flash calls a traced program makes (a jaxpr, or a ClosedJaxpr such
    as `jax.jit(f).trace(...).jaxpr`), each once, in the order first met:
    read from the named scopes of its equations, through every nested jaxpr
    (scan, remat, shard_map, custom_vjp, ...)."""
    found: dict[str, Call] = {}

    def walk(j):
        for eqn in j.eqns:
            for text in _SCOPED.findall(str(eqn.source_info.name_stack)):
                if text not in found:
                    found[text] = Call.from_scope(text)
            for value in eqn.params.values():
                for sub in value if isinstance(value, (tuple, list)) else (value,):
                    inner = getattr(sub, "jaxpr", sub)   # a ClosedJaxpr's, or a Jaxpr
                    if hasattr(inner, "eqns"):
                        walk(inner)
    walk(getattr(jaxpr, "jaxpr", jaxpr))
    return list(found.values())


def cache_path() -> str:
    folder = jax.config.jax_compilation_cache_dir or paths.cache_root()
    return paths.join(folder, CACHE_FILE)


def _fixed(call: Call, fixed):
    """The tiles `model.attention_tiles` (as (signature, value) pairs) sets for
    `call`: its signature's entry, else '*'; None where it sets none."""
    fixed = dict(fixed)
    value = fixed.get(call.signature, fixed.get("*"))
    if value is None:
        return None
    return kernel_tiles(call.seq, True, head_dim=call.head_dim) if value == "table" \
        else fit(parse_tiles(value), call.seq)


def traced_tiles(call: Call, fixed=()):
    """The (forward, dq, dk/dv) tiles a call traced on Triton runs with: the
    config's (`fixed`: model.attention_tiles as pairs), else, on a GPU this
    process drives alone, this card's cached choice for the signature (read,
    never timed or written: `kjax train`'s and `kjax finetune`'s steps have
    every tile fixed by then; another verb's step, e.g. `kjax eval` at another
    batch size, takes what an earlier choice found), else the table.
    Nothing is kept: the trace's tiles are a function of its inputs."""
    tiles = _fixed(call, fixed)
    if tiles is None and can_time():
        tiles = _cached(call)
    return kernel_tiles(call.seq, True, head_dim=call.head_dim) if tiles is None else tiles


def choose(call: Call, fixed=(), measure: Callable | None = None):
    """The tiles to fix for `call`, chosen outside any trace: the config's,
    else the cache file's for this card, else the fastest timed (`measure`:
    tiles → seconds; default: timed on this process's GPU, if it may), else
    the table."""
    tiles = _fixed(call, fixed)
    return _cached_or_timed(call, measure) if tiles is None else tiles


def choose_tiles(calls, fixed=(), measure: Callable | None = None) -> dict[str, str]:
    """{signature: 'F/DQ/DKV'} for every call (`calls_in` of a config's traced
    steps), each as `choose` picks it; `measure(call)` → a tiles → seconds
    function (default: timing on this process's GPU, if it may)."""
    return {call.signature: format_tiles(choose(call, fixed, measure and measure(call)))
            for call in calls}


def _cached(call: Call):
    """This card's cached tiles for the call's signature, or None."""
    found = _read(cache_path()).get(device_kind(), {}).get(call.signature)
    return None if found is None else fit(parse_tiles(found), call.seq)


def _cached_or_timed(call: Call, measure):
    table = kernel_tiles(call.seq, True, head_dim=call.head_dim)
    if measure is None and not can_time():
        return table
    cached = _cached(call)
    if cached is not None:
        return cached
    best, _ = fastest(candidates(call.seq, call.head_dim), measure or _on_device(call))
    if best is None:
        return table
    path, kind = cache_path(), device_kind()
    cache = _read(path)                      # another run may have written meanwhile
    cache.setdefault(kind, {})[call.signature] = format_tiles(best)
    try:
        paths.write_json(path, cache)
    except OSError:
        pass   # a read-only cache folder: the choice is returned all the same
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
    """tiles → median seconds of the call's forward + backward on random data
    (run outside any trace: `choose` is called before a step is built)."""
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

    def measure(tiles):
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
    return measure
