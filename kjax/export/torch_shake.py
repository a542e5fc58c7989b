"""SHAKE's attention-logit manipulation (METHODS §1.2, Eq. 1) for transformers
models in PyTorch — the same operation as kjax/model/attention.py:

    score = (q · scaling) · kᵀ                 scaled logits
    score += |score ⊙ B| · bf                   Eq. 1, B [batch, q, k] over all heads
    α = softmax(score + padding mask)

Importing this module registers the attention function "kjax_shake" with
transformers' AttentionInterface (and the eager mask with
AttentionMaskInterface: without it transformers builds no padding mask for
an unknown implementation). Any BERT-family model whose attention goes
through the interface (BERT, RoBERTa, ELECTRA, …) can then shake:

    import kjax.export.torch_shake
    model = AutoModel.from_pretrained(path, attn_implementation="kjax_shake")
    out = model(**batch, shake_matrix=B)            # bf from config.kjax_shake_factor
    out = model(**batch, shake_matrix=B, shake_factor=0.3)   # or given per call

`shake_factor` is a scalar (all layers) or one value per layer; without it
the config's `kjax_shake_factor` (written by `kjax export`) is used. No
`shake_matrix` (or bf = 0) means plain attention: the same function as
"eager", but q is scaled before the product (as kjax does), not the logits
after it, so float32 outputs differ from "eager" by rounding (about 1e-6 in
the last hidden state of 2-layer test models; docs/EXPORT.md, "Shaking in
PyTorch") and are not bit-identical to it. Against kjax itself the logits
agree bit for bit.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from kjax.errors import KjaxError

ATTN_IMPLEMENTATION = "kjax_shake"


def layer_factor(module: nn.Module, shake_factor) -> float:
    """This layer's bf: the per-call `shake_factor`, else config.kjax_shake_factor."""
    if shake_factor is None:
        shake_factor = getattr(module.config, "kjax_shake_factor", None)
        if shake_factor is None:
            raise KjaxError("shake_matrix was passed but neither shake_factor= nor "
                            "config.kjax_shake_factor gives bf; pass shake_factor=0.3 (or one "
                            "value per layer) or set model.config.kjax_shake_factor")
    if isinstance(shake_factor, (int, float)):
        return float(shake_factor)
    factors: Sequence[float] = list(shake_factor)
    layer = getattr(module, "layer_idx", None)
    if layer is None or not 0 <= layer < len(factors):
        raise KjaxError(f"shake_factor has {len(factors)} values but the attention layer index "
                        f"is {layer}; give one value per layer or a scalar")
    return float(factors[layer])


def shake_scores(scores: torch.Tensor, shake_matrix: torch.Tensor, bf: float) -> torch.Tensor:
    """Eq. 1 on scaled logits [b, heads, q, k] with B [b, q, k]."""
    b = shake_matrix.to(scores.dtype)[:, None, :, :]
    return scores + torch.abs(scores * b) * bf


def shake_attention_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                            value: torch.Tensor, attention_mask: torch.Tensor | None,
                            scaling: float | None = None, dropout: float = 0.0,
                            shake_matrix: torch.Tensor | None = None, shake_factor=None,
                            **kwargs):
    """transformers attention function: query/key/value [b, heads, s, d]."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    # Scale q before the product, as kjax does (so fp32 logits match kjax's; eager
    # scales the product instead: a ~1e-7 rounding difference, see module doc).
    scores = torch.matmul(query * scaling, key.transpose(2, 3))
    if shake_matrix is not None:
        if shake_matrix.shape != (query.shape[0], query.shape[2], key.shape[2]):
            raise KjaxError(f"shake_matrix has shape {tuple(shake_matrix.shape)}; it must be "
                            f"[batch, q_len, k_len] = {(query.shape[0], query.shape[2], key.shape[2])}")
        bf = layer_factor(module, shake_factor)
        if bf != 0.0:
            scores = shake_scores(scores, shake_matrix.to(scores.device), bf)
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, :, : key.shape[-2]]
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


def register() -> None:
    """Registers "kjax_shake" (idempotent; runs on import)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    AttentionInterface.register(ATTN_IMPLEMENTATION, shake_attention_forward)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, eager_mask)


register()
