"""Building blocks shared by the encoder and its heads: the parameter-creating
layers and the GELU. Every parameter gets logical axis names here;
kjax.parallel maps them. LayerNorms and dense layers carry biases in the
BERT recipe only (`EncoderConfig.use_bias`; the modern recipe is bias-free)."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from kjax.model import dropout_hash
from kjax.model.config import EncoderConfig


def kernel_init(config: EncoderConfig, axes: tuple[str, ...]):
    init = nn.initializers.truncated_normal(config.initializer_range)
    return nn.with_logical_partitioning(init, axes)


def zeros_init(axes: tuple[str, ...]):
    return nn.with_logical_partitioning(nn.initializers.zeros_init(), axes)


def layer_norm(cfg: EncoderConfig, name: str) -> nn.LayerNorm:
    return nn.LayerNorm(
        epsilon=cfg.layer_norm_eps, use_bias=cfg.use_bias, dtype=cfg.compute_dtype,
        param_dtype=cfg.weight_dtype,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones_init(), ("embed",)),
        bias_init=zeros_init(("embed",)), name=name)


def dense(cfg: EncoderConfig, features: int, axes: tuple[str, str | None], name: str) -> nn.Dense:
    return nn.Dense(features, use_bias=cfg.use_bias, dtype=cfg.compute_dtype,
                    param_dtype=cfg.weight_dtype, kernel_init=kernel_init(cfg, axes),
                    bias_init=zeros_init(axes[1:]), name=name)


class Dropout(nn.Module):
    """Hidden dropout whose bits are a hash of (the call's key, global example,
    position, feature) (kjax/model/dropout_hash.py), not a draw over the
    batch's shape as flax's nn.Dropout: the step's result does not depend on
    how its batch is split into microbatches or over devices. `examples` [b]:
    each row's global example index (None: 0..b-1)."""
    rate: float

    @nn.compact
    def __call__(self, x, deterministic: bool, examples=None):
        if deterministic or self.rate == 0:
            return x
        words = dropout_hash.key_words(self.make_rng("dropout"))
        return dropout_hash.hidden_dropout(x, words, self.rate, examples)


# Python floats: weakly typed, so they never promote x's dtype.
_SQRT_HALF, _INV_SQRT_2PI = float(np.sqrt(0.5)), float(1.0 / np.sqrt(2.0 * np.pi))


@jax.custom_jvp
def gelu(x):
    """Exact GELU, x·Φ(x) with Φ(x) = (1 + erf(x/√2))/2 (BERT's and PyTorch's
    `gelu`; METHODS §4). Not `jax.nn.gelu(approximate=False)`, whose erfc
    form XLA expands into both of erfc's branches plus an exp and divides
    in f32, and whose autodiff keeps three [tokens, ffn] tensors for the
    backward (docs/PERFORMANCE.md, "What decides speed: the GELU"). Here the
    forward computes Φ and φ once in f32 and the backward keeps one tensor,
    the derivative Φ(x) + x·φ(x). Same
    values to f32 rounding (tests/test_model.py)."""
    return _gelu_and_slope(x)[0]


def _gelu_and_slope(x):
    f = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    cdf = 0.5 + 0.5 * jax.lax.erf(f * _SQRT_HALF)
    slope = cdf + f * (_INV_SQRT_2PI * jnp.exp(-0.5 * f * f))
    return (f * cdf).astype(x.dtype), slope.astype(x.dtype)


@gelu.defjvp
def _gelu_jvp(primals, tangents):
    y, slope = _gelu_and_slope(primals[0])
    return y, slope * tangents[0]
