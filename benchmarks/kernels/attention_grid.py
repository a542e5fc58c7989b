"""One attention layer, fwd + bwd, over the grid of paths a GPU can take
(benchmarks/kernels/attention.py --grid): {cudnn, flash, xla} × {no dropout,
attention dropout 0.1} × {no B, pairs B "pos" (each query boosts keys within
±8 of itself: few key blocks per query block), pairs B "random" (keys
anywhere)}, at each sequence length, bf16. Every row is printed as soon as
it is measured (and handed to `on_row`, which may record it at once); the
grid stops after `cap_s` seconds. Extra tilings of the flash kernels
(`--tiles LABEL=F/DQ/DKV`) are timed as flash rows of their own; a plain
flash row says which tiles it ran (those timed on the card, within
`tuning_budget_s` per signature, or `flash_tiles`). `mosaic` is jax's Mosaic
GPU attention, always in float16 (its buffers are), no dropout, no B. cuDNN
and Mosaic rows off a GPU say "skipped: needs a GPU".
"""
from __future__ import annotations

import time

import numpy as np

IMPLS = ("cudnn", "flash", "xla", "mosaic")
LAYOUTS = ("none", "pos", "random")
# jax's Mosaic GPU kernel (wgmma, TMA, warp specialization), tiled as its own
# example tiles a head of 64: its forward and both backward kernels free of
# spills for sm_90a (docs/GPU.md §8)
MOSAIC_TILES = dict(block_q=64, block_kv=64, max_concurrent_steps=2, causal=False,
                    block_q_dkv=64, block_kv_dkv=64, block_q_dq=64, block_kv_dq=64)


def parse_tiling(text: str):
    """LABEL=F/DQ/DKV → (label, (Tiles, Tiles, Tiles)), each outer,inner,warps,stages."""
    from kjax.model.flash.tiles import parse_tiles
    label, _, spec = text.partition("=")
    if not label or len(spec.split("/")) != 3:
        raise SystemExit(f"--tiles {text!r}: give LABEL=F/DQ/DKV, each outer,inner,warps,stages")
    try:
        return label, parse_tiles(spec)
    except ValueError as e:
        raise SystemExit(f"--tiles {text!r}: {e}") from None


def pick_impls(names, tilings) -> list[str]:
    """The grid's implementations in its order: cudnn, flash, each tiling as
    "flash LABEL", xla, mosaic; `names` (default all but mosaic) keeps some,
    a tiling by its label."""
    labels = [label for label, _ in tilings]
    every = ["cudnn", "flash", *(f"flash {label}" for label in labels), "xla", "mosaic"]
    if not names:
        return every[:-1]
    unknown = [n for n in names if n not in IMPLS and n not in labels]
    if unknown:
        raise SystemExit(f"--impls: {', '.join(unknown)} unknown; choose from "
                         f"{', '.join(IMPLS + tuple(labels))}")
    return [i for i in every if i in names or i.removeprefix("flash ") in names]


