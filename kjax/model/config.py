"""The encoder's hyper-parameters as a frozen (hashable) dataclass, so Flax
modules can hold it and `nn.scan`/`jax.jit` can treat it as static."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from kjax.config.schema import ATTENTION_IMPLS  # noqa: F401 (kjax/model/attention_core.py)
from kjax.config.schema import MODEL
from kjax.inputs import input_mode


def _schema(key: str):
    """The default of model.KEY: one source for the config tree and the model."""
    return MODEL[key].default


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    """The model's view of the `model` (and `knowledge`) branches: the schema's
    defaults, except where the model holds another form — attention_tiles (a sorted
    tuple, hashable) and shake_factor (one bf per layer) — and the knowledge
    heads, which exist where their loss is on."""
    arch: str = _schema("arch")  # an architecture of kjax/model/arch (what it builds, counts, ...)
    # biases on every projection and norm; a bias-free recipe's model clears it
    # (modern.py), and its architecture for the heads built on it (kjax/model/arch)
    use_bias: bool = True
    vocab_size: int = _schema("vocab_size")
    hidden_size: int = _schema("hidden_size")
    # E of the embedding tables; 0: hidden_size (ELECTRA-small: E < H)
    embedding_size: int = _schema("embedding_size")
    num_layers: int = _schema("num_layers")
    num_heads: int = _schema("num_heads")
    intermediate_size: int = _schema("intermediate_size")
    max_position_embeddings: int = _schema("max_position_embeddings")
    type_vocab_size: int = _schema("type_vocab_size")
    dropout_rate: float = _schema("dropout_rate")
    attention_dropout_rate: float = _schema("attention_dropout_rate")
    # one mask for every example and head (HF Flax)
    attention_dropout_broadcast: bool = _schema("attention_dropout_broadcast")
    layer_norm_eps: float = _schema("layer_norm_eps")
    initializer_range: float = _schema("initializer_range")
    input_mode: str = _schema("input_mode")  # a mode of kjax/inputs; it names the embedding path
    num_pos_tags: int = _schema("num_pos_tags")
    max_tokens_per_morpheme: int = _schema("max_tokens_per_morpheme")
    # Knowledge heads (METHODS §2.5), pretraining only.
    hypernym_head: bool = False
    sense_dim: int = 0
    verb_head: bool = False
    dtype: str = _schema("dtype")
    param_dtype: str = _schema("param_dtype")
    scan_layers: bool = _schema("scan_layers")
    scan_unroll: int = 1               # layers per scanned iteration; 0: all; -1 auto, unbuildable
    remat_policy: str = _schema("remat_policy")
    attention_impl: str = _schema("attention_impl")  # kjax/model/attention_core.py
    attention_tiles: tuple = ()        # ((signature, "F/DQ/DKV" or "table"), ...): flash_tuning.py
    # modern only (ModernBERT): RoPE bases, local window, global-layer period.
    rope_theta: float = _schema("rope_theta")
    local_rope_theta: float = _schema("local_rope_theta")
    local_attention: int = _schema("local_attention")
    global_attn_every_n_layers: int = _schema("global_attn_every_n_layers")
    # electra only: the generator's size (0: ELECTRA's rule, kjax/model/electra.py).
    generator_hidden_size: int = _schema("generator_hidden_size")
    generator_num_layers: int = _schema("generator_num_layers")
    generator_num_heads: int = _schema("generator_num_heads")
    generator_intermediate_size: int = _schema("generator_intermediate_size")
    # Eq. 1 boost factor: one value per layer (all equal for a scalar bf).
    shake_factor: tuple[float, ...] = ()

    @property
    def embed_dim(self) -> int:
        """Width of the embedding tables (projected to hidden_size when it differs)."""
        return self.embedding_size or self.hidden_size

    @property
    def projects_embeddings(self) -> bool:
        return self.embed_dim != self.hidden_size

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def global_layer(self, i: int) -> bool:
        """modern: layer i attends globally (ModernBERT: every third, from layer 0)."""
        return self.local_attention == 0 or i % self.global_attn_every_n_layers == 0

    @property
    def compute_dtype(self):
        return jnp.dtype(self.dtype)

    @property
    def weight_dtype(self):
        return jnp.dtype(self.param_dtype)

    @property
    def embedding(self) -> str:
        """The embedding path (kjax.model.encoder.EMBEDDINGS) the input mode uses:
        the model branches on this, never on mode names."""
        return input_mode(self.input_mode).embedding

    @property
    def shakes(self) -> bool:
        return any(bf != 0.0 for bf in self.shake_factor)

    @classmethod
    def from_config(cls, model_cfg, knowledge=None) -> "EncoderConfig":
        """From the `model` (and `knowledge`) branches of a kjax ConfigDict."""
        fields = {f.name for f in dataclasses.fields(cls)} - {
            "shake_factor", "hypernym_head", "sense_dim", "verb_head"}
        kwargs = {k: model_cfg[k] for k in fields if k in model_cfg}
        if knowledge is not None:  # heads exist only where their loss is on
            kwargs.update(hypernym_head=knowledge.hypernym_weight > 0,
                          verb_head=knowledge.verb_weight > 0,
                          sense_dim=knowledge.sense_dim if knowledge.sense_weight > 0 else 0)
        if "attention_tiles" in kwargs:   # a dict in the config; hashable here
            kwargs["attention_tiles"] = tuple(sorted(dict(kwargs["attention_tiles"]).items()))
        per_layer = tuple(model_cfg.get("shake_factor_per_layer", ()) or ())
        bf = per_layer or (float(model_cfg.get("shake_factor", 0.0)),) * kwargs["num_layers"]
        return cls(shake_factor=tuple(float(x) for x in bf), **kwargs)
