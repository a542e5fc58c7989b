"""Parameter-creating building blocks shared by the encoder and its heads.
Every parameter gets logical axis names here; kjax.parallel maps them.
LayerNorms and dense layers carry biases in the BERT recipe only
(`EncoderConfig.use_bias`; the modern recipe is bias-free)."""
from __future__ import annotations

import flax.linen as nn

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
