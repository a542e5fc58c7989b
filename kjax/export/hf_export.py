"""kjax params ⇄ transformers `BertForPreTraining` weights: the common writer.

transformers 5 has no Flax classes and no Flax↔PyTorch converter, so the
mapping lives here, in one table used in both directions (export and
`kjax import`). Every conversion is a transpose or a reshape: a round trip
is bit-exact in fp32.

    kjax                                   transformers (BERT)
    embeddings/word_embeddings/embedding   bert.embeddings.word_embeddings.weight
    attention/query/kernel [H, h, d]       …attention.self.query.weight [h·d, H]
    attention/out/kernel   [h, d, H]       …attention.output.dense.weight [H, h·d]
    mlp_in/kernel [H, I]                   …intermediate.dense.weight [I, H]
    */layer_norm/{scale,bias}              *.LayerNorm.{weight,bias}
    mlm_bias [V]                           cls.predictions.bias (decoder tied)

Which heads a folder holds is a set of kjax head params (`heads`): the ones
the run's objectives trained (kjax.objectives.trained_head_params), and the
class follows from it — MLM + NSP: BertForPreTraining; MLM alone:
BertForMaskedLM (no pooler: it trained only through NSP); none: BertModel.

Multi-hot models (input_mode='multihot') add E_inpos/E_postag and load through
remote code: multihot_export.py. ELECTRA (narrow_embedding_export.py) and `kjax export`
(checkpoint_export.py) build on this module; it imports neither.
"""
from __future__ import annotations

import os

import numpy as np

from kjax.errors import KjaxError
from kjax.export import multihot_export as mx
from kjax.model.config import EncoderConfig

# (transformers suffix, kjax path inside the module that owns it, conversion kind)
EMBEDDINGS = (
    ("embeddings.word_embeddings", ("embeddings", "word_embeddings"), "embed"),
    ("embeddings.position_embeddings", ("embeddings", "position_embeddings"), "embed"),
    ("embeddings.token_type_embeddings", ("embeddings", "token_type_embeddings"), "embed"),
    ("embeddings.LayerNorm", ("embeddings", "layer_norm"), "ln"),
)
LAYER = (
    ("attention.self.query", ("attention", "query"), "qkv"),
    ("attention.self.key", ("attention", "key"), "qkv"),
    ("attention.self.value", ("attention", "value"), "qkv"),
    ("attention.output.dense", ("attention", "out"), "attn_out"),
    ("attention.output.LayerNorm", ("attention_layer_norm",), "ln"),
    ("intermediate.dense", ("mlp_in",), "dense"),
    ("output.dense", ("mlp_out",), "dense"),
    ("output.LayerNorm", ("mlp_layer_norm",), "ln"),
)
POOLER = (("pooler.dense", ("pooler",), "dense"),)
# BertForPreTraining's heads (outside the `bert.` prefix); mlm_bias is separate.
BERT_HEADS = (
    ("cls.predictions.transform.dense", ("mlm_transform",), "dense"),
    ("cls.predictions.transform.LayerNorm", ("mlm_layer_norm",), "ln"),
    ("cls.seq_relationship", ("nsp",), "dense"),
)
BERT_MLM_BIAS = "cls.predictions.bias"
HEAD_PARAMS = ("mlm_transform", "mlm_layer_norm", "mlm_bias", "nsp")
# The kjax head params behind each transformers class (the `heads` arguments below).
MLM_HEAD = frozenset({"mlm_transform", "mlm_layer_norm", "mlm_bias"})
NSP_HEAD = frozenset({"pooler", "nsp"})
PRETRAINING = MLM_HEAD | NSP_HEAD      # BertForPreTraining
MASKED_LM = MLM_HEAD                   # BertForMaskedLM
ENCODER = frozenset({"pooler"})        # BertModel (--encoder-only)


def class_kind(heads) -> str:
    """"ForPreTraining", "ForMaskedLM" or "Model": the class suffix that holds
    exactly `heads` (BERT's and the multi-hot classes share it)."""
    if NSP_HEAD <= set(heads):
        return "ForPreTraining"
    return "ForMaskedLM" if MLM_HEAD <= set(heads) else "Model"


