"""The attention implementations side by side (kjax/model/attention_core.py).

    python benchmarks/attention.py                       # seq 128, 512, 2048; records
    python benchmarks/attention.py --seqs 128,512 --no-record
    python benchmarks/attention.py --tables time         # only the timing table
    python benchmarks/attention.py --grid --cap 420      # issue 34's grid, rows as measured

Four tables:
  check   the flash kernel (Pallas; interpret mode on CPU) and
          jax.nn.dot_product_attention against the explicit path, fp32:
          largest |difference| of the output and of dq, dk, dv (padding,
          segments, a local window, bf > 0 and < 0, dense and pairs B);
  time    one attention layer, forward + backward (context and the
          gradients of q, k, v), BERT-base heads (12 × 64), batch × seq =
          4096 tokens per call: median seconds and the compiled program's
          peak bytes (memory_analysis: arguments + outputs + temporaries).
          On CPU the flash kernel runs only in interpret mode (an emulator:
          its time is no speed), so its row is timed at the shortest seq
          only; on GPU/TPU it is compiled and timed at every seq, in bf16;
  b       bytes of B per example, dense [seq, seq] float8 vs the pairs
          layout (int32 start, int32 end, float8 weight per position),
          from kjax.shake.matrix's builders;
  step    peak bytes of the compiled train step (fwd + bwd + AdamW) with
          shaking, B dense vs pairs vs none (XLA's buffer assignment).

--grid (issue 34; for a GPU): one layer fwd+bwd at seq 512, 2048, 8192 (batch
× seq = --tokens), bf16, for {cudnn, flash, xla} × {no dropout, attention
dropout 0.1} × {no B, pairs B "pos" (each query boosts keys within ±8 of
itself: few key blocks per query block), pairs B "random" (keys anywhere)}.
cudnn = jax's cuDNN fused attention (its dropout, seeded per executable, is
timed for comparison only: kjax does not use it; it takes no B). Each row is
printed as soon as it is measured; the grid stops after --cap seconds.
`--tiles LABEL=F/DQ/DKV` (repeatable) adds flash rows with that tiling of
the three kernels (benchmarks/flash_tiles.py says which tilings spill).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import _common

MIB = 1 << 20


def ints(text):
    return [int(x) for x in text.split(",")]


def check_rows():
    import jax
    import jax.numpy as jnp
    from kjax.model.attention import explicit_attention
    from kjax.model.attention_core import dense_shake, fused_attention, logits_mask
    from kjax.model.flash_shake import flash_attention
    b, s, h, d = 2, 128, 4, 16
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(b, s, h, d)), jnp.float32) for _ in range(3))
    q = q / np.sqrt(d)
    valid = jnp.asarray(np.arange(s)[None] < np.asarray([[100], [s]]), jnp.int32)
    segments = jnp.asarray(np.repeat([[1, 2, 3, 0], [1, 1, 2, 2]], s // 4, axis=1))
    start = rng.integers(0, s - 3, (b, s))
    pairs = {"key_start": jnp.asarray(start, jnp.int32),
             "key_end": jnp.asarray(start + rng.integers(1, 4, (b, s)), jnp.int32),
             "weight": jnp.asarray(rng.choice([0.0, 0.0, 1.0, 1.5, 2.0], (b, s)), jnp.float32)}
    cases = [("flash", "dense", 0.7, True, None), ("flash", "pairs", -0.4, False, 32),
             ("flash", "pairs", 0.5, True, 32), ("flash", None, 0.0, True, 32),
             ("dot_product", None, 0.0, True, 32)]
    rows = []
    for impl, layout, bf, use_seg, window in cases:
        seg = segments if use_seg else None
        shake = {"dense": dense_shake(pairs, s), "pairs": pairs, None: None}[layout]
        live = np.asarray(jnp.broadcast_to(logits_mask(valid, seg, window), (b, 1, s, s)).any(-1))[:, 0]
        cot = jnp.asarray(rng.normal(size=q.shape), jnp.float32) * live[:, :, None, None]
        if impl == "flash":
            fast = lambda q, k, v: flash_attention(  # noqa: E731
                q, k, v, valid, segment_ids=seg, local_window=window, shake=shake, bf=bf,
                block_q=32, block_k=32, interpret=True)
        else:
            fast = lambda q, k, v: fused_attention(impl, q, k, v, valid, segment_ids=seg,  # noqa
                                                   local_window=window)
        ref = lambda q, k, v: explicit_attention(q, k, v, valid, segment_ids=seg,  # noqa: E731
                                                 local_window=window, shake=shake, bf=bf)[0]
        out = np.abs(np.asarray(fast(q, k, v) - ref(q, k, v)))[live].max()
        grads = [jax.grad(lambda *a: (f(*a) * cot).sum(), (0, 1, 2))(q, k, v) for f in (fast, ref)]
        errs = [float(np.abs(np.asarray(x - y)).max()) for x, y in zip(*grads)]
        scale = max(float(np.abs(np.asarray(g)).max()) for g in grads[1])
        masks = "padding" + (" + segments" if use_seg else "") + (f" + window {window}" if window else "")
        rows.append(f"| {impl} | {layout or '—'} | {bf:+.1f} | {masks} | {out:.1e} | "
                    f"{errs[0]:.1e} / {errs[1]:.1e} / {errs[2]:.1e} | {scale:.2f} |")
    head = ("| impl | B | bf | masks | output max abs diff | dq / dk / dv max abs diff | "
            "max abs grad |\n|---|---|---|---|---|---|---|")
    note = (f"fp32, batch {b}, seq {s}, {h} heads × {d}, blocks 32 (4 × 4 tiles), flash in "
            f"interpret mode; against the explicit path (kjax.model.attention.explicit_attention)"
            f" on the rows that have a key to attend to; cotangent random on those rows.")
    return head + "\n" + "\n".join(rows), note


def time_rows(seqs, tokens, steps, backend):
    import jax
    import jax.numpy as jnp
    dtype = jnp.float32 if backend == "cpu" else jnp.bfloat16
    h, d = 12, 64
    variants = [("xla", None), ("dot_product", None), ("xla", "dense"), ("xla", "pairs"),
                ("flash", None), ("flash", "dense"), ("flash", "pairs")]
    rows = []
    for s in seqs:
        b = max(1, tokens // s)
        rng = np.random.default_rng(0)
        q, k, v = (jnp.asarray(rng.normal(size=(b, s, h, d)) / 4, dtype) for _ in range(3))
        valid = jnp.ones((b, s), jnp.int32)
        start = rng.integers(0, s - 1, (b, s))
        weight = (rng.random((b, s)) < 0.25).astype(np.float32)
        pairs = {"key_start": jnp.asarray(start, jnp.int32),
                 "key_end": jnp.asarray(start + 1, jnp.int32),
                 "weight": jnp.asarray(weight, jnp.float8_e4m3fn)}
        keys = np.arange(s)
        dense = jnp.asarray(np.where((keys >= start[..., None]) & (keys < start[..., None] + 1),
                                     weight[..., None], 0), jnp.float8_e4m3fn)
        compiled = {}
        for impl, layout in variants:
            if impl == "flash" and backend == "cpu" and s != seqs[0]:
                continue
            shake = {"dense": dense, "pairs": pairs, None: None}[layout]
            step = jax.jit(jax.value_and_grad(_layer_loss(impl, valid), (0, 1, 2)))
            peak = _common.peak_bytes(step.lower(q, k, v, shake).compile())
            jax.block_until_ready(step(q, k, v, shake))
            compiled[impl, layout] = (step, shake, peak, [])
        for _ in range(steps):     # rounds alternate the variants: load drift hits all alike
            for step, shake, _, times in compiled.values():
                start_t = time.perf_counter()
                jax.block_until_ready(step(q, k, v, shake))
                times.append(time.perf_counter() - start_t)
        plain = float(np.median(compiled["xla", None][3]))
        for (impl, layout), (_, _, peak, times) in compiled.items():
            label = impl + (" (interpret)" if impl == "flash" and backend == "cpu" else "")
            rows.append(f"| {label} | {layout or 'none'} | {s} | {b} | "
                        f"{1e3 * float(np.median(times)):.1f} | "
                        f"{float(np.median(times)) / plain:.2f}× | {peak / MIB:.0f} |")
    head = ("| impl | Eq. 1 B | seq | batch | fwd+bwd ms (median) | ÷ xla, no B | peak MiB |\n"
            "|---|---|---|---|---|---|---|")
    note = (f"One attention layer (q, k, v → context; value and gradients of q, k, v), "
            f"{h} heads × {d}, {jnp.dtype(dtype).name}, {tokens} tokens per call, bf = 0.5 "
            f"where B is given (a quarter of the queries boost one key); median of {steps} "
            f"rounds (each round calls every variant once) after a warm-up; peak = arguments + outputs + temporaries of the compiled "
            f"call. xla = the explicit path (what `auto` runs on CPU and TPU), dot_product = "
            f"jax.nn.dot_product_attention (`auto`'s choice for unshaken calls on GPU, as "
            f"cuDNN; here its XLA form).")
    return head + "\n" + "\n".join(rows), note


def grid(seqs, tokens, steps, cap_s, tilings=()):
    """Issue 34's grid, one row printed per variant as soon as it is measured;
    `tilings`: (label, (forward, dq, dk/dv) Tiles) timed as flash rows of their own."""
    import jax
    import jax.numpy as jnp
    from kjax.model import dropout_hash
    backend, start = jax.default_backend(), time.perf_counter()
    dtype = jnp.float32 if backend == "cpu" else jnp.bfloat16
    h, d, words = 12, 64, dropout_hash.key_words(jax.random.key(0))
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
                        return
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


def parse_tiling(text: str):
    """LABEL=F/DQ/DKV → (label, (Tiles, Tiles, Tiles))."""
    from kjax.model.flash_tiles import Tiles
    label, _, spec = text.partition("=")
    parts = spec.split("/")
    if not label or len(parts) != 3:
        raise SystemExit(f"--tiles {text!r}: give LABEL=F/DQ/DKV, each outer,inner,warps,stages")
    return label, tuple(Tiles(*(int(x) for x in p.split(","))) for p in parts)


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


def _layer_loss(impl, valid):
    import jax.numpy as jnp
    from kjax.model.attention import explicit_attention
    from kjax.model.attention_core import fused_attention

    def loss(q, k, v, shake):
        if impl == "xla":
            out = explicit_attention(q, k, v, valid, shake=shake, bf=0.5)[0]
        else:
            out = fused_attention(impl, q, k, v, valid, shake=shake, bf=0.5)
        return out.astype(jnp.float32).sum()
    return loss


def b_rows(seqs):
    from ml_collections import ConfigDict
    from kjax.shake.matrix import build_shake_matrix, build_shake_pairs
    cfg = ConfigDict(dict(variant="random", p=0.08, boost_prem=1.0, group3=True,
                          tag_weights={}, position_variant="none"))
    rows = []
    for s in seqs:
        encoded = {"input_ids": np.zeros(s, np.int32), "word_ids": np.arange(s, dtype=np.int32)}
        dense = build_shake_matrix(encoded, s, cfg, np.random.default_rng(0)).nbytes
        pairs = sum(a.nbytes for a in build_shake_pairs(encoded, s, cfg,
                                                        np.random.default_rng(0)).values())
        rows.append(f"| {s} | {dense:,} ({dense / MIB:.2f} MiB) | {pairs:,} ({pairs / 1024:.1f} "
                    f"KiB) | {dense / pairs:.0f}× |")
    head = "| seq | dense B bytes/example | pairs bytes/example | dense ÷ pairs |\n|---|---|---|---|"
    return head + "\n" + "\n".join(rows), ""


def step_rows(shape, seqs, batch):
    rows = []
    for s in seqs:
        base = None
        for layout in ("none", "dense", "pairs"):
            extra = [] if layout == "none" else [
                "--config.model.shake_factor=1.0", "--config.shake.variant=random",
                f"--config.shake.layout={layout}"]
            config = _common.preset_config(shape, s, batch, "bfloat16", extra)
            peak = _common.peak_bytes(_common.lower_train_step(config).compile())
            base = peak if base is None else base
            delta = "—" if layout == "none" else f"{(peak - base) / batch / MIB:+.2f}"
            rows.append(f"| {s} | {layout} | {peak / MIB:.0f} | {delta} |")
    head = ("| seq | B | train step peak MiB | vs no shaking, MiB per example |\n"
            "|---|---|---|---|")
    note = (f"{shape}, batch {batch}, bfloat16 compute, fp32 params + AdamW, the CPU path "
            f"(explicit attention: attention dropout is on in the preset); per-device peak from "
            f"XLA:CPU memory_analysis of the whole train step.")
    return head + "\n" + "\n".join(rows), note


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", default="128,512,2048", help="timing table")
    ap.add_argument("--tokens", type=int, default=4096, help="batch × seq per timed call")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--b-seqs", default="512,1024,8192")
    ap.add_argument("--step-shape", default="uknow_small", choices=sorted(_common.SHAPES))
    ap.add_argument("--step-seqs", default="512,2048")
    ap.add_argument("--step-batch", type=int, default=2)
    ap.add_argument("--tables", default="check,time,b,step")
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--grid", action="store_true", help="issue 34's grid only (printed, "
                    "not recorded)")
    ap.add_argument("--grid-seqs", default="512,2048,8192")
    ap.add_argument("--cap", type=float, default=420, help="--grid: seconds before it stops")
    ap.add_argument("--tiles", action="append", default=[], metavar="LABEL=F/DQ/DKV",
                    help="--grid: flash rows with this tiling too, each kernel's as "
                    "outer,inner,warps,stages (kjax/model/flash_tiles.py), e.g. "
                    "before=128,128,4,2/128,128,4,2/128,128,4,2")
    args = ap.parse_args()
    if args.grid:
        return grid(ints(args.grid_seqs), args.tokens, args.steps, args.cap,
                    [parse_tiling(t) for t in args.tiles])
    import jax
    backend = jax.default_backend()
    tables = args.tables.split(",")
    before = _common.load_average()
    parts = []
    if "check" in tables:
        parts.append(("attention check (interpret mode)", *check_rows()))
    if "time" in tables:
        parts.append(("attention fwd+bwd", *time_rows(ints(args.seqs), args.tokens,
                                                      args.steps, backend)))
    if "b" in tables:
        parts.append(("B per example", *b_rows(ints(args.b_seqs))))
    if "step" in tables:
        parts.append(("train step peak, B dense vs pairs",
                      *step_rows(args.step_shape, ints(args.step_seqs), args.step_batch)))
    for name, table, note in parts:
        note = (note + f" Load average before/after: {before} / {_common.load_average()}.").strip()
        _common.record(name, table, note, args.no_record)


if __name__ == "__main__":
    main()
