"""UKnowBERT's pretraining-only knowledge heads (METHODS §2.5). None of them
is part of the exported encoder.

    hypernym  softmax(FFN(Input_k)) over the vocabulary            (Eq. 10)
    sense     FFN(Input_k) regressed onto the lemma's sense vector (Eq. 11)
    verb      a pointer from a predicate's encoder output to the position
              of its related noun: softmax_j (W_q h_p)·(W_k h_j) / sqrt(H)  (Eq. 12)

Input_k is the input vector of Eq. 4 (before the embedding LayerNorm), not
the encoder output: the first two heads teach the *input generator* what a
morpheme means. The pointer's bilinear form is our reading of Eq. 12.
"""
from __future__ import annotations

import math

import flax.linen as nn
import jax.numpy as jnp

from kjax.model.config import EncoderConfig
from kjax.model.layers import dense, gelu, layer_norm, zeros_init
from kjax.model.lookup import gather_rows


class FFN(nn.Module):
    """Dense → GELU → LayerNorm (→ Dense to `out_features` when non-zero)."""
    config: EncoderConfig
    out_features: int = 0

    @nn.compact
    def __call__(self, x):
        cfg = self.config
        h = gelu(dense(cfg, cfg.hidden_size, ("embed", "mlp"), "hidden")(x))
        h = layer_norm(cfg, "layer_norm")(h)
        return h if not self.out_features else dense(cfg, self.out_features, ("embed", None),
                                                     "out")(h)


def gather(x, positions):
    return gather_rows(x, positions)   # the gradient scattered in fp32 (kjax/model/lookup.py)


class KnowledgeHeads(nn.Module):
    config: EncoderConfig

    @nn.compact
    def __call__(self, inputs, hidden, attention_mask, attend, hyp_positions=None,
                 sense_positions=None):
        """`attend`: the tied decoder (h → vocabulary logits, fp32)."""
        cfg, out = self.config, {}
        if cfg.hypernym_head and hyp_positions is not None:
            h = FFN(cfg, name="hypernym")(gather(inputs, hyp_positions))
            bias = self.param("hypernym_bias", zeros_init(("vocab",)), (cfg.vocab_size,),
                              cfg.weight_dtype)
            out["hyp_logits"] = attend(h) + bias.astype(jnp.float32)
        if cfg.sense_dim and sense_positions is not None:
            out["sense_pred"] = FFN(cfg, cfg.sense_dim, name="sense")(
                gather(inputs, sense_positions)).astype(jnp.float32)
        if cfg.verb_head:
            q = dense(cfg, cfg.hidden_size, ("embed", "mlp"), "verb_query")(hidden)
            k = dense(cfg, cfg.hidden_size, ("embed", "mlp"), "verb_key")(hidden)
            scores = jnp.einsum("bpd,bjd->bpj", q, k, preferred_element_type=jnp.float32)
            scores = scores / math.sqrt(cfg.hidden_size)
            out["verb_logits"] = jnp.where(attention_mask[:, None, :] > 0, scores, -1e9)
        return out

