"""Architectures (`model.arch`): which encoder recipe a run trains. One module
per architecture defines one object (kjax/model/arch/base.py says what it
owns); this registry is the only place that lists them. Adding one is one
new module and one line below (docs/ARCHITECTURE.md has a worked example).

    bert      post-LN, GELU, learned positions, token types, NSP (kjax/model/encoder.py)
    modern    ModernBERT: pre-LN, RoPE, GeGLU, no biases, local/global attention
              (kjax/model/modern.py)
    electra   a BERT-recipe discriminator against a small generator (kjax/model/electra.py)
"""
from __future__ import annotations

from kjax.config.schema import MODEL
from kjax.errors import KjaxError
from kjax.model.arch import bert, electra, modern
from kjax.model.arch.base import Architecture
from kjax.model.config import EncoderConfig

ARCHITECTURES: dict[str, Architecture] = {
    "bert": bert.ARCH,
    "modern": modern.ARCH,
    "electra": electra.ARCH,
}


def architecture(config_or_name) -> Architecture:
    """The architecture a name, a config (model.arch), its `model` branch or an
    EncoderConfig selects (a branch without the key: the schema's default)."""
    if isinstance(config_or_name, str):
        name = config_or_name
    elif isinstance(config_or_name, EncoderConfig):
        name = config_or_name.arch
    else:
        branch = config_or_name.model if "model" in config_or_name else config_or_name
        name = branch.get("arch", MODEL["arch"].default)
    if name not in ARCHITECTURES:
        raise KjaxError(f"model.arch={name!r}; choose one of {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[name]


__all__ = ["ARCHITECTURES", "Architecture", "architecture"]
