"""Models whose embeddings are narrower than the encoder (model.embedding_size
< hidden_size, KoELECTRA-small style) ⇄ transformers ELECTRA.

BERT has no embedding projection, so `kjax export` writes these as ELECTRA:
`ElectraForMaskedLM` (the default), or with --encoder-only `ElectraModel`
(the encoder). ElectraForMaskedLM's generator head is kjax's MLM head exactly
(dense H → E, GELU, LayerNorm over E, decoder tied to E_word, bias):

    kjax                                 transformers (ELECTRA)
    embeddings/*  (E wide)               electra.embeddings.*
    embeddings/embeddings_project        electra.embeddings_project
    encoder layers                       electra.encoder.layer.i.*   (BERT's names)
    mlm_transform, mlm_layer_norm        generator_predictions.dense, .LayerNorm
    mlm_bias                             generator_lm_head.bias

ELECTRA has no pooler and no NSP head: kjax's are not written (a fine-tuned
classifier gets a new head either way). `kjax import` reads both back.
"""
from __future__ import annotations

import os

import numpy as np

from kjax.errors import KjaxError
from kjax.export import hf_export as hx
from kjax.model.config import EncoderConfig

HEADS = (("generator_predictions.dense", ("mlm_transform",), "dense"),
         ("generator_predictions.LayerNorm", ("mlm_layer_norm",), "ln"))
MLM_BIAS = "generator_lm_head.bias"
PROJECT = ("embeddings_project", ("embeddings", "embeddings_project"), "dense")


def architecture(with_heads: bool) -> str:
    return "ElectraForMaskedLM" if with_heads else "ElectraModel"


def electra_config(enc: EncoderConfig, with_heads: bool, dtype: str):
    from transformers import ElectraConfig
    bert = hx.bert_config(enc, architecture(with_heads), dtype).to_dict()
    keep = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "intermediate_size", "hidden_act", "hidden_dropout_prob",
            "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
            "initializer_range", "layer_norm_eps", "pad_token_id", "tie_word_embeddings",
            "architectures", "dtype", "kjax_input_mode", "kjax_shake_factor")
    return ElectraConfig(embedding_size=enc.embed_dim, **{k: bert[k] for k in keep})


def params_to_state_dict(params: dict, enc: EncoderConfig, with_heads: bool) -> dict:
    import flax.linen as nn
    params = nn.meta.unbox(params)
    out = hx.params_to_state_dict(params, enc, frozenset(), prefix="electra")   # no pooler
    name, path, kind = PROJECT
    for key, value in hx.module_to_torch(hx._get(params, path), kind, enc).items():
        out[f"electra.{name}.{key}"] = value
    if with_heads:
        for name, path, kind in HEADS:
            for key, value in hx.module_to_torch(hx._get(params, path), kind, enc).items():
                out[f"{name}.{key}"] = value
        out[MLM_BIAS] = np.asarray(params["mlm_bias"])
    return out


def write_electra(params: dict, enc: EncoderConfig, out_dir: str, with_heads: bool,
                  dtype: str = "float32") -> list[str]:
    import torch
    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    electra_config(enc, with_heads, dtype).save_pretrained(out_dir)
    tensors = {k: torch.from_numpy(np.array(v, np.float32)).to(getattr(torch, dtype))
               for k, v in params_to_state_dict(params, enc, with_heads).items()}
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    return sorted(tensors)


def torch_outputs(model, inputs: dict) -> dict:
    """hidden (and mlm_logits for ElectraForMaskedLM) as numpy."""
    import torch
    batch = {k: torch.as_tensor(np.asarray(v), dtype=torch.long) for k, v in inputs.items()}
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    result = {"hidden": out.hidden_states[-1]}
    if hasattr(out, "logits"):
        result["mlm_logits"] = out.logits
    return {k: v.float().numpy() for k, v in result.items()}


def verify_electra(params: dict, enc: EncoderConfig, out_dir: str, with_heads: bool,
                   dtype: str, tolerance: float = 1e-4) -> dict[str, float]:
    """As hf_export.verify_export: the folder loaded back agrees with kjax."""
    import jax
    import torch
    from transformers import AutoModel, AutoModelForMaskedLM
    if dtype == "bfloat16":
        params = jax.tree.map(lambda x: np.asarray(torch.from_numpy(np.array(x, np.float32))
                                                   .bfloat16().float()), params)
    loader = AutoModelForMaskedLM if with_heads else AutoModel
    model = loader.from_pretrained(out_dir, dtype=torch.float32).eval()
    inputs = hx.sample_inputs(enc)
    want = {k: v for k, v in hx.jax_outputs(params, enc, inputs).items()
            if k in ("hidden", "mlm_logits")}
    diffs = hx.max_abs_diffs(want, torch_outputs(model, inputs), inputs["attention_mask"])
    if max(diffs.values()) > tolerance:
        raise KjaxError(f"{out_dir}: transformers disagrees with kjax (max abs diff {diffs}); "
                        f"this is a kjax bug — report it with the config")
    return diffs
