"""ELECTRA (Clark et al. 2020; METHODS §6): a small generator trained by MLM
and a BERT-recipe discriminator trained to tell which of its input tokens
the generator replaced, in Flax linen; `model.arch = "electra"`.

    generator      masked input → its own encoder (¼–⅓ of H) → MLM logits at mlm_positions
    sample         x̂_i = argmax_v (logits_iv + g_iv), g Gumbel: a draw from softmax(logits)
    corrupt        the masked positions take x̂ (stop_gradient: no gradient through it)
    discriminator  corrupted input → the encoder → dense, GELU, dense → one logit a token

Both sides share the token, position and type tables and the embeddings'
LayerNorm (ELECTRA ties them); with E ≠ a side's width each side has its
own `embeddings_project`. The parameter tree keeps the discriminator where
BertForPreTraining keeps its encoder (`embeddings`, `encoder`: fine-tuning,
export and import read it as BERT's), its head in
`discriminator_predictions`, and the generator under `generator`.

The Gumbel noise is a hash of (the call's key, global example, position,
vocabulary id) with dropout_hash's fmix32, as hidden dropout is: a row draws
the same sample in any microbatch or on any device, and a resumed run draws
what the uninterrupted one did. Real slots are those with mlm_positions > 0:
padding slots point at position 0 ([CLS]), which masking never picks.
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from kjax.model import dropout_hash
from kjax.model.config import EncoderConfig
from kjax.model.encoder import Embeddings, Encoder
from kjax.model.layers import dense, gelu, layer_norm, zeros_init
from kjax.model.lookup import gather_rows

# The sample key's words where no dropout key is given (eval, fill-mask): a
# fixed draw, so every evaluation corrupts the same tokens the same way.
FIXED_WORDS = (np.int32(0x6A09E667), np.int32(0x3C6EF372))


def discriminator_config(cfg: EncoderConfig) -> EncoderConfig:
    """The discriminator: the BERT recipe at the configured sizes."""
    return dataclasses.replace(cfg, arch="bert")


def generator_config(cfg: EncoderConfig) -> EncoderConfig:
    """The generator's sizes; each 0 takes ELECTRA's rule (its
    get_generator_config): width H/4, the discriminator's depth, one head per
    64 of width, FFN 4 × width. Its tables are the discriminator's, E wide."""
    hidden = cfg.generator_hidden_size or max(1, cfg.hidden_size // 4)
    return dataclasses.replace(
        cfg, arch="bert", hidden_size=hidden, embedding_size=cfg.embed_dim,
        num_layers=cfg.generator_num_layers or cfg.num_layers,
        num_heads=cfg.generator_num_heads or max(1, hidden // 64),
        intermediate_size=cfg.generator_intermediate_size or 4 * hidden,
        shake_factor=(0.0,) * (cfg.generator_num_layers or cfg.num_layers),
        hypernym_head=False, sense_dim=0, verb_head=False)


def gumbel_noise(words, shape, positions, examples=None):
    """float32 [b, p, V] standard Gumbel noise, a function of (the key's words,
    each row's global example, the slot's position in the row, the vocabulary
    id) alone: fmix32 of the index in the (example) plane, 23 bits → u ∈ (0, 1)."""
    b, p, v = shape
    seed = dropout_hash.plane_seed(words[0], words[1],
                                   dropout_hash.example_index(examples, b)[:, None, None])
    index = positions.astype(jnp.int32)[..., None] * np.int32(v) + \
        jnp.arange(v, dtype=jnp.int32)[None, None, :]
    h = dropout_hash.fmix32(index * dropout_hash.GOLDEN + seed)
    bits = jax.lax.shift_right_logical(h, jnp.full_like(h, 9))
    u = (bits.astype(jnp.float32) + 0.5) * np.float32(2.0 ** -23)
    return -jnp.log(-jnp.log(u))


def sample_tokens(logits, words, positions, examples=None):
    """int32 [b, p]: one draw per slot from softmax(logits) (Gumbel-max)."""
    noise = gumbel_noise(words, logits.shape, positions, examples)
    return jnp.argmax(jax.lax.stop_gradient(logits) + noise, axis=-1).astype(jnp.int32)


def corrupt(input_ids, positions, sampled):
    """input_ids with the real slots' (positions > 0) tokens replaced by `sampled`."""
    input_ids, positions = jnp.asarray(input_ids), jnp.asarray(positions)
    rows = jnp.arange(input_ids.shape[0])[:, None]
    current = input_ids[rows, positions]
    return input_ids.at[rows, positions].set(jnp.where(positions > 0, sampled, current))


class Generator(nn.Module):
    """The generator's projection, encoder and MLM head (BERT's, to E wide,
    decoded by the shared word table)."""
    config: EncoderConfig            # generator_config(...)
    deterministic: bool = True

    def setup(self):
        cfg = self.config
        if cfg.projects_embeddings:
            self.embeddings_project = dense(cfg, cfg.hidden_size, (None, "embed"),
                                            "embeddings_project")
        self.encoder = Encoder(cfg, self.deterministic)
        self.mlm_transform = dense(cfg, cfg.embed_dim, ("embed", "mlp"), "mlm_transform")
        self.mlm_layer_norm = layer_norm(cfg, "mlm_layer_norm")
        self.mlm_bias = self.param("mlm_bias", zeros_init(("vocab",)), (cfg.vocab_size,),
                                   cfg.weight_dtype)

    def __call__(self, x, attention_mask, mlm_positions, attend, segment_ids=None,
                 example_ids=None):
        if self.config.projects_embeddings:
            x = self.embeddings_project(x)
        x = nn.with_logical_constraint(x, ("batch", "length", "act_embed"))
        hidden, _ = self.encoder(x, attention_mask, None, segment_ids, example_ids)
        picked = hidden if mlm_positions is None else gather_rows(hidden, mlm_positions)
        h = self.mlm_layer_norm(gelu(self.mlm_transform(picked)))
        return attend(h) + self.mlm_bias.astype(jnp.float32), hidden


class DiscriminatorHead(nn.Module):
    """ELECTRA's discriminator_predictions: dense H → H, GELU, dense H → 1."""
    config: EncoderConfig

    @nn.compact
    def __call__(self, hidden):
        cfg = self.config
        h = gelu(dense(cfg, cfg.hidden_size, ("embed", "mlp"), "dense")(hidden))
        return dense(cfg, 1, ("mlp", None), "dense_prediction")(h)[..., 0].astype(jnp.float32)


class ElectraForPreTraining(nn.Module):
    """The generator and the discriminator; BertForPreTraining's call. Outputs:
    mlm_logits (the generator's, at mlm_positions), rtd_logits [b, s] (the
    discriminator's, > 0: replaced), rtd_input_ids [b, s] (what it read),
    hidden (the discriminator's), generator_hidden. Eq. 1 (`shake`) acts in the
    discriminator."""
    config: EncoderConfig
    deterministic: bool = True
    return_analysis: bool = False

    def setup(self):
        disc = discriminator_config(self.config)
        self.embeddings = Embeddings(disc, self.deterministic)
        self.encoder = Encoder(disc, self.deterministic, self.return_analysis)
        self.discriminator_predictions = DiscriminatorHead(disc)
        self.generator = Generator(generator_config(self.config), self.deterministic)

    def encode(self, input_ids, token_type_ids, attention_mask, position_ids=None, shake=None,
               multihot=None, return_inputs=False, segment_ids=None, example_ids=None):
        """The discriminator: (hidden [b, s, H], analysis or None[, Input_k]),
        as BertForPreTraining.encode (fine-tuning reads this)."""
        if multihot is not None:
            raise ValueError("model.arch='electra' has token inputs only (no multihot)")
        x, inputs = self.embeddings(input_ids, token_type_ids, position_ids, None, example_ids)
        x = nn.with_logical_constraint(x, ("batch", "length", "act_embed"))
        hidden, analysis = self.encoder(x, attention_mask, shake, segment_ids, example_ids)
        return (hidden, analysis, inputs) if return_inputs else (hidden, analysis)

    def sample_words(self):
        if self.has_rng("dropout"):
            return dropout_hash.key_words(self.make_rng("dropout"))
        return jnp.asarray(FIXED_WORDS, jnp.int32)

    def __call__(self, input_ids, token_type_ids, attention_mask, mlm_positions=None,
                 position_ids=None, shake=None, multihot=None, knowledge_positions=None,
                 segment_ids=None, example_ids=None):
        """BertForPreTraining's arguments; `knowledge_positions` is unused (no
        knowledge heads). Without mlm_positions the generator predicts every
        position and nothing is replaced."""
        if multihot is not None:
            raise ValueError("model.arch='electra' has token inputs only (no multihot)")
        masked, _ = self.embeddings(input_ids, token_type_ids, position_ids, None, example_ids,
                                    project=False)
        mlm_logits, generated = self.generator(masked, attention_mask, mlm_positions,
                                               self.embeddings.attend, segment_ids, example_ids)
        corrupted = input_ids
        if mlm_positions is not None:
            sampled = sample_tokens(mlm_logits, self.sample_words(), mlm_positions, example_ids)
            corrupted = jax.lax.stop_gradient(corrupt(input_ids, mlm_positions, sampled))
        hidden, analysis = self.encode(corrupted, token_type_ids, attention_mask, position_ids,
                                       shake, segment_ids=segment_ids, example_ids=example_ids)
        out = {"mlm_logits": mlm_logits, "rtd_logits": self.discriminator_predictions(hidden),
               "rtd_input_ids": corrupted, "hidden": hidden, "pooled": hidden[:, 0],
               "generator_hidden": generated}
        if analysis is not None:
            out["analysis"] = analysis
        return out
