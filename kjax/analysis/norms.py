"""The arithmetic of norm-based attention analysis (METHODS §3, [NORM]).

The attention output of token i is a sum of vectors, one per head h and key j:

    y_i = Σ_h Σ_j α^h_ij f^h(x_j) + b_O,   f^h(x) = (x W_V^h + b_V^h) W_O^h

so the contribution of x_j to y_i is the vector α^h_ij f^h(x_j) (one head) or
Σ_h α^h_ij f^h(x_j) (the whole layer), and its size is the L2 norm.

Per head the norm factorises, α ≥ 0:  ‖α^h_ij f^h_j‖ = α^h_ij ‖f^h_j‖.

For the whole layer the heads' vectors point in different directions, so the
norm does not factorise. Writing a_ij = (α^1_ij … α^H_ij) and the per-key
head Gram matrix G_j[h, h'] = ⟨f^h_j, f^h'_j⟩:

    ‖Σ_h α^h_ij f^h_j‖² = Σ_h Σ_h' α^h_ij α^h'_ij ⟨f^h_j, f^h'_j⟩ = a_ijᵀ G_j a_ij

(bilinearity of the inner product). G costs [keys, heads, heads] instead of
the [queries, keys, hidden] tensor of all weighted vectors.

Everything here takes arrays with any leading axes (layers, batch); the
functions of the first block are jnp-traceable, the statistics below them
run on the host with numpy.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np


# ---- norms (jnp; traced inside the analysis step) --------------------------------------

def fx_norms(fx):
    """‖f^h(x_j)‖: [..., heads, keys, hidden] → [..., heads, keys]."""
    return jnp.sqrt(jnp.sum(jnp.square(fx), axis=-1))


def weighted_norms(alpha, fx_norm):
    """‖α^h_ij f^h_j‖ = α^h_ij ‖f^h_j‖ (α ≥ 0): [..., heads, q, k]."""
    return alpha * fx_norm[..., None, :]


def head_gram(fx):
    """G_j[h, h'] = ⟨f^h_j, f^h'_j⟩: [..., heads, keys, hidden] → [..., keys, heads, heads]."""
    return jnp.einsum("...hkd,...gkd->...khg", fx, fx)


def layer_weighted_norms(alpha, gram):
    """‖Σ_h α^h_ij f^h_j‖ = sqrt(a_ijᵀ G_j a_ij): [..., heads, q, k] → [..., q, k]."""
    squared = jnp.einsum("...hqk,...khg,...gqk->...qk", alpha, gram, alpha)
    return jnp.sqrt(jnp.maximum(squared, 0.0))  # rounding may dip a hair below 0


def layer_fx_norms(gram):
    """‖Σ_h f^h_j‖ (all heads' transformed vectors together): [..., keys]."""
    return jnp.sqrt(jnp.maximum(jnp.sum(gram, axis=(-2, -1)), 0.0))


def analysis_norms(alpha, fx) -> dict:
    """The per-head and whole-layer quantities from the model's α [..., h, q, k]
    and f(x) [..., h, k, hidden]. The whole-layer weight is α averaged over heads."""
    gram = head_gram(fx)
    return {"alpha": alpha, "fx_norm": fx_norms(fx),
            "layer_alpha": jnp.mean(alpha, axis=-3),
            "layer_fx_norm": layer_fx_norms(gram),
            "layer_weighted_norm": layer_weighted_norms(alpha, gram)}


# ---- statistics (numpy, on the host) ---------------------------------------------------

def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n of a 1-D array; tied values share the mean of their ranks."""
    values, inverse, counts = np.unique(np.asarray(x), return_inverse=True, return_counts=True)
    first_rank = np.cumsum(counts) - counts + 1          # rank of each distinct value's first copy
    return (first_rank + (counts - 1) / 2.0)[inverse.ravel()]


def spearman(x, y) -> float:
    """Spearman's ρ (Pearson correlation of average ranks); NaN when fewer than
    two pairs or either side is constant (ρ is undefined there)."""
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} x values but {len(y)} y values")
    if len(x) < 2:
        return float("nan")
    rx, ry = average_ranks(x), average_ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = np.sqrt(np.sum(rx * rx) * np.sum(ry * ry))
    return float(np.sum(rx * ry) / denominator) if denominator > 0 else float("nan")


def coefficient_of_variation(values) -> float:
    """std / mean (population std), NaN for an empty or zero-mean sample."""
    values = np.asarray(values, np.float64).ravel()
    if values.size == 0 or values.mean() == 0:
        return float("nan")
    return float(values.std() / values.mean())


def key_share(weights: np.ndarray, queries, keys) -> np.ndarray:
    """Share of query rows' attention that reaches `keys`, averaged over `queries`:

        mean_{i ∈ queries}  Σ_{j ∈ keys} w_ij / Σ_j w_ij

    `weights` [..., q, k] are α (rows sum to 1: the share *by weight*) or the
    norms ‖α_ij f_j‖ (the share *by norm*). Leading axes are kept."""
    rows = np.asarray(weights, np.float64)[..., np.asarray(queries), :]
    total = rows.sum(axis=-1)
    reached = rows[..., np.asarray(keys)].sum(axis=-1)
    share = np.divide(reached, total, out=np.zeros_like(reached), where=total > 0)
    return share.mean(axis=-1)


def pooled_pairs(alphas, fx_norms_per_text, key_masks):
    """Per text α [L, h, n, n], ‖f‖ [L, h, n] and a key mask [n] → the pooled
    pairs (α_ij, ‖f_j‖) for every query i and masked key j of every text, as
    two arrays [L, h, N] (‖f_j‖ repeated once per query)."""
    xs, ys = [], []
    for alpha, fx_norm, mask in zip(alphas, fx_norms_per_text, key_masks):
        a = alpha[..., mask]                                   # [L, h, n, m]
        f = np.broadcast_to(fx_norm[..., None, mask], a.shape)
        xs.append(a.reshape(*a.shape[:2], -1))
        ys.append(f.reshape(*f.shape[:2], -1))
    return np.concatenate(xs, axis=-1), np.concatenate(ys, axis=-1)


def spearman_per_head(alphas, fx_norms_per_text, key_masks) -> np.ndarray:
    """ρ(α, ‖f(x)‖) per (layer, head) over the pooled pairs of `pooled_pairs`:
    [L, h], NaN where the class never occurs or one side is constant."""
    x, y = pooled_pairs(alphas, fx_norms_per_text, key_masks)
    return np.asarray([[spearman(x[l, h], y[l, h]) for h in range(x.shape[1])]
                       for l in range(x.shape[0])], np.float64).reshape(x.shape[:2])


def cv_per_head(fx_norms_per_text) -> np.ndarray:
    """Coefficient of variation of ‖f^h(x_j)‖ per (layer, head) over every
    token j of every text: [L, h]."""
    pooled = np.concatenate([f for f in fx_norms_per_text], axis=-1)
    return np.asarray([[coefficient_of_variation(pooled[l, h]) for h in range(pooled.shape[1])]
                       for l in range(pooled.shape[0])], np.float64).reshape(pooled.shape[:2])
