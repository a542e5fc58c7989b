"""Export of multi-hot (UKnowBERT, METHODS §2.3) models: what differs from
the plain BERT export in hf_export.py.

- two more tables: E_inpos and E_postag (Eq. 3–4), under bert.embeddings.*;
- config.json is a `KjaxMultihotConfig` (model_type "kjax_multihot") whose
  auto_map points at modeling_kjax_multihot.py, a copy of torch_multihot.py
  written into the folder, so transformers loads it with trust_remote_code;
- model inputs are kjax's multi-hot arrays (flat token stream + positions).
"""
from __future__ import annotations

import os
import shutil

import numpy as np

from kjax.inputs import input_mode
from kjax.model.config import EncoderConfig

MULTIHOT_EMBEDDINGS = (
    ("embeddings.inpos_embeddings", ("embeddings", "inpos_embeddings"), "embed"),
    ("embeddings.postag_embeddings", ("embeddings", "postag_embeddings"), "embed"),
)
MODEL_TYPE = "kjax_multihot"
REMOTE_MODULE = "modeling_kjax_multihot"
MULTIHOT_INPUTS = ("token_position", "token_inpos", "position_tags")


def is_multihot(enc: EncoderConfig) -> bool:
    """Whether the model's input mode exports as a kjax multi-hot model (its
    `export_format`, kjax/inputs)."""
    return input_mode(enc.input_mode).export_format == MODEL_TYPE


CLASS_PREFIX = "KjaxMultihot"   # + ForPreTraining / ForMaskedLM / Model (hf_export.class_kind)


def multihot_config(bert_kwargs: dict, enc: EncoderConfig):
    """KjaxMultihotConfig with an auto_map into the folder's remote code."""
    from kjax.export.torch_multihot import AUTO_MAP, KjaxMultihotConfig
    return KjaxMultihotConfig(
        **bert_kwargs, num_pos_tags=enc.num_pos_tags,
        max_tokens_per_morpheme=enc.max_tokens_per_morpheme,
        auto_map={auto: f"{REMOTE_MODULE}.{cls}" for auto, cls in AUTO_MAP.items()})


def write_remote_code(out_dir: str) -> str:
    """transformers imports remote code from the folder itself, so the module
    travels with the weights (it needs only torch and transformers)."""
    from kjax.export import torch_multihot
    target = os.path.join(out_dir, REMOTE_MODULE + ".py")
    shutil.copyfile(torch_multihot.__file__, target)
    return target


def jax_multihot(inputs: dict) -> dict:
    """The `multihot` argument of kjax's BertForPreTraining from export-style inputs
    (where input_ids is the flat token stream, as in the PyTorch module)."""
    import jax.numpy as jnp
    return {"token_ids": jnp.asarray(inputs["input_ids"]),
            **{k: jnp.asarray(inputs[k]) for k in MULTIHOT_INPUTS}}


def sample_multihot_inputs(enc: EncoderConfig, length: int = 16, seed: int = 0) -> dict:
    """Three rows of random morphemes of 1–3 tokens (and one longer than
    max_tokens_per_morpheme, whose extra tokens share the last E_inpos row):
    row 0 full, row 1 padded positions and filler tokens (position -1), row 2
    a filler row of zeros as kjax's loader appends to a short last batch."""
    rng = np.random.default_rng(seed)
    length = min(length, enc.max_position_embeddings)
    rows = []
    for n_pos in (length, length - length // 3):
        sizes = [1] + list(rng.integers(1, 4, n_pos - 2)) + [1]   # [CLS] … [SEP]
        sizes[1] = enc.max_tokens_per_morpheme + 1
        owner = np.repeat(np.arange(n_pos), sizes)
        inpos = np.concatenate([np.arange(n) for n in sizes])
        ids = rng.integers(5, enc.vocab_size, len(owner))
        ids[0], ids[-1] = 2, 3
        t = max(length * 3, len(owner))
        pad = lambda x, v: np.pad(x, (0, t - len(x)), constant_values=v)  # noqa: E731
        types = np.zeros(length, np.int64)
        types[n_pos // 2:n_pos] = min(1, enc.type_vocab_size - 1)
        rows.append({"input_ids": pad(ids, 0), "token_position": pad(owner, -1),
                     "token_inpos": pad(inpos, 0),
                     "position_tags": pad(rng.integers(0, enc.num_pos_tags, n_pos), 0)[:length],
                     "token_type_ids": types,
                     "attention_mask": pad(np.ones(n_pos, np.int64), 0)[:length]})
    t = max(len(r["input_ids"]) for r in rows)
    for r in rows:
        for k in ("input_ids", "token_position", "token_inpos"):
            r[k] = np.pad(r[k], (0, t - len(r[k])), constant_values=-1 if k ==
                          "token_position" else 0)
    rows.append({k: np.zeros_like(v) for k, v in rows[0].items()})
    return {k: np.stack([r[k] for r in rows]).astype(np.int64) for k in rows[0]}
