"""The attention-dropout keep bits by key pairs (kjax/model/dropout_hash.py):
one hash decides two neighbouring keys through 16-bit lanes. The effective
rate, the three ways of computing the same bits (per entry, per tile, per
call), the lanes' independence, and the kernel's tiles against the explicit
path's mask at every offset."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kjax.model import dropout_hash

WORDS = dropout_hash.key_words(jax.random.key(11))


def corr(a, b):
    return float(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1])


@pytest.mark.parametrize("rate", [0.0, 0.05, 0.1, 0.15, 1 / 3, 0.5, 0.9, 0.99999])
def test_effective_rate_is_the_configured_one(rate):
    """16-bit lanes: the rate is t / 2¹⁶, within 2⁻¹⁷ of the configured one
    (the bound asked is 1e-3; 8-bit lanes would miss it at 0.1: 26/256)."""
    eff = dropout_hash.effective_rate(rate)
    assert abs(eff - rate) <= 2 ** -17 and eff < 1
    assert dropout_hash.keep_scale(rate) == pytest.approx(1 / (1 - eff), rel=1e-12)
    assert abs(round(0.1 * 256) / 256 - 0.1) > 1e-3        # why not 8-bit lanes
    assert dropout_hash.threshold(0.1) == 6554


def test_rate_out_of_range_is_refused():
    for rate in (-0.1, 1.0):
        with pytest.raises(ValueError, match=f"rate {rate} is not in"):
            dropout_hash.threshold(rate)


@pytest.mark.parametrize("seq", [64, 37])
def test_per_entry_per_tile_and_per_call_bits_agree(seq):
    """`keep` (one hash per entry: Mosaic), `keep_tile` (one per key pair,
    lanes interleaved: Triton) and `keep_mask` (the explicit path) are the same bits."""
    b, h = 2, 3
    mask = np.asarray(dropout_hash.keep_mask(WORDS, (b, h, seq, seq), 0.3))
    plane = 1 * h + 2                                        # example 1, head 2
    seed = dropout_hash.plane_seed(WORDS[0], WORDS[1], jnp.int32(plane))
    rows = jnp.arange(seq, dtype=jnp.int32)[:, None]
    cols = jnp.arange(seq, dtype=jnp.int32)[None, :]
    np.testing.assert_array_equal(dropout_hash.keep(seed, rows, cols, seq, 0.3), mask[1, 2])
    for q0, k0, bq, bk in ((0, 0, 8, 16), (8, 16, 8, 8), (16, 30, 4, 6)):
        if k0 + bk <= seq and q0 + bq <= seq:
            tile = dropout_hash.keep_tile(seed, q0, k0, bq, bk, seq, 0.3)
            np.testing.assert_array_equal(tile, mask[1, 2, q0:q0 + bq, k0:k0 + bk])


def test_two_keys_per_hash_two_lanes():
    """Keys 2j and 2j + 1 are decided by one hash's high and low 16 bits."""
    seed = dropout_hash.plane_seed(WORDS[0], WORDS[1], jnp.int32(0))
    h = np.asarray(dropout_hash.pair_hash(seed, jnp.int32(3), jnp.arange(4, dtype=jnp.int32),
                                          8)).astype(np.int64) & 0xFFFFFFFF
    keep = np.asarray(dropout_hash.keep(seed, jnp.int32(3), jnp.arange(8, dtype=jnp.int32), 8,
                                        0.5))
    t = dropout_hash.threshold(0.5)
    np.testing.assert_array_equal(keep[0::2], (h >> 16) >= t)
    np.testing.assert_array_equal(keep[1::2], (h & 0xFFFF) >= t)


def test_keep_bits_statistics_by_pairs():
    """Keep fraction 1 − effective rate; no correlation between the two keys of
    a pair (one hash's lanes), between neighbouring pairs, rows, heads,
    examples, layers or steps beyond sampling noise (|r| of n Bernoulli pairs
    has std 1/sqrt(n): bounds at ~5 std)."""
    b, h, s, rate = 4, 4, 128, 0.1
    step = lambda i: jax.random.split(jax.random.fold_in(jax.random.key(0), i), 2)  # noqa
    m = np.asarray(dropout_hash.keep_mask(dropout_hash.key_words(step(0)[0]), (b, h, s, s),
                                          rate))
    n = m.size
    assert abs(m.mean() - (1 - dropout_hash.effective_rate(rate))) < 5 * np.sqrt(0.09 / n)
    bound = 5 / np.sqrt(n / 2)
    assert abs(corr(m[..., 0::2], m[..., 1::2])) < bound          # the lanes of one hash
    assert abs(corr(m[..., 1:-1:2], m[..., 2::2])) < bound        # neighbouring pairs
    assert abs(corr(m[..., :-1, :], m[..., 1:, :])) < 5 / np.sqrt(n)  # rows q, q + 1
    assert abs(corr(m[:, :-1], m[:, 1:])) < 5 / np.sqrt(n)            # heads
    assert abs(corr(m[:-1], m[1:])) < 5 / np.sqrt(n)                  # examples
    # both lanes keep at the rate, and a dropped even key says nothing of the odd one
    even, odd = m[..., 0::2], m[..., 1::2]
    assert abs(even.mean() - odd.mean()) < 5 * np.sqrt(0.09 / (n / 2)) * 2
    assert abs(odd[~even].mean() - odd[even].mean()) < 5 * np.sqrt(0.09 / (n * rate / 2))
    for other in (step(0)[1], step(1)[0]):                           # layer 1; step 1
        m2 = dropout_hash.keep_mask(dropout_hash.key_words(other), (b, h, s, s), rate)
        assert abs(corr(m, m2)) < 5 / np.sqrt(n)
