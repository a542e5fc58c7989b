"""Attention-dropout keep bits as a pure function of (key, example, head, query, key).

One definition of the regulariser, whichever path runs: the Pallas kernel
(kjax/model/flash_shake.py) recomputes these bits per tile in its forward and
both backward kernels and never stores them; the explicit path
(kjax/model/attention.py) computes the same bits over [b, h, q, k] in XLA.
So `model.attention_impl` may switch paths without changing a run, and a
resumed run draws the same masks: the key is the layer's
`make_rng("dropout")`, itself a function of (seed, step, layer) alone
(kjax/train/step.py), and nothing else enters (no host counter, no state).

The hash is counter based (like Philox, much cheaper): two rounds of
MurmurHash3's 32-bit finaliser (`fmix32`, a bijection with full avalanche)
make a seed per (example, head) plane from the key's words; within a plane
the linear index q·seq + k, spread by the golden-ratio multiplier and offset
by that seed, goes through fmix32's first four steps, and the top 31 bits
of the result decide:

    plane  = example · heads + head        (global indices: under shard_map
                                            each shard adds its offset, so a
                                            mask never depends on the mesh)
    seed_p = fmix32(fmix32(plane ⊕ k0) ⊕ k1)
    x      = (q · seq + k) · 0x9E3779B9 + seed_p
    x      = (x ⊕ x >>> 16) · 0x85EBCA6B
    bits   = (x ⊕ x >>> 13) · 0xC2B2AE35   (fmix32 without its last x ⊕ x >>> 16)
    keep   = bits >>> 1  ≥  round(rate · 2³¹)

fmix32's last step folds the high half into the low half; the decision reads
the high bits, which the second multiply has already mixed from every input
bit, so that step is skipped (since 2026-11-27: the kernels' PTX then holds
16–21 % fewer instructions for dropout; a run resumed across that change
draws other masks from then on). The index is a row term plus a column term,
each computed once per row or column of a tile, not per entry. Every step is
a bijection and the golden-ratio multiplier is odd, so inside a plane (seq ≤
46340) no two entries share a hash input: per entry about nine integer
operations where threefry's bernoulli spends ~40. Everything is int32 with
wrapping multiplies and logical shifts, the same bits on XLA (CPU, GPU,
TPU), Triton and Mosaic. `broadcast` (model.attention_dropout_broadcast)
fixes plane = 0: one mask per (layer, step) shared by every example and
head, HF Flax BERT's recipe, a different regulariser.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def _int32(c: int) -> np.int32:
    return np.array(c, np.uint32).view(np.int32)[()]


FMIX_1, FMIX_2, GOLDEN = _int32(0x85EBCA6B), _int32(0xC2B2AE35), _int32(0x9E3779B9)


def _shr(x, n: int):
    return lax.shift_right_logical(x, jnp.full_like(x, n))


def fmix32(x):
    """MurmurHash3's finaliser on int32 bits (multiplies wrap, shifts are logical)."""
    x = x ^ _shr(x, 16)
    x = x * FMIX_1
    x = x ^ _shr(x, 13)
    x = x * FMIX_2
    return x ^ _shr(x, 16)


def threshold(rate: float) -> int:
    """Entries whose 31 hash bits fall below this are dropped: P = rate (to 2⁻³¹)."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"attention dropout rate {rate} is not in [0, 1)")
    return int(round(rate * 2 ** 31))


def key_words(key) -> jax.Array:
    """int32 [2] from a JAX key of any generator (threefry: its 2 words; rbg:
    its 4 folded to 2), the k0, k1 of the hash."""
    words = lax.bitcast_convert_type(jax.random.key_data(key).reshape(-1).astype(jnp.uint32),
                                     jnp.int32)
    k0, k1 = words[0], words[1]
    for i in range(2, words.shape[0], 2):   # rbg: fold the other words in
        k0 = fmix32(k0 ^ words[i])
        k1 = fmix32(k1 ^ words[i + 1])
    return jnp.stack([k0, k1])


def plane_seed(k0, k1, plane):
    """The seed of (example, head) plane(s); int32 operands broadcast."""
    return fmix32(fmix32(plane ^ k0) ^ k1)


def keep(seed, rows, cols, seq: int, rate: float):
    """True where entry (query `rows`, key `cols`) of the plane(s) whose
    `seed` is given survives dropout at `rate`; int32 operands broadcast: give
    rows as [.., q, 1] and cols as [.., 1, k] and each index term is computed
    once per row or column ((q·seq + k)·G + seed = (q·seq·G + seed) + k·G mod 2³²)."""
    x = (rows * np.int32(seq) * GOLDEN + seed) + cols * GOLDEN
    x = (x ^ _shr(x, 16)) * FMIX_1
    x = (x ^ _shr(x, 13)) * FMIX_2      # fmix32 but its last step: the high bits decide
    return _shr(x, 1) >= np.int32(threshold(rate))


def keep_mask(words, shape, rate: float, broadcast: bool = False):
    """Boolean [b, h, q, k] keep bits of a whole attention call (explicit path)."""
    b, h, q, k = shape
    plane = jnp.int32(0) if broadcast else (
        jnp.arange(b, dtype=jnp.int32)[:, None, None, None] * np.int32(h)
        + jnp.arange(h, dtype=jnp.int32)[None, :, None, None])
    seed = plane_seed(words[0], words[1], plane)
    rows = jnp.arange(q, dtype=jnp.int32)[:, None]
    cols = jnp.arange(k, dtype=jnp.int32)[None, :]
    return jnp.broadcast_to(keep(seed, rows, cols, k, rate), shape)


def dropout(probs, words, rate: float, broadcast: bool = False):
    """α [b, h, q, k] → keep·α/(1 − rate), as flax's nn.Dropout scales."""
    mask = keep_mask(words, probs.shape, rate, broadcast)
    return jnp.where(mask, probs / jnp.asarray(1.0 - rate, probs.dtype), jnp.zeros_like(probs))
