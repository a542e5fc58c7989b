"""The modern encoder recipe (ModernBERT, Warner et al. 2024) with kjax's Korean
inputs and shaking, in Flax linen; `model.arch = "modern"`.

    x_0 = Norm(E_tok[input_ids])               no position or token-type table
    per layer i:
        h = x if i == 0 else Norm(x)           pre-LN (layer 0: the embedding's Norm)
        x = x + Attn_i(h)                      RoPE on q, k; Eq. 1 on the logits (as BERT);
                                               global when i % n == 0, else a local
                                               window (|q − k| ≤ w / 2), with its own θ
        x = x + W_o (GELU(h W_in) ⊙ h W_gate)  GeGLU, h = Norm(x)
    hidden = Norm(x)
    mlm_logits = Norm(GELU(hidden W_t)) E_tokᵀ + b   (tied decoder)

Every Norm is a LayerNorm without bias and no projection has a bias. There is
no NSP head: the recipe pretrains MLM alone (the nsp objective is off for it,
kjax/objectives/nsp.py). Input modes keep their embedding paths (multi-hot
segment sums, Eq. 3–4) and position ids (RoPE angles: shared positions of
SHAKE variant 5, restarted positions of packed documents). Layers are
unrolled, not scanned: they differ (window, θ, layer 0's missing norm).
The layout of parameters maps one to one onto transformers' ModernBERT
(kjax/export/modernbert_export.py).
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from kjax.model.attention import SelfAttention
from kjax.model.config import EncoderConfig
from kjax.model.encoder import Embeddings, _remat_policy
from kjax.model.knowledge_heads import KnowledgeHeads
from kjax.model.layers import Dropout, dense, gelu, kernel_init, layer_norm, zeros_init
from kjax.model.lookup import Table, gather_rows
from kjax.model.rope import rope_tables


class ModernEmbeddings(Embeddings):
    """E_tok (or the input mode's morpheme sum, Eq. 3–4), then Norm; positions
    enter through RoPE in every attention layer instead."""

    def setup(self):
        cfg = self.config
        self.word_embeddings = Table(cfg.vocab_size, cfg.hidden_size, dtype=cfg.compute_dtype,
                                     param_dtype=cfg.weight_dtype, name="word_embeddings",
                                     embedding_init=kernel_init(cfg, ("vocab", "embed")))
        self.morpheme_tables(lambda n, axes, name: Table(
            n, cfg.hidden_size, dtype=cfg.compute_dtype, param_dtype=cfg.weight_dtype,
            name=name, embedding_init=kernel_init(cfg, axes)))
        self.layer_norm = layer_norm(cfg, "layer_norm")
        self.dropout = Dropout(cfg.dropout_rate)

    def __call__(self, input_ids, num_positions, multihot=None, example_ids=None):
        """Returns (embedded positions, Input_k before the Norm)."""
        if multihot is None:
            x = self.word_embeddings(input_ids)
        else:
            x = self.morpheme_vectors(multihot, num_positions)
            if self.config.embedding == "segment_sum_inpos_postag":
                x = x + self.postag_embeddings(multihot["position_tags"])        # Eq. 4
        return self.dropout(self.layer_norm(x), self.deterministic, example_ids), x


class GeGLUInput(nn.Module):
    """h [b, s, H] → [b, s, 2, I]: the GELU input and its gate from one [H, 2, I]
    kernel (the intermediate axis shards by tensor, both halves alike)."""
    config: EncoderConfig

    @nn.compact
    def __call__(self, h):
        cfg = self.config
        kernel = self.param("kernel", kernel_init(cfg, ("embed", None, "mlp")),
                            (cfg.hidden_size, 2, cfg.intermediate_size), cfg.weight_dtype)
        return jnp.einsum("bsD,Dgi->bsgi", h.astype(cfg.compute_dtype),
                          kernel.astype(cfg.compute_dtype))


class ModernBlock(nn.Module):
    """One pre-LN layer: attention (local or global) and a GeGLU feed-forward."""
    config: EncoderConfig
    layer: int
    deterministic: bool = True
    return_analysis: bool = False

    @nn.compact
    def __call__(self, x, attention_mask, shake, bf, segment_ids, rope, example_ids=None):
        cfg = self.config
        drop = lambda h: Dropout(cfg.dropout_rate)(h, self.deterministic, example_ids)  # noqa: E731
        window = None if cfg.global_layer(self.layer) else cfg.local_attention
        h = x if self.layer == 0 else layer_norm(cfg, "attention_norm")(x)
        attn, analysis = SelfAttention(cfg, self.deterministic, self.return_analysis,
                                       local_window=window, name="attention")(
            h, attention_mask, shake, bf, segment_ids, rope, example_ids)
        x = x + drop(attn)
        h = layer_norm(cfg, "mlp_norm")(x)
        gated = GeGLUInput(cfg, name="mlp_in")(h)
        h = gelu(gated[..., 0, :]) * gated[..., 1, :]
        h = dense(cfg, cfg.hidden_size, ("mlp", "embed"), "mlp_out")(
            drop(h))
        x = x + drop(h)
        x = nn.with_logical_constraint(x, ("batch", "length", "act_embed"))
        return x, analysis


class ModernEncoder(nn.Module):
    config: EncoderConfig
    deterministic: bool = True
    return_analysis: bool = False

    @nn.compact
    def __call__(self, x, attention_mask, position_ids, shake=None, segment_ids=None,
                 example_ids=None):
        cfg = self.config
        block = ModernBlock
        if cfg.remat_policy != "none":
            block = nn.remat(ModernBlock, policy=_remat_policy(cfg.remat_policy))
        bf = jnp.asarray(cfg.shake_factor or (0.0,) * cfg.num_layers, jnp.float32)
        thetas = {True: cfg.rope_theta, False: cfg.local_rope_theta}
        ropes = {is_global: rope_tables(position_ids, cfg.head_dim, theta)
                 for is_global, theta in thetas.items()}
        per_layer = []
        for i in range(cfg.num_layers):
            x, analysis = block(cfg, i, self.deterministic, self.return_analysis,
                                name=f"layer_{i}")(x, attention_mask, shake, bf[i], segment_ids,
                                                   ropes[cfg.global_layer(i)], example_ids)
            per_layer.append(analysis)
        x = layer_norm(cfg, "final_norm")(x)
        if not self.return_analysis:
            return x, None
        return x, jax.tree.map(lambda *a: jnp.stack(a), *per_layer)


class ModernBertForPreTraining(nn.Module):
    """Embeddings + encoder + MLM head (decoder tied to the word embeddings),
    and the knowledge heads when configured. Same call as BertForPreTraining
    (token_type_ids gives the shape; the recipe has no token types) plus
    `segment_ids` [b, s]: packed documents never attend across."""
    config: EncoderConfig
    deterministic: bool = True
    return_analysis: bool = False

    def setup(self):
        cfg = dataclasses.replace(self.config, use_bias=False)   # no bias anywhere (the recipe)
        self.embeddings = ModernEmbeddings(cfg, self.deterministic)
        self.encoder = ModernEncoder(cfg, self.deterministic, self.return_analysis)
        self.mlm_transform = dense(cfg, cfg.hidden_size, ("embed", "mlp"), "mlm_transform")
        self.mlm_layer_norm = layer_norm(cfg, "mlm_layer_norm")
        self.mlm_bias = self.param("mlm_bias", zeros_init(("vocab",)), (cfg.vocab_size,),
                                   cfg.weight_dtype)
        if cfg.hypernym_head or cfg.sense_dim or cfg.verb_head:
            self.knowledge = KnowledgeHeads(cfg)

    def encode(self, input_ids, token_type_ids, attention_mask, position_ids=None, shake=None,
               multihot=None, return_inputs=False, segment_ids=None, example_ids=None):
        """(hidden [b, s, H], analysis or None[, Input_k]), as BertForPreTraining.encode."""
        shape = token_type_ids.shape
        if position_ids is None:
            position_ids = jnp.broadcast_to(jnp.arange(shape[-1]), shape)
        x, inputs = self.embeddings(input_ids, shape[-1], multihot, example_ids)
        x = nn.with_logical_constraint(x, ("batch", "length", "act_embed"))
        hidden, analysis = self.encoder(x, attention_mask, position_ids, shake, segment_ids,
                                        example_ids)
        return (hidden, analysis, inputs) if return_inputs else (hidden, analysis)

    def __call__(self, input_ids, token_type_ids, attention_mask, mlm_positions=None,
                 position_ids=None, shake=None, multihot=None, knowledge_positions=None,
                 segment_ids=None, example_ids=None):
        hidden, analysis, inputs = self.encode(input_ids, token_type_ids, attention_mask,
                                               position_ids, shake, multihot,
                                               return_inputs=True, segment_ids=segment_ids,
                                               example_ids=example_ids)
        picked = hidden if mlm_positions is None else gather_rows(hidden, mlm_positions)
        h = self.mlm_layer_norm(gelu(self.mlm_transform(picked)))
        mlm_logits = self.embeddings.attend(h) + self.mlm_bias.astype(jnp.float32)
        out = {"mlm_logits": mlm_logits, "hidden": hidden, "pooled": hidden[:, 0]}
        if analysis is not None:
            out["analysis"] = analysis
        if hasattr(self, "knowledge"):
            out.update(self.knowledge(inputs, hidden, attention_mask, self.embeddings.attend,
                                      **(knowledge_positions or {})))
        return out
