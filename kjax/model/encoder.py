"""BERT encoder (post-LN, GELU, learned absolute positions, token types) and
its pretraining heads (METHODS §4), in Flax linen.

Parameters live apart from the module: `model.init` returns a pytree and
`model.apply(params, batch...)` is a pure function. Parameter axes carry
logical names (vocab, embed, heads, kv, mlp, layers); which mesh axes they
map to is decided in `kjax.parallel`, never here.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from kjax.config.platform_defaults import require_resolved
from kjax.model.attention import SelfAttention
from kjax.model.config import EncoderConfig
from kjax.model.knowledge_heads import KnowledgeHeads
from kjax.model.layers import Dropout, dense, gelu, kernel_init, layer_norm, zeros_init
from kjax.model.lookup import Table, gather_rows


# How positions are embedded (each input mode of kjax/inputs names one):
#   tokens                    E_tok[input_ids]: one token per position (BERT)
#   segment_sum               Σ E_tok over a position's tokens (SHAKE §1.5, 6)
#   segment_sum_inpos_postag  Σ_i E_tok[t_i] ⊙ E_inpos[i], + E_postag (METHODS Eq. 3–4)
EMBEDDINGS = ("tokens", "segment_sum", "segment_sum_inpos_postag")


class Embeddings(nn.Module):
    config: EncoderConfig
    deterministic: bool = True

    def setup(self):
        cfg = self.config

        def table(n, axes, name):
            # Table: nn.Embed's parameter, gradients in fp32 without contention
            # (kjax/model/lookup.py).
            return Table(n, cfg.embed_dim, dtype=cfg.compute_dtype,
                         param_dtype=cfg.weight_dtype, name=name,
                         embedding_init=kernel_init(cfg, axes))

        self.word_embeddings = table(cfg.vocab_size, ("vocab", "embed"), "word_embeddings")
        self.position_embeddings = table(cfg.max_position_embeddings, (None, "embed"),
                                         "position_embeddings")
        self.token_type_embeddings = table(cfg.type_vocab_size, (None, "embed"),
                                           "token_type_embeddings")
        self.morpheme_tables(table)
        self.layer_norm = layer_norm(cfg, "layer_norm")
        self.dropout = Dropout(cfg.dropout_rate)
        if cfg.projects_embeddings:   # ELECTRA's embeddings_project: E → H after the LayerNorm
            self.embeddings_project = dense(cfg, cfg.hidden_size, (None, "embed"),
                                            "embeddings_project")

    def morpheme_tables(self, table):
        """E_inpos and E_postag where the input mode's embedding path has them
        (called from setup; the modern recipe's embeddings share it)."""
        cfg = self.config
        if cfg.embedding not in EMBEDDINGS:
            raise ValueError(f"embedding path {cfg.embedding!r}; the model has {EMBEDDINGS}")
        if cfg.embedding == "segment_sum_inpos_postag":
            # E_inpos multiplies E_tok element-wise (Eq. 3): start near 1 so a
            # morpheme's tokens begin as their plain embeddings.
            near_one = lambda key, shape, dtype: 1.0 + nn.initializers.truncated_normal(  # noqa
                cfg.initializer_range)(key, shape, dtype)
            self.inpos_embeddings = Table(
                cfg.max_tokens_per_morpheme, cfg.embed_dim, dtype=cfg.compute_dtype,
                param_dtype=cfg.weight_dtype, name="inpos_embeddings",
                embedding_init=nn.with_logical_partitioning(near_one, (None, "embed")))
            self.postag_embeddings = table(cfg.num_pos_tags, (None, "embed"), "postag_embeddings")

    def __call__(self, input_ids, token_type_ids, position_ids=None, multihot=None,
                 example_ids=None, project=True):
        """Returns (embedded positions, Input_k before LayerNorm). `position_ids`
        None: 0..s-1 in every row, a slice of the table (its gradient a sum
        over the batch, not a scatter). `project=False`: E wide, before
        embeddings_project (ELECTRA's generator projects with its own)."""
        if multihot is None:
            tokens = self.word_embeddings(input_ids)
        else:
            tokens = self.morpheme_vectors(multihot, token_type_ids.shape[-1])
        if self.config.type_vocab_size == 1:
            # A one-row table (RoBERTa, imported) has segment 0 only: every token
            # takes it, as RoBERTa's tokenizer gives a pair's second sentence type 0
            # (flax's one-row Embed broadcasts anyway; said here, not left to it).
            token_type_ids = jnp.zeros_like(token_type_ids)
        positions = self.position_embeddings.leading_rows(token_type_ids) \
            if position_ids is None else self.position_embeddings(position_ids)
        x = tokens + positions + self.token_type_embeddings(token_type_ids)
        if multihot is not None and self.config.embedding == "segment_sum_inpos_postag":
            x = x + self.postag_embeddings(multihot["position_tags"])        # Eq. 4
        out = self.dropout(self.layer_norm(x), self.deterministic, example_ids)
        if self.config.projects_embeddings and project:
            out = self.embeddings_project(out)
        return out, x

    def morpheme_vectors(self, multihot, num_positions):
        """T_k = Σ_i E_tok[t_i] ⊙ E_inpos[i] over the tokens of morpheme k (Eq. 3),
        a segment sum per example over the flat token stream. SHAKE's merged
        variant (§1.5, 6) is the same sum without E_inpos: a substantive and its
        postposition become one position whose embedding is the sum of theirs."""
        cfg = self.config
        vectors = self.word_embeddings(multihot["token_ids"])
        if cfg.embedding == "segment_sum_inpos_postag":
            inpos = jnp.minimum(multihot["token_inpos"], cfg.max_tokens_per_morpheme - 1)
            vectors = vectors * self.inpos_embeddings(inpos)
        owner = multihot["token_position"]
        # Summed in fp32: a morpheme's tokens add into one row (a scatter-add
        # whose indices repeat), which in bf16 rounds at every add.
        vectors = jnp.where((owner >= 0)[..., None], vectors, 0).astype(jnp.float32)
        segment_sum = lambda v, o: jax.ops.segment_sum(  # noqa: E731
            v, jnp.maximum(o, 0), num_segments=num_positions)
        return jax.vmap(segment_sum)(vectors, owner).astype(cfg.compute_dtype)

    def attend(self, h):
        """Tied MLM decoder: logits = h · E_wordᵀ, accumulated in fp32."""
        table = self.word_embeddings.embedding.astype(self.config.compute_dtype)
        return jnp.einsum("...d,vd->...v", h, table, preferred_element_type=jnp.float32)


class Block(nn.Module):
    """One post-LN transformer layer; scanned over depth when configured."""
    config: EncoderConfig
    deterministic: bool = True
    return_analysis: bool = False

    @nn.compact
    def __call__(self, x, attention_mask, shake, bf, segment_ids=None, example_ids=None):
        cfg = self.config
        drop = Dropout(cfg.dropout_rate)
        attn, analysis = SelfAttention(cfg, self.deterministic, self.return_analysis,
                                       name="attention")(x, attention_mask, shake, bf, segment_ids,
                                                          example_ids=example_ids)
        x = layer_norm(cfg, "attention_layer_norm")(x + drop(attn, self.deterministic, example_ids))
        h = dense(cfg, cfg.intermediate_size, ("embed", "mlp"), "mlp_in")(x)
        h = dense(cfg, cfg.hidden_size, ("mlp", "embed"), "mlp_out")(gelu(h))
        x = layer_norm(cfg, "mlp_layer_norm")(x + drop(h, self.deterministic, example_ids))
        x = nn.with_logical_constraint(x, ("batch", "length", "act_embed"))
        return x, analysis


def _remat_policy(name: str):
    if name == "full":
        return None  # save nothing: recompute the whole layer in the backward pass
    return getattr(jax.checkpoint_policies, name)


class Encoder(nn.Module):
    config: EncoderConfig
    deterministic: bool = True
    return_analysis: bool = False

    @nn.compact
    def __call__(self, x, attention_mask, shake=None, segment_ids=None, example_ids=None):
        cfg = self.config
        block = Block
        if cfg.remat_policy != "none":
            block = nn.remat(Block, policy=_remat_policy(cfg.remat_policy),
                             prevent_cse=not cfg.scan_layers)
        bf = jnp.asarray(cfg.shake_factor or (0.0,) * cfg.num_layers, jnp.float32)
        if cfg.scan_layers:
            # scan_unroll: layers per loop iteration (0: all, no loop). The loop
            # keeps compile time flat in depth; unrolling it lets XLA fuse across
            # layers and drop the stacked-residual copies (what scan_layers=False
            # gains on GPU) while the parameters stay stacked: same checkpoints.
            # (auto, -1, is resolved with the config: a builder never picks it)
            unroll = require_resolved("model.scan_unroll", cfg.scan_unroll) or cfg.num_layers
            stack = nn.scan(block, variable_axes={"params": 0},
                            split_rngs={"params": True, "dropout": True},
                            in_axes=(nn.broadcast, nn.broadcast, 0, nn.broadcast, nn.broadcast),
                            length=cfg.num_layers, unroll=unroll,
                            metadata_params={nn.PARTITION_NAME: "layers"})
            return stack(cfg, self.deterministic, self.return_analysis,
                         name="layers")(x, attention_mask, shake, bf, segment_ids, example_ids)
        per_layer = []
        for i in range(cfg.num_layers):
            x, analysis = block(cfg, self.deterministic, self.return_analysis,
                                name=f"layer_{i}")(x, attention_mask, shake, bf[i], segment_ids,
                                                    example_ids)
            per_layer.append(analysis)
        if not self.return_analysis:
            return x, None
        return x, jax.tree.map(lambda *a: jnp.stack(a), *per_layer)


class BertForPreTraining(nn.Module):
    """Encoder + pooler + MLM head (decoder tied to word embeddings) + NSP head.

    `mlm_positions` [b, p]: the MLM head runs only there (gather first), so
    the vocabulary projection costs p, not seq_len, rows per example.
    `shake` [b, q, k]: the Eq. 1 matrix B, or its pairs layout {key_start, key_end,
    weight} [b, q] (kjax/shake/matrix.py); None: plain attention.
    `position_ids` [b, s]: defaults to 0..s-1 (SHAKE variant 5 overrides).
    """
    config: EncoderConfig
    deterministic: bool = True
    return_analysis: bool = False

    def setup(self):
        cfg = self.config
        self.embeddings = Embeddings(cfg, self.deterministic)
        self.encoder = Encoder(cfg, self.deterministic, self.return_analysis)
        self.pooler = dense(cfg, cfg.hidden_size, ("embed", "mlp"), "pooler")
        # To the embedding width: the decoder is tied to E_word (ELECTRA's generator head).
        self.mlm_transform = dense(cfg, cfg.embed_dim, ("embed", "mlp"), "mlm_transform")
        self.mlm_layer_norm = layer_norm(cfg, "mlm_layer_norm")
        self.mlm_bias = self.param("mlm_bias", zeros_init(("vocab",)), (cfg.vocab_size,),
                                   cfg.weight_dtype)
        self.nsp = dense(cfg, 2, ("mlp", None), "nsp")
        if cfg.hypernym_head or cfg.sense_dim or cfg.verb_head:
            self.knowledge = KnowledgeHeads(cfg)

    def encode(self, input_ids, token_type_ids, attention_mask, position_ids=None, shake=None,
               multihot=None, return_inputs=False, segment_ids=None, example_ids=None):
        """(hidden [b, s, H], analysis or None[, Input_k]). With `multihot` (token_ids,
        token_position, token_inpos [b, t]; position_tags [b, s]) positions are
        morphemes and `input_ids` is unused."""
        x, inputs = self.embeddings(input_ids, token_type_ids, position_ids, multihot,
                                    example_ids)
        x = nn.with_logical_constraint(x, ("batch", "length", "act_embed"))
        hidden, analysis = self.encoder(x, attention_mask, shake, segment_ids, example_ids)
        return (hidden, analysis, inputs) if return_inputs else (hidden, analysis)

    def __call__(self, input_ids, token_type_ids, attention_mask, mlm_positions=None,
                 position_ids=None, shake=None, multihot=None, knowledge_positions=None,
                 segment_ids=None, example_ids=None):
        """`knowledge_positions`: {hyp_positions, sense_positions} [b, 20] for the
        knowledge heads (METHODS §2.5), when the config has them. `segment_ids`
        [b, s]: packed rows (train.packing), attention stays inside a segment.
        `example_ids` [b]: each row's index in the step's global batch, which
        dropout hashes (a microbatch's rows; None: 0..b-1)."""
        hidden, analysis, inputs = self.encode(input_ids, token_type_ids, attention_mask,
                                               position_ids, shake, multihot, return_inputs=True,
                                               segment_ids=segment_ids, example_ids=example_ids)
        pooled = jnp.tanh(self.pooler(hidden[:, 0]))
        nsp_logits = self.nsp(pooled).astype(jnp.float32)
        picked = hidden if mlm_positions is None else gather_rows(hidden, mlm_positions)
        h = self.mlm_layer_norm(gelu(self.mlm_transform(picked)))
        mlm_logits = self.embeddings.attend(h) + self.mlm_bias.astype(jnp.float32)
        out = {"mlm_logits": mlm_logits, "nsp_logits": nsp_logits,
               "hidden": hidden, "pooled": pooled}
        if analysis is not None:
            out["analysis"] = analysis
        if hasattr(self, "knowledge"):
            out.update(self.knowledge(inputs, hidden, attention_mask, self.embeddings.attend,
                                      **(knowledge_positions or {})))
        return out
