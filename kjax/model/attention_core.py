"""Which attention implementation runs, and the masks and B layouts they share.

`model.attention_impl` picks, per call of SelfAttention:

    xla          the explicit path in kjax/model/attention.py: scores, Eq. 1,
                 mask, softmax, dropout, α·V, line by line (the reference);
    dot_product  `jax.nn.dot_product_attention` (XLA on CPU/TPU, cuDNN on GPU
                 for bf16/fp16) when the call has no Eq. 1 and no attention
                 dropout, else xla;
    flash        the Pallas kernel of kjax/model/flash/attention.py, Eq. 1 and
                 attention dropout inside the online softmax (CPU: Pallas'
                 interpret mode, slow, for tests and debugging);
    auto         (the default) on GPU: for a call with Eq. 1, attention
                 dropout or a local window, flash if `GPU_FLASH_FASTER` says a
                 GPU measured the kernel faster for each feature the call has,
                 else xla (dropout, Eq. 1) or cuDNN (a window alone); cuDNN
                 (dot_product) for a call with none of them. On CPU and TPU: xla.

The rule follows measurements, not expectations: on CPU XLA's form of
dot_product_attention is the same algorithm as the explicit path with extra
mask plumbing, and TPU runs the same XLA code. On an H200 (measured with jax 0.11.2,
docs/PERFORMANCE.md, "What decides speed: attention paths") the BERT-base
step with attention dropout in the kernel took 0.84× the explicit path's
time, with pairs B and dropout 0.86×, and the modern_base step on the kernel
0.86× its step on cuDNN, whose mask as a bias computes every key of a local
layer where the kernel skips the blocks outside the window; without any of
these features cuDNN stays ahead of the kernel (1.3× at seq 512–2048). On
TPU the kernel goes through Mosaic, on v2/v3 with its products' operands
widened to fp32 (their Mosaic refuses bf16 ones; unmeasured there, so
`auto` stays on xla: docs/TPU.md §15).

Whatever the setting, a call that needs the attention weights themselves
(`return_analysis`: α per head) runs the explicit path, and so does a call
with attention dropout under dot_product (cuDNN's dropout is not a function
of (seed, step): kjax/model/dropout_hash.py). Attention dropout draws the
same keep bits on the explicit and flash paths (dropout_hash), so switching
between them does not change a run's masks.

Masks follow `jax.nn.dot_product_attention` (True attends): the padding mask
over keys [b, k], optional segment ids [b, s] (packed documents: a query sees
only its own segment) and an optional local window w (|q − k| ≤ w // 2,
ModernBERT's 128-token local attention). A query row with no key to attend
to is undefined (kjax never reads one: it is a padded position).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from kjax.config.platform import platform
from kjax.model.config import ATTENTION_IMPLS as IMPLS
from kjax.model.flash import MASK_VALUE, choose_tiles, flash_calls, sharded_flash_attention

__all__ = ["IMPLS", "MASK_VALUE", "choose_flash_tiles", "choose_impl", "dense_shake",
           "fused_attention", "logits_mask", "may_run_flash", "tiles_for_steps"]


def dense_shake(shake, seq_len: int):
    """B [b, q, k] from either layout (pairs: each query's key run [start, end))."""
    if not isinstance(shake, dict):
        return shake
    keys = jnp.arange(seq_len)[None, None, :]
    inside = (keys >= shake["key_start"][..., None]) & (keys < shake["key_end"][..., None])
    return jnp.where(inside, shake["weight"].astype(jnp.float32)[..., None], 0.0)


def logits_mask(attention_mask, segment_ids=None, local_window: int | None = None):
    """Boolean [b, 1, q or 1, k], True where a query may attend a key."""
    mask = (attention_mask > 0)[:, None, None, :]
    if segment_ids is not None:
        mask = mask & (segment_ids[:, None, :, None] == segment_ids[:, None, None, :])
    if local_window is not None:
        pos = jnp.arange(attention_mask.shape[-1])
        mask = mask & (jnp.abs(pos[:, None] - pos[None, :]) <= local_window // 2)
    return mask


# Whether a GPU measured the flash kernel faster than the path `auto` would take
# otherwise, per feature of a call: attention dropout and Eq. 1's B against the
# explicit path (BERT-base step, benchmarks/gpu/settle.py), a local window
# against cuDNN (modern_base step, suite part c). `auto` sends a call to the
# kernel when every feature it has says so.
GPU_FLASH_FASTER = {"dropout": True, "shake": True, "local": True}


def choose_impl(impl: str, *, shaking: bool, explicit: bool, dropping: bool = False,
                dtype=jnp.float32, windowed: bool = False) -> str:
    """The path one call takes: "xla", "dot_product" or "flash" (module doc)."""
    if impl not in IMPLS:
        raise ValueError(f"model.attention_impl={impl!r}; choose one of {IMPLS}")
    if explicit or impl == "xla":
        return "xla"
    if impl == "flash":
        return "flash"
    features = [f for f, on in (("dropout", dropping), ("shake", shaking),
                                ("local", windowed)) if on]
    if impl == "auto" and features and platform() == "gpu" and \
            all(GPU_FLASH_FASTER[f] for f in features):
        return "flash"
    if not shaking and not dropping:
        return "dot_product" if impl == "dot_product" or _cudnn(dtype) else "xla"
    return "xla"


def _cudnn(dtype) -> bool:
    return platform() == "gpu" and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16)


def fused_attention(impl: str, q, k, v, attention_mask, *, segment_ids=None,
                    local_window: int | None = None, shake=None, bf=None, dropout=None,
                    tiles=()):
    """q (scaled by 1/sqrt(d)), k, v [b, s, heads, d] → context [b, s, heads, d].
    `dropout`: {"rate", "words", "broadcast", "examples"} (kjax/model/dropout_hash.py),
    flash only;
    `tiles`: model.attention_tiles as (signature, value) pairs (flash_tuning)."""
    if impl == "dot_product" and dropout is None:
        return _dot_product(q, k, v, attention_mask, segment_ids, local_window)
    if impl != "flash":
        raise ValueError(f"fused_attention runs dot_product (no dropout) or flash, not {impl!r}")
    return sharded_flash_attention(q, k, v, attention_mask, segment_ids, local_window, shake,
                                   bf, dropout, tiles)


def _dot_product(q, k, v, attention_mask, segment_ids, local_window):
    if _cudnn(q.dtype):
        # cuDNN has no two-sided window and takes masks as a [b, 1, q, k] bias.
        mask = logits_mask(attention_mask, segment_ids, local_window)
        mask = jnp.broadcast_to(mask, (q.shape[0], 1, q.shape[1], k.shape[1]))
        try:
            return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=1.0,
                                                implementation="cudnn")
        except (ValueError, NotImplementedError, RuntimeError):
            pass   # a shape, dtype or cuDNN version it does not take: XLA below
    window = None if local_window is None else (local_window // 2, local_window // 2)
    return jax.nn.dot_product_attention(q, k, v, mask=logits_mask(attention_mask, segment_ids),
                                        scale=1.0, local_window_size=window,
                                        implementation="xla")


def may_run_flash(impl: str) -> bool:
    """Whether a config's attention calls can reach the flash kernel with tiles
    to choose: on a GPU (Triton is the only target that takes tiles), under
    `flash`, or `auto` once a feature sends calls to the kernel."""
    return platform() == "gpu" and (impl == "flash" or (impl == "auto"
                                                        and any(GPU_FLASH_FASTER.values())))


def choose_flash_tiles(traced_steps, fixed=(), measure=None) -> dict[str, str]:
    """{call signature: tiles} for every flash call the traced steps make
    (`traced_steps`: jaxprs, e.g. `jax.jit(step).trace(...).jaxpr`, traced while
    `may_run_flash`), chosen after the traces have closed
    (kjax/model/flash/tuning.py: the config's fixed tiles, the card's cache,
    else a timing). A run records them in its config before it builds
    anything, so its program has every tile fixed."""
    calls = {c.signature: c for jaxpr in traced_steps for c in flash_calls(jaxpr)}
    return choose_tiles(calls.values(), fixed, measure)


def tiles_for_steps(model_config, trace_steps) -> dict[str, str]:
    """{signature: tiles} of every flash call a run's steps make, for the run
    to fix in its config before it builds them (`kjax train`'s run config,
    `kjax finetune`'s tuner): `trace_steps()` → the steps' jaxprs, traced
    against abstract state (nothing runs), called only where `may_run_flash`
    (elsewhere {}: nothing is traced); the tiles chosen once the traces have
    closed by `choose_flash_tiles`, `model_config.attention_tiles` first."""
    if not may_run_flash(model_config.attention_impl):
        return {}
    return choose_flash_tiles(list(trace_steps()), tuple(model_config.attention_tiles.items()))
