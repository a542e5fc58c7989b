"""Attention-dropout keep bits as a pure function of (key, example, head, query, key).

One definition of the regulariser, whichever path runs: the Pallas kernel
(kjax/model/flash/attention.py) recomputes these bits per tile in its forward and
both backward kernels and never stores them; the explicit path
(kjax/model/attention.py) computes the same bits over [b, h, q, k] in XLA.
So `model.attention_impl` may switch paths without changing a run, and a
resumed run draws the same masks: the key is the layer's
`make_rng("dropout")`, itself a function of (seed, step, layer) alone
(kjax/train/step.py), and nothing else enters (no host counter, no state).

The hash is counter based (like Philox, much cheaper), and one hash decides
two neighbouring keys (FlashAttention-2's way: one random word, several
lanes compared against an integer threshold):

    plane  = example · heads + head        (global indices: under shard_map
                                            each shard adds its offset, so a
                                            mask never depends on the mesh)
    seed_p = fmix32(fmix32(plane ⊕ k0) ⊕ k1)
    x      = (q · ⌈seq/2⌉ + ⌊k/2⌋) · 0x9E3779B9 + seed_p
    h      = fmix32(x)                     (MurmurHash3's 32-bit finaliser)
    u      = h >>> 16 for an even key k, h & 0xFFFF for an odd one
    keep   = u ≥ t,   t = round(rate · 2¹⁶),   kept α scaled by 2¹⁶ / (2¹⁶ − t)

Lanes of 16 bits make the rate t / 2¹⁶, within 2⁻¹⁷ (8·10⁻⁶) of the
configured one; lanes of 8 bits would decide four keys per hash but round
the rate to 1/256 (0.1 becomes 26/256 = 0.1016, 1.6·10⁻³ off). fmix32 is a
bijection with full avalanche and the golden-ratio multiplier is odd, so
inside a plane (seq ≤ 92,681) no two key pairs share a hash input. The
index is a row term plus a column term, each computed once per row or column
of a tile, not per entry: about eight integer operations per two keys, plus
a shift or mask and a compare per key (threefry's bernoulli spends ~40 per
key). Everything is int32 with wrapping multiplies and logical shifts, the
same bits on XLA (CPU, GPU, TPU), Triton and Mosaic: a tile computes one
hash per key pair and interleaves the lanes (`keep_tile`) where the
compiler takes that (Triton's join, XLA), or one per key (`keep`, Mosaic).
`broadcast` (model.attention_dropout_broadcast) fixes plane = 0: one mask
per (layer, step) shared by every example and head, HF Flax BERT's recipe,
a different regulariser. docs/METHODS.md and docs/PERFORMANCE.md, "What
decides speed: dropout keep bits" say why these bits.
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


LANE_BITS = 16                      # one 32-bit hash: two keys' lanes
LANE_MASK = (1 << LANE_BITS) - 1


def threshold(rate: float) -> int:
    """A key whose 16-bit lane falls below this is dropped: P = t / 2¹⁶."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"attention dropout rate {rate} is not in [0, 1)")
    return min(int(round(rate * 2 ** LANE_BITS)), 2 ** LANE_BITS - 1)


def effective_rate(rate: float) -> float:
    """The rate the keep bits draw: `rate` to within 2⁻¹⁷."""
    return threshold(rate) / 2 ** LANE_BITS


def keep_scale(rate: float) -> float:
    """1 / (1 − effective rate): kept entries are scaled so E[α·Z] = α exactly."""
    return 2 ** LANE_BITS / (2 ** LANE_BITS - threshold(rate))


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


