"""One attention layer, fwd + bwd, over the grid of paths a GPU can take
(benchmarks/kernels/attention.py --grid): {cudnn, flash, xla} × {no dropout,
attention dropout 0.1} × {no B, pairs B "pos" (each query boosts keys within
±8 of itself: few key blocks per query block), pairs B "random" (keys
anywhere)}, at each sequence length, bf16. Every row is printed as soon as
it is measured; the grid stops after `cap_s` seconds. Extra tilings of the
flash kernels (`--tiles LABEL=F/DQ/DKV`) are timed as flash rows of their own.
"""
from __future__ import annotations

import time

import numpy as np


def parse_tiling(text: str):
    """LABEL=F/DQ/DKV → (label, (Tiles, Tiles, Tiles)), each outer,inner,warps,stages."""
    from kjax.model.flash_tiles import Tiles
    label, _, spec = text.partition("=")
    parts = spec.split("/")
    if not label or len(parts) != 3:
        raise SystemExit(f"--tiles {text!r}: give LABEL=F/DQ/DKV, each outer,inner,warps,stages")
    return label, tuple(Tiles(*(int(x) for x in p.split(","))) for p in parts)


def grid(seqs, tokens, steps, cap_s, tilings=()) -> list[dict]:
    """The grid's rows, each printed as measured; returns them as records' rows."""
    import jax
    import jax.numpy as jnp
    from kjax.model import dropout_hash
    backend, start = jax.default_backend(), time.perf_counter()
    dtype = jnp.float32 if backend == "cpu" else jnp.bfloat16
    h, d, words = 12, 64, dropout_hash.key_words(jax.random.key(0))
    rows = []
    print("| impl | attention dropout | B | seq | batch | fwd+bwd ms (median) | ÷ same impl, "
          "no dropout, no B |\n|---|---|---|---|---|---|---|", flush=True)
    for s in seqs:
        b = max(1, tokens // s)
        rng = np.random.default_rng(0)
        q, k, v = (jnp.asarray(rng.normal(size=(b, s, h, d)) / 4, dtype) for _ in range(3))
        valid = jnp.ones((b, s), jnp.int32)
        weight = jnp.asarray((rng.random((b, s)) < 0.25).astype(np.float32), jnp.float8_e4m3fn)
        pos = np.clip(np.arange(s) + rng.integers(-8, 8, (b, s)), 0, s - 2)
        far = rng.integers(0, s - 2, (b, s))
        shakes = {"none": None}
        for name, begin in (("pos", pos), ("random", far)):
            shakes[name] = {"key_start": jnp.asarray(begin, jnp.int32),
                            "key_end": jnp.asarray(begin + 2, jnp.int32), "weight": weight}
        base = {}
        for impl in ("cudnn", "flash", *(f"flash {label}" for label, _ in tilings), "xla"):
            for rate in (0.0, 0.1):
                for layout, shake in shakes.items():
                    if time.perf_counter() - start > cap_s:
                        print(f"(stopped: --cap {cap_s:.0f} s reached)", flush=True)
                        return rows
                    if impl == "cudnn" and (layout != "none" or backend != "gpu"):
                        continue
                    if impl == "cudnn" and rate:
                        # On an H200 (jax 0.11.2) cuDNN's dropout aborted the process
                        # (cuda_dnn.cc: Check failed: local_device_ordinal.has_value()),
                        # taking the rest of the grid with it.
                        print(f"| cudnn | {rate} | none | {s} | {b} | not run: cuDNN's dropout "
                              "aborts the process (jax 0.11.2, H200) | |", flush=True)
                        continue
                    if impl.startswith("flash") and backend == "cpu" and s > 256:
                        continue   # interpret mode: an emulator, no speed
                    tiles = dict(tilings).get(impl.partition(" ")[2])
                    fn = jax.jit(jax.value_and_grad(_grid_loss(impl, rate, valid, words, tiles),
                                                    (0, 1, 2)))
                    try:
                        jax.block_until_ready(fn(q, k, v, shake))
                        times = []
                        for _ in range(steps):
                            t = time.perf_counter()
                            jax.block_until_ready(fn(q, k, v, shake))
                            times.append(time.perf_counter() - t)
                    except Exception as e:  # noqa: BLE001  a row that fails says why, the grid goes on
                        print(f"| {impl} | {rate} | {layout} | {s} | {b} | failed: "
                              f"{type(e).__name__}: {str(e).splitlines()[0][:120]} | |", flush=True)
                        continue
                    ms = 1e3 * float(np.median(times))
                    base.setdefault(impl, ms)
                    print(f"| {impl} | {rate} | {layout} | {s} | {b} | {ms:.2f} | "
                          f"{ms / base[impl]:.2f}× |", flush=True)
                    rows.append({"row": f"{impl}, attention dropout {rate}, B {layout}",
                                 "shape": {"seq": s, "batch": b, "heads": h, "head_dim": d,
                                           "dtype": jnp.dtype(dtype).name},
                                 "figures": {"ms": round(ms, 3),
                                             "vs_plain": round(ms / base[impl], 3)}})
    return rows


def _grid_loss(impl, rate, valid, words, tiles=None):
    import jax
    import jax.numpy as jnp
    from kjax.model import dropout_hash
    from kjax.model.attention import explicit_attention
    from kjax.model.attention_core import fused_attention
    drop = dict(rate=rate, words=words, broadcast=False) if rate else None

    def loss(q, k, v, shake):
        if impl == "cudnn":
            from jax._src.cudnn.fused_attention_stablehlo import dot_product_attention
            out = dot_product_attention(q, k, v, scale=1.0, dropout_rate=rate)
        elif tiles is not None:    # one layer, no mesh: the kernel itself, tiled as asked
            from kjax.model.flash_shake import flash_attention
            out = flash_attention(q, k, v, valid, shake=shake, bf=0.5, dropout_rate=rate,
                                  dropout_words=words, tiles=tiles,
                                  interpret=jax.default_backend() == "cpu")
        elif impl == "flash":
            out = fused_attention("flash", q, k, v, valid, shake=shake, bf=0.5, dropout=drop)
        else:
            hashed = None if drop is None else (
                lambda p: dropout_hash.dropout(p, words, rate))
            out = explicit_attention(q, k, v, valid, shake=shake, bf=0.5, dropout=hashed,
                                     logits_dtype=q.dtype)[0]
        return out.astype(jnp.float32).sum()
    return loss