def encoder_only(heads) -> frozenset[str]:
    """What --encoder-only keeps of `heads`: the pooler, if it trained."""
    return frozenset(heads) & ENCODER


def _get(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def _set(tree: dict, path, value) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def module_to_torch(module: dict, kind: str, enc: EncoderConfig) -> dict[str, np.ndarray]:
    """One kjax module ({kernel,bias} / {scale,bias} / {embedding}) → {weight, bias}
    in torch layout (nn.Linear keeps weight as [out, in])."""
    H = enc.hidden_size
    if kind == "embed":
        return {"weight": np.asarray(module["embedding"])}
    if kind == "ln":
        return {"weight": np.asarray(module["scale"]), "bias": np.asarray(module["bias"])}
    kernel, bias = np.asarray(module["kernel"]), np.asarray(module["bias"])
    if kind == "qkv":
        kernel = kernel.reshape(H, -1)
    elif kind == "attn_out":
        kernel = kernel.reshape(-1, H)
    return {"weight": np.ascontiguousarray(kernel.T), "bias": bias.reshape(-1)}


def module_from_torch(tensors: dict, kind: str, enc: EncoderConfig) -> dict[str, np.ndarray]:
    """The inverse of `module_to_torch`."""
    heads, head_dim, H = enc.num_heads, enc.head_dim, enc.hidden_size
    if kind == "embed":
        return {"embedding": tensors["weight"]}
    if kind == "ln":
        return {"scale": tensors["weight"], "bias": tensors["bias"]}
    kernel, bias = np.ascontiguousarray(tensors["weight"].T), tensors["bias"]
    if kind == "qkv":
        kernel, bias = kernel.reshape(H, heads, head_dim), bias.reshape(heads, head_dim)
    elif kind == "attn_out":
        kernel = kernel.reshape(heads, head_dim, H)
    return {"kernel": kernel, "bias": bias}


def layer_params(params: dict, enc: EncoderConfig, i: int) -> dict:
    """Layer i's params whether the layers are scanned (leading axis) or not."""
    encoder = params["encoder"]
    if "layers" in encoder:
        import jax
        return jax.tree.map(lambda x: np.asarray(x)[i], encoder["layers"])
    return encoder[f"layer_{i}"]


def params_to_state_dict(params: dict, enc: EncoderConfig, heads=PRETRAINING,
                         prefix: str = "bert") -> dict[str, np.ndarray]:
    """kjax params → state dict of the class that holds `heads` (without the
    tied decoder): the encoder, and of the pooler and heads those in `heads`."""
    import flax.linen as nn
    params = nn.meta.unbox(params)  # straight from model.init: logical-axis boxes
    out: dict[str, np.ndarray] = {}

    def put(name, module, kind):
        for key, value in module_to_torch(module, kind, enc).items():
            out[f"{name}.{key}"] = value

    extra = mx.MULTIHOT_EMBEDDINGS if mx.is_multihot(enc) else ()
    pooler = POOLER if "pooler" in heads else ()
    for name, path, kind in EMBEDDINGS + extra + pooler:
        put(f"{prefix}.{name}", _get(params, path), kind)
    for i in range(enc.num_layers):
        layer = layer_params(params, enc, i)
        for name, path, kind in LAYER:
            put(f"{prefix}.encoder.layer.{i}.{name}", _get(layer, path), kind)
    for name, path, kind in BERT_HEADS:
        if path[0] in heads:
            put(name, _get(params, path), kind)
    if "mlm_bias" in heads:
        out[BERT_MLM_BIAS] = np.asarray(params["mlm_bias"])
    return out


def stack_layers(per_layer: list[dict], scan_layers: bool) -> dict:
    """Per-layer trees → the encoder subtree of a scanned or unscanned model."""
    if not scan_layers:
        return {f"layer_{i}": layer for i, layer in enumerate(per_layer)}
    import jax
    return {"layers": jax.tree.map(lambda *xs: np.stack(xs), *per_layer)}


def bert_config(enc: EncoderConfig, architecture: str, dtype: str):
    """A transformers BertConfig equal to `enc` (KjaxMultihotConfig for multi-hot
    models); the Eq. 1 factors ride along as `kjax_shake_factor` (used by
    attn_implementation="kjax_shake")."""
    from transformers import BertConfig
    kwargs = dict(
        vocab_size=enc.vocab_size, hidden_size=enc.hidden_size,
        num_hidden_layers=enc.num_layers, num_attention_heads=enc.num_heads,
        intermediate_size=enc.intermediate_size, hidden_act="gelu",  # exact erf GELU
        hidden_dropout_prob=enc.dropout_rate,
        attention_probs_dropout_prob=enc.attention_dropout_rate,
        max_position_embeddings=enc.max_position_embeddings,
        type_vocab_size=enc.type_vocab_size, initializer_range=enc.initializer_range,
        layer_norm_eps=enc.layer_norm_eps, pad_token_id=0, tie_word_embeddings=True,
        architectures=[architecture], dtype=dtype, kjax_input_mode=enc.input_mode,
        kjax_shake_factor=list(enc.shake_factor) or [0.0] * enc.num_layers)
    return mx.multihot_config(kwargs, enc) if mx.is_multihot(enc) else BertConfig(**kwargs)


def architecture(enc: EncoderConfig, heads=PRETRAINING) -> str:
    """The class this module writes for `heads` (a model with an embedding
    projection is written as ELECTRA instead: checkpoint_export.py chooses)."""
    return (mx.CLASS_PREFIX if mx.is_multihot(enc) else "Bert") + class_kind(heads)


def write_hf_model(params: dict, enc: EncoderConfig, out_dir: str, heads=PRETRAINING,
                   dtype: str = "float32") -> list[str]:
    """Writes config.json + model.safetensors that transformers loads with no
    custom code (multi-hot: with its remote code): the encoder and `heads`, as
    the class `architecture(enc, heads)` names."""
    import torch
    from safetensors.torch import save_file
    if dtype not in ("float32", "bfloat16"):
        raise KjaxError(f"--dtype {dtype!r}: choose float32 or bfloat16")
    os.makedirs(out_dir, exist_ok=True)
    bert_config(enc, architecture(enc, heads), dtype).save_pretrained(out_dir)
    if mx.is_multihot(enc):
        mx.write_remote_code(out_dir)
    torch_dtype = getattr(torch, dtype)
    tensors = {k: torch.from_numpy(np.array(v, np.float32)).to(torch_dtype)
               for k, v in params_to_state_dict(params, enc, heads).items()}
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    return sorted(tensors)


def jax_outputs(params: dict, enc: EncoderConfig, inputs: dict, shake=None) -> dict:
    """kjax BertForPreTraining outputs (MLM logits at every position) as numpy."""
    import dataclasses
    import jax
    import jax.numpy as jnp
    from kjax.model.encoder import BertForPreTraining
    model = BertForPreTraining(dataclasses.replace(enc, dtype="float32"))
    multihot = mx.jax_multihot(inputs) if mx.is_multihot(enc) else None
    # One compiled program: op-by-op dispatch recompiles every op for each new shape.
    out = jax.jit(model.apply)({"params": params}, jnp.asarray(inputs["input_ids"]),
                      jnp.asarray(inputs["token_type_ids"]), jnp.asarray(inputs["attention_mask"]),
                      position_ids=inputs.get("position_ids"),
                      shake=None if shake is None else jnp.asarray(shake), multihot=multihot)
    return {k: np.asarray(out[k]) for k in ("mlm_logits", "nsp_logits", "hidden", "pooled")}


def torch_outputs(model, inputs: dict, **kwargs) -> dict:
    """The same outputs from a transformers BertForPreTraining (all four),
    BertForMaskedLM (mlm_logits, hidden) or BertModel (hidden, pooled)."""
    import torch
    batch = {k: torch.as_tensor(np.asarray(v), dtype=torch.long) for k, v in inputs.items()}
    with torch.no_grad():
        if hasattr(model, "cls"):
            out = model(**batch, output_hidden_states=True, **kwargs)
            hidden = out.hidden_states[-1]
            result = {"hidden": hidden}
            if hasattr(out, "seq_relationship_logits"):
                result.update(mlm_logits=out.prediction_logits, pooled=model.bert.pooler(hidden),
                              nsp_logits=out.seq_relationship_logits)
            else:
                result["mlm_logits"] = out.logits
        else:
            out = model(**batch, **kwargs)
            result = {"hidden": out.last_hidden_state, "pooled": out.pooler_output}
    return {k: v.float().numpy() for k, v in result.items()}


def compared_outputs(heads) -> tuple[str, ...]:
    """The outputs of a folder holding `heads` that come from written weights."""
    return ("hidden", *(("pooled",) if "pooler" in heads else ()),
            *(("mlm_logits",) if MLM_HEAD <= set(heads) else ()),
            *(("nsp_logits",) if "nsp" in heads else ()))


def sample_inputs(enc: EncoderConfig, batch: int = 2, length: int | None = None,
                  seed: int = 0) -> dict:
    """Random ids with a [CLS] A [SEP] B [SEP] layout and right padding in row 1
    (multi-hot models: multihot_export.sample_multihot_inputs)."""
    if mx.is_multihot(enc):
        return mx.sample_multihot_inputs(enc, length or 16, seed)
    rng = np.random.default_rng(seed)
    length = min(length or 16, enc.max_position_embeddings)
    ids = rng.integers(5, enc.vocab_size, (batch, length))
    ids[:, 0], ids[:, length // 2], ids[:, -1] = 2, 3, 3
    types = np.zeros_like(ids)
    types[:, length // 2 + 1:] = min(1, enc.type_vocab_size - 1)
    mask = np.ones_like(ids)
    if batch > 1:
        mask[1, length - length // 4:] = 0
        ids[1, length - length // 4:] = 0
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def max_abs_diffs(a: dict, b: dict, attention_mask) -> dict[str, float]:
    """Max |a - b| per shared output; per-token outputs only at real tokens,
    per-example outputs only in rows with one. (transformers' sdpa attention
    differs from kjax on all-padding rows; "eager" agrees there too.)"""
    keep = np.asarray(attention_mask, bool)
    real = keep.any(-1)   # a filler row (no real token) has no defined output
    diffs = {}
    for key in sorted(set(a) & set(b)):
        x, y = np.asarray(a[key], np.float64), np.asarray(b[key], np.float64)
        x, y = (x[keep], y[keep]) if x.ndim == 3 else (x[real], y[real])
        diffs[key] = float(np.max(np.abs(x - y)))
    return diffs


def verify_export(params: dict, enc: EncoderConfig, out_dir: str, heads, dtype: str,
                  tolerance: float = 1e-4) -> dict[str, float]:
    """Loads the folder with transformers (fp32 compute), as the class it was
    written as, and compares every output of its written weights with kjax on
    a random batch; bf16 exports are compared with bf16-rounded params."""
    import jax
    import torch
    from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining
    if dtype == "bfloat16":
        params = jax.tree.map(lambda x: np.asarray(torch.from_numpy(np.array(x, np.float32))
                                                   .bfloat16().float()), params)
    loader = {"ForPreTraining": AutoModelForPreTraining, "ForMaskedLM": AutoModelForMaskedLM,
              "Model": AutoModel}[class_kind(heads)]
    model = loader.from_pretrained(out_dir, dtype=torch.float32,   # our own remote code
                                   trust_remote_code=mx.is_multihot(enc)).eval()
    inputs = sample_inputs(enc)
    compared = compared_outputs(heads)
    want = {k: v for k, v in jax_outputs(params, enc, inputs).items() if k in compared}
    diffs = max_abs_diffs(want, torch_outputs(model, inputs), inputs["attention_mask"])
    if max(diffs.values()) > tolerance:
        raise KjaxError(f"{out_dir}: transformers disagrees with kjax (max abs diff {diffs}); "
                        f"this is a kjax bug — report it with the config")
    return diffs