def grid(seqs, tokens, steps, cap_s, tilings=(), impls=None, rates=(0.0, 0.1),
         layouts=LAYOUTS, dtype=None, flash_tiles=None, on_row=None,
         tuning_budget_s=None) -> list[dict]:
    """The grid's rows, each printed as measured; returns them as records' rows.
    `flash_tiles`: the plain flash rows' model.attention_tiles value ('table',
    'F/DQ/DKV'; default: timed on the card, kjax/model/flash/tuning.py, for at
    most `tuning_budget_s` per signature, default its BUDGET_S)."""
    import jax
    import jax.numpy as jnp
    from kjax.model import dropout_hash
    from kjax.model.flash import tuning as flash_tuning
    from kjax.model.flash.tiles import format_tiles
    if tuning_budget_s is not None:
        flash_tuning.BUDGET_S = tuning_budget_s
    backend, start = jax.default_backend(), time.perf_counter()
    dtype = jnp.dtype(dtype or (jnp.float32 if backend == "cpu" else jnp.bfloat16))
    h, d, words = 12, 64, dropout_hash.key_words(jax.random.key(0))
    impls = impls or pick_impls(None, tilings)
    rows = []
    print("| impl | attention dropout | B | seq | batch | fwd+bwd ms (median) | ÷ same impl, "
          "no dropout, no B | ÷ cuDNN | tiles |\n|---|---|---|---|---|---|---|---|---|",
          flush=True)
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
        base, cudnn = {}, None
        for impl in impls:
            for rate in rates:
                for layout in layouts:
                    if time.perf_counter() - start > cap_s:
                        print(f"(stopped: --cap {cap_s:.0f} s reached)", flush=True)
                        return rows
                    head = f"| {impl} | {rate} | {layout} | {s} | {b} |"
                    if impl in ("cudnn", "mosaic") and (layout != "none" or rate):
                        if impl == "cudnn" and rate and layout == "none" and backend == "gpu":
                            # On an H200 (jax 0.11.2) cuDNN's dropout aborted the process
                            # (cuda_dnn.cc: Check failed: local_device_ordinal.has_value()),
                            # taking the rest of the grid with it.
                            print(f"{head} not run: cuDNN's dropout aborts the process "
                                  "(jax 0.11.2, H200) | | | |", flush=True)
                        continue   # neither takes Eq. 1's B; Mosaic's has no dropout
                    if impl in ("cudnn", "mosaic") and backend != "gpu":
                        print(f"{head} skipped: needs a GPU | | | |", flush=True)
                        continue
                    if impl.startswith("flash") and backend == "cpu" and s > 256:
                        continue   # interpret mode: an emulator, no speed
                    tiles = dict(tilings).get(impl.partition(" ")[2])
                    if tiles is not None:
                        from kjax.model.flash.tiles import fit
                        tiles = fit(tiles, s)
                    fixed = flash_tiles
                    if impl == "flash" and fixed is None and backend == "gpu":
                        # Triton's tiles: chosen before the trace (flash/tuning.py)
                        fixed = format_tiles(flash_tuning.choose(flash_tuning.Call(
                            b, s, h, d, dtype.name, rate,
                            "none" if layout == "none" else "pairs")))
                    fn = jax.jit(jax.value_and_grad(
                        _grid_loss(impl, rate, valid, words, tiles, fixed), (0, 1, 2)))
                    # Mosaic's kernel declares its buffers float16: bf16 fails to lower
                    args = (q, k, v) if impl != "mosaic" else \
                        tuple(x.astype(jnp.float16) for x in (q, k, v))
                    try:
                        jax.block_until_ready(fn(*args, shakes[layout]))
                        times = []
                        for _ in range(steps):
                            t = time.perf_counter()
                            jax.block_until_ready(fn(*args, shakes[layout]))
                            times.append(time.perf_counter() - t)
                    except Exception as e:  # noqa: BLE001  a row that fails says why, the grid goes on
                        print(f"{head} failed: {type(e).__name__}: "
                              f"{str(e).splitlines()[0][:120] if str(e) else ''} | | | |",
                              flush=True)
                        continue
                    ms = 1e3 * float(np.median(times))
                    if not rate and layout == "none":
                        base[impl] = ms
                    cudnn = ms if impl == "cudnn" else cudnn
                    ratios = {"vs_plain": ms / base[impl] if impl in base else None,
                              "vs_cudnn": ms / cudnn if cudnn else None}
                    used = _tiles_used(impl, tiles, fixed)
                    print(f"{head} {ms:.2f} | " + " | ".join(
                        "–" if x is None else f"{x:.2f}×" for x in ratios.values())
                        + f" | {used or ''} |", flush=True)
                    row = {"row": f"{impl}, attention dropout {rate}, B {layout}",
                           "shape": {"seq": s, "batch": b, "heads": h, "head_dim": d,
                                     "dtype": args[0].dtype.name},
                           "figures": {"ms": round(ms, 3), **{k: round(x, 3) for k, x in
                                                              ratios.items() if x is not None}}}
                    if used:
                        row["tiles"] = used
                    rows.append(row)
                    if on_row:
                        on_row(row)
    return rows


def _tiles_used(impl, tiles, flash_tiles) -> str | None:
    """The tiles a flash row ran: its --tiles tiling, else the fixed or chosen
    `flash_tiles` (on a GPU: timed there by flash_tuning.choose)."""
    from kjax.model.flash.tiles import format_tiles
    if tiles is not None:
        return format_tiles(tiles)
    return flash_tiles if impl == "flash" else None


def _grid_loss(impl, rate, valid, words, tiles=None, flash_tiles=None):
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
        elif impl == "mosaic":
            from jax.experimental.pallas.ops.gpu import attention_mgpu
            out = attention_mgpu.attention(q, k, v, attention_mgpu.TuningConfig(**MOSAIC_TILES))
        elif tiles is not None:    # one layer, no mesh: the kernel itself, tiled as asked
            from kjax.model.flash.attention import flash_attention
            out = flash_attention(q, k, v, valid, shake=shake, bf=0.5, dropout_rate=rate,
                                  dropout_words=words, tiles=tiles,
                                  interpret=jax.default_backend() == "cpu")
        elif impl == "flash":
            fixed = () if flash_tiles is None else (("*", flash_tiles),)
            out = fused_attention("flash", q, k, v, valid, shake=shake, bf=0.5, dropout=drop,
                                  tiles=fixed)
        else:
            hashed = None if drop is None else (
                lambda p: dropout_hash.dropout(p, words, rate))
            out = explicit_attention(q, k, v, valid, shake=shake, bf=0.5, dropout=hashed,
                                     logits_dtype=q.dtype)[0]
        return out.astype(jnp.float32).sum()
    return loss