def pair_hash(seed, rows, pairs, seq: int):
    """The hash of key pairs `pairs` (keys 2j, 2j + 1) of query `rows`; int32
    operands broadcast: rows [.., q, 1] and pairs [.., 1, j] compute each index
    term once per row or column ((q·P + j)·G + seed = (q·P·G + seed) + j·G mod 2³²)."""
    return fmix32((rows * np.int32((seq + 1) // 2) * GOLDEN + seed) + pairs * GOLDEN)


def _lanes(h, rate: float):
    """(keep of the even key, keep of the odd key) from a pair's hash."""
    t = np.int32(threshold(rate))
    return _shr(h, LANE_BITS) >= t, (h & np.int32(LANE_MASK)) >= t


def keep(seed, rows, cols, seq: int, rate: float):
    """True where entry (query `rows`, key `cols`) of the plane(s) whose `seed`
    is given survives dropout at `rate`, one hash per entry (any layout: Mosaic,
    the transposed backward); the same bits as `keep_tile`."""
    h = pair_hash(seed, rows, _shr(cols, 1), seq)
    lane = jnp.where((cols & 1) == 0, _shr(h, LANE_BITS), h & np.int32(LANE_MASK))
    return lane >= np.int32(threshold(rate))


def keep_tile(seed, q0, k0, bq: int, bk: int, seq: int, rate: float):
    """Boolean [bq, bk] keep bits of queries q0.. and keys k0.. (k0 and bk even):
    one hash per key pair, its two lanes interleaved (a join on Triton)."""
    rows = q0 + lax.broadcasted_iota(jnp.int32, (bq, 1), 0)
    pairs = lax.div(k0, 2) + lax.broadcasted_iota(jnp.int32, (1, bk // 2), 1)
    even, odd = _lanes(pair_hash(seed, rows, pairs, seq), rate)
    return jnp.stack([even, odd], axis=-1).reshape(bq, bk)


def example_index(examples, b: int):
    """int32 [b]: the global index of each row — `examples` where the step
    splits its batch into microbatches (kjax/train/accumulation.py), else 0..b-1."""
    return jnp.arange(b, dtype=jnp.int32) if examples is None else examples.astype(jnp.int32)


def keep_mask(words, shape, rate: float, broadcast: bool = False, examples=None):
    """Boolean [b, h, q, k] keep bits of a whole attention call (explicit path);
    `examples` [b]: each row's global example index (None: 0..b-1)."""
    b, h, q, k = shape
    plane = jnp.int32(0) if broadcast else (
        example_index(examples, b)[:, None, None, None] * np.int32(h)
        + jnp.arange(h, dtype=jnp.int32)[None, :, None, None])
    seed = plane_seed(words[0], words[1], plane)
    rows = jnp.arange(q, dtype=jnp.int32)[:, None]
    # One hash per entry, not per pair with the lanes stacked: XLA:GPU writes a
    # stacked mask out as its own kernel and keeps it for the backward, where
    # the select that applies it no longer fuses; per entry the hash fuses into
    # both uses.
    cols = jnp.arange(k, dtype=jnp.int32)[None, :]
    return jnp.broadcast_to(keep(seed, rows, cols, k, rate), shape)


def dropout(probs, words, rate: float, broadcast: bool = False, examples=None):
    """α [b, h, q, k] → keep·α/(1 − effective rate) (flax's nn.Dropout: 1/(1 − rate)),
    the scaling in fp32 (a bf16 1/(1 − rate) would be 0.2 % off)."""
    mask = keep_mask(words, probs.shape, rate, broadcast, examples)
    kept = (probs.astype(jnp.float32) * np.float32(keep_scale(rate))).astype(probs.dtype)
    return jnp.where(mask, kept, jnp.zeros_like(probs))


def hidden_keep_mask(words, shape, rate: float, examples=None):
    """Boolean [b, s, d] keep bits of hidden dropout (embeddings, attention
    output, FFN): the attention hash with plane = global example, row =
    position and the feature pairs as keys. A function of (the layer's key,
    example, position, feature) alone, so a batch split into microbatches, or
    over any number of devices, drops exactly the units the whole batch would."""
    b, s, d = shape
    seed = plane_seed(words[0], words[1], example_index(examples, b)[:, None, None])
    rows = jnp.arange(s, dtype=jnp.int32)[None, :, None]
    cols = jnp.arange(d, dtype=jnp.int32)[None, None, :]
    return keep(seed, rows, cols, d, rate)   # per entry, as keep_mask: fuses into its uses


def hidden_dropout(x, words, rate: float, examples=None):
    """x [b, s, d] → keep·x/(1 − effective rate), the scaling in fp32 as `dropout`."""
    mask = hidden_keep_mask(words, x.shape, rate, examples)
    kept = (x.astype(jnp.float32) * np.float32(keep_scale(rate))).astype(x.dtype)
    return jnp.where(mask, kept, jnp.zeros_like(x))
