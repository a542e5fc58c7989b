"""The encoder's hyper-parameters as a frozen (hashable) dataclass, so Flax
modules can hold it and `nn.scan`/`jax.jit` can treat it as static."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from kjax.config.schema import ATTENTION_IMPLS  # noqa: F401 (kjax/model/attention_core.py)
from kjax.config.platform_defaults import resolved_value
from kjax.config.schema import ARCHS  # noqa: F401 (kjax/train/state.py)
from kjax.inputs import input_mode


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    arch: str = "bert"                 # bert (encoder.py) | modern (modern.py)
    vocab_size: int = 32000
    hidden_size: int = 768
    embedding_size: int = 0           # E of the embedding tables; 0: hidden_size (ELECTRA-small: E < H)
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    attention_dropout_broadcast: bool = False   # one mask for every example and head (HF Flax)
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    input_mode: str = "onehot"        # a mode of kjax/inputs; it names the embedding path
    num_pos_tags: int = 64
    max_tokens_per_morpheme: int = 16
    # Knowledge heads (METHODS §2.5), pretraining only.
    hypernym_head: bool = False
    sense_dim: int = 0
    verb_head: bool = False
    dtype: str = "bfloat16"
    param_dtype: str = "float32"
    scan_layers: bool = True
    scan_unroll: int = 1               # layers per scanned iteration; 0: all (no loop)
    remat_policy: str = "none"
    attention_impl: str = "auto"       # kjax/model/attention_core.py
    attention_tiles: tuple = ()        # ((signature, "F/DQ/DKV" or "table"), ...): flash_tuning.py
    # modern only (ModernBERT): RoPE bases, local window, global-layer period.
    rope_theta: float = 160_000.0
    local_rope_theta: float = 10_000.0
    local_attention: int = 128
    global_attn_every_n_layers: int = 3
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

    @property
    def use_bias(self) -> bool:
        """BERT's projections carry biases; the modern recipe's have none."""
        return self.arch == "bert"

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
        if "scan_unroll" in kwargs:   # -1: the platform's (kjax/config/platform_defaults.py)
            kwargs["scan_unroll"] = resolved_value("model.scan_unroll", kwargs["scan_unroll"])
        if "attention_tiles" in kwargs:   # a dict in the config; hashable here
            kwargs["attention_tiles"] = tuple(sorted(dict(kwargs["attention_tiles"]).items()))
        per_layer = tuple(model_cfg.get("shake_factor_per_layer", ()) or ())
        bf = per_layer or (float(model_cfg.get("shake_factor", 0.0)),) * kwargs["num_layers"]
        return cls(shake_factor=tuple(float(x) for x in bf), **kwargs)
