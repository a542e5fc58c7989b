"""Multi-hot MLM losses: METHODS §2.4 Eq. 7–9 and the Table 14 ablations."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kjax.losses.multihot import (get_multihot_loss, multihot_accuracy, multihot_bce,
                                  multihot_softmax_ce, multihot_summed_ce)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# Slot 0: targets {1, 3}, n = 2; token 1 is already above 1/n (dropped by Eq. 8).
# Slot 1: targets {0, 2, 4} written as [0, 2, 2, 4] plus a masked-out id 1:
#         the duplicate must not raise n to 4, the masked id must not count.
# Slot 2: padding (weight 0, no targets).
LOGITS = np.array([[0.0, 2.0, 0.5, 0.1, -1.0],
                   [1.0, 0.0, 0.0, 0.0, 0.0],
                   [5.0, -3.0, 2.0, 0.0, 1.0]], np.float32)
IDS = np.array([[1, 3, 0, 0, 0], [0, 2, 2, 4, 1], [0, 0, 0, 0, 0]], np.int32)
MASK = np.array([[1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [0, 0, 0, 0, 0]], bool)
WEIGHTS = np.array([1.0, 3.0, 0.0], np.float32)


def hand_eq9():
    """Eq. 7–9 computed by hand for the example above."""
    s0, s1 = softmax(LOGITS[0].astype(np.float64)), softmax(LOGITS[1].astype(np.float64))
    assert s0[1] > 1 / 2 > s0[3]                      # the example drops token 1
    assert s1[0] > 1 / 3 > s1[2] == s1[4]             # ... and token 0 here
    loss0 = -(np.log(s0[3]) - np.log(1 / 2))          # one target left: mean of one
    loss1 = -((np.log(s1[2]) + np.log(3)) + (np.log(s1[4]) + np.log(3))) / 2
    return np.array([loss0, loss1, 0.0]), (loss0 * 1 + loss1 * 3) / 4


def test_eq9_matches_hand_computation():
    per_expected, loss_expected = hand_eq9()
    loss, per = multihot_softmax_ce(LOGITS, IDS, MASK, WEIGHTS)
    np.testing.assert_allclose(per, per_expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss, loss_expected, rtol=1e-5)
    jitted, _ = jax.jit(multihot_softmax_ce)(LOGITS, IDS, MASK, WEIGHTS)
    np.testing.assert_allclose(jitted, loss, rtol=1e-6)


def test_eq9_gradient_is_analytic_and_matches_finite_differences():
    # loss_pos = −(1/m) Σ_{i∈U} (log S_i + log n) over the m unreached targets U,
    # so ∂loss_pos/∂z_j = S_j − [j ∈ U]/m; the slots are weighted 1:3 of 4.
    s = softmax(LOGITS.astype(np.float64))
    expected = np.zeros_like(s)
    expected[0] = (s[0] - np.eye(5)[3]) * 1 / 4
    expected[1] = (s[1] - (np.eye(5)[2] + np.eye(5)[4]) / 2) * 3 / 4
    grad = jax.grad(lambda z: multihot_softmax_ce(z, IDS, MASK, WEIGHTS)[0])(jnp.asarray(LOGITS))
    np.testing.assert_allclose(grad, expected, atol=1e-6)

    def loss64(z):
        return float(multihot_softmax_ce(z.astype(np.float32), IDS, MASK, WEIGHTS)[0])
    eps = 1e-2
    for j in range(5):
        step = np.zeros_like(LOGITS)
        step[0, j] = eps
        numeric = (loss64(LOGITS + step) - loss64(LOGITS - step)) / (2 * eps)
        assert abs(numeric - expected[0, j]) < 2e-3, (j, numeric, expected[0, j])


def test_eq9_all_targets_reached_or_none_gives_zero_loss_and_gradient():
    # Two equal targets with everything else at −1e9 (or −inf): S = 1/2 each,
    # so l = 0 for both, Σ ny = 0. Slot 1 has no valid targets at all.
    logits = jnp.array([[0.0, 0.0, -1e9, -1e9], [0.0, 0.0, -jnp.inf, -jnp.inf],
                        [3.0, 1.0, 0.0, 2.0]])
    ids = jnp.array([[0, 1], [0, 1], [2, 3]])
    mask = jnp.array([[True, True], [True, True], [False, False]])
    weights = jnp.ones(3)
    loss, per = multihot_softmax_ce(logits, ids, mask, weights)
    grad = jax.grad(lambda z: multihot_softmax_ce(z, ids, mask, weights)[0])(logits)
    assert float(loss) == 0.0 and np.all(np.asarray(per) == 0.0)
    assert np.all(np.isfinite(grad)) and np.all(np.asarray(grad) == 0.0)
    # Σw = 0 is also safe.
    zero, _ = multihot_softmax_ce(logits, ids, mask, jnp.zeros(3))
    assert float(zero) == 0.0


def test_eq9_without_drop_out_is_mean_ce_minus_log_n():
    # With every target below 1/n nothing drops out, and Eq. 9 reduces to
    # (Σ_i −log S_i)/n − log n = summed CE / n − log n, never negative.
    rng = np.random.default_rng(0)
    ids = np.stack([rng.choice(11, size=3, replace=False) for _ in range(6)])
    logits = rng.normal(size=(6, 11)).astype(np.float32)
    np.put_along_axis(logits, ids, np.take_along_axis(logits, ids, 1) - 3.0, 1)
    mask = np.ones((6, 3), bool)
    assert np.all(np.take_along_axis(softmax(logits), ids, 1) < 1 / 3)
    _, eq9 = multihot_softmax_ce(logits, ids, mask, np.ones(6))
    _, summed = multihot_summed_ce(logits, ids, mask, np.ones(6))
    np.testing.assert_allclose(eq9, np.asarray(summed) / 3 - np.log(3), rtol=1e-5)
    assert np.all(np.asarray(eq9) > 0)


def dense_targets():
    y = np.zeros(LOGITS.shape)
    for row in range(len(IDS)):
        y[row, IDS[row][MASK[row]]] = 1.0
    return y


def test_bce_matches_numpy_reference():
    x, y = LOGITS.astype(np.float64), dense_targets()
    per_expected = (np.logaddexp(0, x) - x * y).mean(-1)
    loss, per = multihot_bce(LOGITS, IDS, MASK, WEIGHTS)
    np.testing.assert_allclose(per, per_expected, rtol=1e-5)
    np.testing.assert_allclose(loss, (per_expected[0] + 3 * per_expected[1]) / 4, rtol=1e-5)


def test_summed_ce_matches_numpy_reference():
    log_s = np.log(softmax(LOGITS.astype(np.float64)))
    per_expected = -(log_s * dense_targets()).sum(-1)
    loss, per = multihot_summed_ce(LOGITS, IDS, MASK, WEIGHTS)
    np.testing.assert_allclose(per, per_expected, rtol=1e-5)
    np.testing.assert_allclose(loss, (per_expected[0] + 3 * per_expected[1]) / 4, rtol=1e-5)


def test_loss_switch_and_bfloat16_logits():
    assert get_multihot_loss("eq9") is multihot_softmax_ce
    assert get_multihot_loss("bce") is multihot_bce
    assert get_multihot_loss("summed_ce") is multihot_summed_ce
    with pytest.raises(ValueError, match="eq9"):
        get_multihot_loss("focal")
    loss16, _ = multihot_softmax_ce(jnp.asarray(LOGITS, jnp.bfloat16), IDS, MASK, WEIGHTS)
    assert loss16.dtype == jnp.float32
    np.testing.assert_allclose(loss16, hand_eq9()[1], rtol=2e-2)


def test_accuracy_needs_the_top_n_to_equal_the_target_set():
    logits = np.array([[0.0, 3.0, 0.5, 2.0, -1.0],     # top-2 {1, 3} = targets  → right
                       [0.0, 3.0, 2.5, 2.0, -1.0],     # top-2 {1, 2} ≠ {1, 3}   → wrong
                       [0.0, 0.0, 0.0, 0.0, 9.0],      # one target, argmax      → right
                       [9.0, 0.0, 0.0, 0.0, 0.0]],     # no targets              → not counted
                      np.float32)
    ids = np.array([[3, 1, 1], [1, 3, 0], [4, 4, 0], [0, 0, 0]])
    mask = np.array([[1, 1, 1], [1, 1, 0], [1, 1, 0], [0, 0, 0]], bool)
    accuracy, correct = multihot_accuracy(logits, ids, mask, np.ones(4))
    assert list(np.asarray(correct)) == [True, False, True, False]
    np.testing.assert_allclose(accuracy, 2 / 3, rtol=1e-6)
    weighted, _ = multihot_accuracy(logits, ids, mask, np.array([0.0, 1.0, 1.0, 1.0]))
    np.testing.assert_allclose(weighted, 1 / 2, rtol=1e-6)
