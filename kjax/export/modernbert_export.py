"""The modern recipe (model.arch=modern, kjax/model/modern.py) ⇄ transformers 5's
ModernBERT (`ModernBertForMaskedLM`), both ways, and its `kjax export` /
`kjax import`.

Every tensor maps one to one (kjax [in, out] kernels become torch [out, in]):

    embeddings.word_embeddings      model.embeddings.tok_embeddings (decoder tied)
    embeddings.layer_norm           model.embeddings.norm
    layer_i.attention.query/key/value  model.layers.i.attn.Wqkv (rows q | k | v, head-major)
    layer_i.attention.out           model.layers.i.attn.Wo
    layer_i.attention_norm (i > 0)  model.layers.i.attn_norm (layer 0 has none: Identity)
    layer_i.mlp_norm                model.layers.i.mlp_norm
    layer_i.mlp_in [H, 2, I]        model.layers.i.mlp.Wi (rows: GELU input | gate)
    layer_i.mlp_out                 model.layers.i.mlp.Wo
    final_norm                      model.final_norm
    mlm_transform, mlm_layer_norm   head.dense, head.norm
    mlm_bias                        decoder.bias

Norms have no bias, projections none (norm_bias/attention_bias/mlp_bias/
classifier_bias False). RoPE uses the same "rotate half" pairing, the local
window the same |q − k| ≤ local_attention // 2 and the layer pattern the same
i % global_attn_every_n_layers. Only one-hot input modes export (transformers'
ModernBERT embeds one token per position); shaking (Eq. 1) is a kjax-side
addition that the exported model does not carry.
"""
from __future__ import annotations

import json
import os

import numpy as np

from kjax.errors import KjaxError
from kjax.model.arch import architecture
from kjax.model.config import EncoderConfig

ARCHITECTURE = "ModernBertForMaskedLM"
MODEL_TYPE = "modernbert"   # config.json's, and the export format's name (formats.py)


def _layers(params: dict, enc: EncoderConfig):
    return [params["encoder"][f"layer_{i}"] for i in range(enc.num_layers)]


def params_to_state_dict(params: dict, enc: EncoderConfig) -> dict[str, np.ndarray]:
    """kjax params → ModernBertForMaskedLM state dict (the tied decoder weight left out)."""
    H = enc.hidden_size
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
    sd = {"model.embeddings.tok_embeddings.weight": f32(params["embeddings"]["word_embeddings"]
                                                        ["embedding"]),
          "model.embeddings.norm.weight": f32(params["embeddings"]["layer_norm"]["scale"]),
          "model.final_norm.weight": f32(params["encoder"]["final_norm"]["scale"]),
          "head.dense.weight": f32(params["mlm_transform"]["kernel"]).T,
          "head.norm.weight": f32(params["mlm_layer_norm"]["scale"]),
          "decoder.bias": f32(params["mlm_bias"])}
    for i, layer in enumerate(_layers(params, enc)):
        p, att = f"model.layers.{i}.", layer["attention"]
        sd[p + "attn.Wqkv.weight"] = np.concatenate(
            [f32(att[n]["kernel"]).reshape(H, H).T for n in ("query", "key", "value")])
        sd[p + "attn.Wo.weight"] = f32(att["out"]["kernel"]).reshape(H, H).T
        if i > 0:
            sd[p + "attn_norm.weight"] = f32(layer["attention_norm"]["scale"])
        sd[p + "mlp_norm.weight"] = f32(layer["mlp_norm"]["scale"])
        sd[p + "mlp.Wi.weight"] = f32(layer["mlp_in"]["kernel"]).reshape(H, -1).T
        sd[p + "mlp.Wo.weight"] = f32(layer["mlp_out"]["kernel"]).T
    return {k: np.ascontiguousarray(v) for k, v in sd.items()}


def state_dict_to_params(sd: dict, enc: EncoderConfig) -> dict:
    """The inverse of params_to_state_dict (numpy float32 arrays)."""
    H, h, d, I = enc.hidden_size, enc.num_heads, enc.head_dim, enc.intermediate_size
    t = lambda k: np.asarray(sd[k], np.float32)  # noqa: E731
    scale = lambda k: {"scale": t(k)}  # noqa: E731
    encoder = {"final_norm": scale("model.final_norm.weight")}
    for i in range(enc.num_layers):
        p = f"model.layers.{i}."
        q, k, v = np.split(t(p + "attn.Wqkv.weight"), 3)
        layer = {"attention": {**{n: {"kernel": w.T.reshape(H, h, d)}
                                  for n, w in zip(("query", "key", "value"), (q, k, v))},
                               "out": {"kernel": t(p + "attn.Wo.weight").T.reshape(h, d, H)}},
                 "mlp_norm": scale(p + "mlp_norm.weight"),
                 "mlp_in": {"kernel": t(p + "mlp.Wi.weight").T.reshape(H, 2, I)},
                 "mlp_out": {"kernel": t(p + "mlp.Wo.weight").T}}
        if i > 0:
            layer["attention_norm"] = scale(p + "attn_norm.weight")
        encoder[f"layer_{i}"] = layer
    return {"embeddings": {"word_embeddings": {"embedding": t(
                "model.embeddings.tok_embeddings.weight")},
                           "layer_norm": scale("model.embeddings.norm.weight")},
            "encoder": encoder,
            "mlm_transform": {"kernel": t("head.dense.weight").T},
            "mlm_layer_norm": scale("head.norm.weight"),
            "mlm_bias": t("decoder.bias")}


def modernbert_config(enc: EncoderConfig, dtype: str = "float32", special_ids=None):
    """transformers' ModernBertConfig for `enc` (`special_ids`: pad/cls/sep/bos/eos
    token ids of the tokenizer; default 0)."""
    from transformers import ModernBertConfig
    if architecture(enc).export_format != MODEL_TYPE:
        raise KjaxError(f"model.arch={enc.arch}: only the modern recipe exports to ModernBERT")
    ids = {"pad_token_id": 0, "cls_token_id": 0, "sep_token_id": 0, "bos_token_id": 0,
           "eos_token_id": 0, **(special_ids or {})}
    layer_types = ["full_attention" if enc.global_layer(i) else "sliding_attention"
                   for i in range(enc.num_layers)]
    return ModernBertConfig(
        vocab_size=enc.vocab_size, hidden_size=enc.hidden_size,
        intermediate_size=enc.intermediate_size, num_hidden_layers=enc.num_layers,
        num_attention_heads=enc.num_heads, hidden_activation="gelu",   # exact erf GELU
        classifier_activation="gelu", max_position_embeddings=enc.max_position_embeddings,
        initializer_range=enc.initializer_range, norm_eps=enc.layer_norm_eps, norm_bias=False,
        attention_bias=False, mlp_bias=False, classifier_bias=False, decoder_bias=True,
        attention_dropout=enc.attention_dropout_rate, embedding_dropout=enc.dropout_rate,
        mlp_dropout=enc.dropout_rate, local_attention=enc.local_attention or 128,
        global_attn_every_n_layers=enc.global_attn_every_n_layers, layer_types=layer_types,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": enc.rope_theta},
                         "sliding_attention": {"rope_type": "default",
                                               "rope_theta": enc.local_rope_theta}},
        tie_word_embeddings=True, architectures=[ARCHITECTURE], dtype=dtype,
        kjax_input_mode=enc.input_mode, **ids)


def encoder_config(hf: dict, base: EncoderConfig | None = None) -> EncoderConfig:
    """The kjax modern EncoderConfig a ModernBERT config.json describes."""
    import dataclasses
    if hf.get("model_type") != MODEL_TYPE:
        raise KjaxError(f"model_type {hf.get('model_type')!r} is not modernbert")
    for key in ("norm_bias", "attention_bias", "mlp_bias", "classifier_bias"):
        if hf.get(key):
            raise KjaxError(f"config.json {key}=true: kjax's modern recipe is bias-free")
    if not hf.get("decoder_bias", True) or hf.get("hidden_activation", "gelu") != "gelu":
        raise KjaxError("config.json: kjax needs decoder_bias=true and hidden_activation=gelu")
    types = hf["layer_types"]
    global_layers = [i for i, t in enumerate(types) if t == "full_attention"]
    every = global_layers[1] - global_layers[0] if len(global_layers) > 1 else len(types)
    if global_layers != list(range(0, len(types), every)):
        raise KjaxError(f"config.json layer_types {types}: kjax needs global layers at "
                        f"i % n == 0")
    rope = hf.get("rope_parameters") or {}
    theta = lambda kind, default: float((rope.get(kind) or {}).get("rope_theta", default))  # noqa
    return dataclasses.replace(
        base or EncoderConfig(), arch="modern", vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"], num_layers=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"], intermediate_size=hf["intermediate_size"],
        max_position_embeddings=hf["max_position_embeddings"], layer_norm_eps=hf["norm_eps"],
        local_attention=0 if len(global_layers) == len(types) else hf["local_attention"],
        global_attn_every_n_layers=every, rope_theta=theta("full_attention", 160_000.0),
        local_rope_theta=theta("sliding_attention", 10_000.0),
        dropout_rate=hf.get("mlp_dropout", 0.0), attention_dropout_rate=hf.get(
            "attention_dropout", 0.0))


def torch_model(params: dict, enc: EncoderConfig):
    """A ModernBertForMaskedLM (eval mode, fp32, eager attention) holding `params`."""
    import torch
    from transformers import ModernBertForMaskedLM
    model = ModernBertForMaskedLM(modernbert_config(enc))
    state = {k: torch.from_numpy(np.array(v)) for k, v in params_to_state_dict(params, enc).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"decoder.weight"}:
        raise KjaxError(f"ModernBERT weights do not match: missing {missing}, "
                        f"unexpected {unexpected}")
    model.tie_weights()
    return model.eval()


def jax_mlm_logits(params: dict, enc: EncoderConfig, input_ids, attention_mask) -> np.ndarray:
    """kjax's MLM logits at every position, fp32."""
    import dataclasses

    import jax.numpy as jnp
    model = architecture(enc).build(dataclasses.replace(enc, dtype="float32"))
    ids = jnp.asarray(input_ids)
    out = model.apply({"params": params}, ids, jnp.zeros_like(ids), jnp.asarray(attention_mask))
    return np.asarray(out["mlm_logits"])


def torch_mlm_logits(model, input_ids, attention_mask) -> np.ndarray:
    import torch
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor(np.asarray(input_ids), dtype=torch.long),
                    attention_mask=torch.as_tensor(np.asarray(attention_mask)))
    return out.logits.float().numpy()


def max_logit_diff(params: dict, enc: EncoderConfig, model, input_ids, attention_mask) -> float:
    """Largest |kjax − transformers| MLM logit over the real (unpadded) positions."""
    a = jax_mlm_logits(params, enc, input_ids, attention_mask)
    b = torch_mlm_logits(model, input_ids, attention_mask)
    real = np.asarray(attention_mask) > 0
    return float(np.abs(a - b)[real].max())


def write_modernbert(params: dict, enc: EncoderConfig, out_dir: str, dtype: str = "float32",
                     special_ids=None) -> list[str]:
    """config.json + model.safetensors that `AutoModelForMaskedLM` loads with no custom code."""
    import torch
    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    modernbert_config(enc, dtype, special_ids).save_pretrained(out_dir)
    tensors = {k: torch.from_numpy(np.array(v)).to(getattr(torch, dtype))
               for k, v in params_to_state_dict(params, enc).items()}
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    return sorted(tensors)


def read_modernbert(hf_dir: str, base: EncoderConfig | None = None):
    """(EncoderConfig, kjax params) from a local ModernBERT folder (safetensors)."""
    from safetensors.numpy import load_file
    with open(os.path.join(hf_dir, "config.json"), encoding="utf-8") as f:
        enc = encoder_config(json.load(f), base)
    tensors = load_file(os.path.join(hf_dir, "model.safetensors"))
    tensors = {k.removeprefix("_orig_mod."): v for k, v in tensors.items()}
    try:
        return enc, state_dict_to_params(tensors, enc)
    except KeyError as e:
        raise KjaxError(f"{hf_dir}/model.safetensors has no tensor {e.args[0]}") from None


def special_ids() -> dict:
    """ModernBERT's special-token ids for kjax's one-hot vocabularies
    (sentencepiece and morph-sp share the layout of kjax/tokens/sentencepiece.py)."""
    from kjax.tokens.sentencepiece import CLS, PAD, SEP
    return {"pad_token_id": PAD, "cls_token_id": CLS, "sep_token_id": SEP,
            "bos_token_id": CLS, "eos_token_id": SEP}


def export_checkpoint(config, workdir: str, out_dir: str, step: int | None = None,
                      dtype: str = "float32", with_heads: bool = True,
                      verify: bool = True, weights: str = "params") -> dict:
    """`kjax export` of a modern run: ModernBertForMaskedLM folder (weights,
    config, tokenizer, README), loaded back and compared with kjax (≤ 1e-5, fp32).
    Always with its MLM head: `with_heads=False` (--encoder-only) is refused."""
    if not with_heads:
        raise KjaxError("--encoder-only: a modern-recipe run exports as "
                        "ModernBertForMaskedLM, whose encoder AutoModel loads from the same "
                        "folder; drop --encoder-only")
    from transformers import AutoModelForMaskedLM

    from kjax import paths
    from kjax.checkpoint.restore import restore_params
    from kjax.export.tokenizer_export import export_tokenizer
    from kjax.inputs import input_mode
    from kjax.tokens.factory import local_tokenizer
    enc = EncoderConfig.from_config(config.model)
    if enc.embedding != "tokens":
        raise KjaxError(f"model.input_mode={enc.input_mode}: ModernBERT embeds one token per "
                        f"position; only one-hot modes of the modern recipe export")
    input_mode(config).export_check(config)
    params, step = restore_params(config, workdir, step, weights)
    with paths.staged_dir(out_dir) as local_out, local_tokenizer(config) as tok_config:
        tokenizer = export_tokenizer(tok_config, local_out, shown_as=out_dir)
        keys = write_modernbert(params, enc, local_out, dtype, special_ids())
        diff = None
        if verify:
            model = AutoModelForMaskedLM.from_pretrained(local_out, dtype="float32",
                                                         attn_implementation="eager").eval()
            rng = np.random.default_rng(0)
            length = min(enc.max_position_embeddings, 2 * max(enc.local_attention, 8) + 5)
            ids = rng.integers(5, enc.vocab_size, (2, length)) if enc.vocab_size > 5 else \
                np.zeros((2, length), np.int64)
            mask = np.ones((2, length), np.int64)
            mask[1, length * 2 // 3:] = 0
            diff = max_logit_diff(params, enc, model, ids, mask)
            limit = 1e-5 if dtype == "float32" else 5e-2 * max(1.0, float(np.abs(
                jax_mlm_logits(params, enc, ids, mask)).max()))
            if diff > limit:
                raise KjaxError(f"{out_dir}: transformers' ModernBERT disagrees with kjax (max "
                                f"abs logit diff {diff:.2e}); this is a kjax bug")
        with open(os.path.join(local_out, "README.md"), "w", encoding="utf-8") as f:
            f.write(f"---\nlanguage: ko\nlibrary_name: transformers\ntags: [modernbert, kjax, "
                    f"korean]\n---\n# {config.name} (kjax export, step {step})\n\nA modern "
                    f"encoder (ModernBERT recipe) pretrained with kjax (MLM, "
                    f"{config.data.masked_lm_prob:.0%} masking), {enc.num_layers} layers, "
                    f"hidden {enc.hidden_size}, context {enc.max_position_embeddings}.\n\n"
                    f"```python\nfrom transformers import AutoModelForMaskedLM\nmodel = "
                    f"AutoModelForMaskedLM.from_pretrained({out_dir!r})\n{tokenizer['usage']}"
                    f"\n```\n")
        with open(os.path.join(local_out, "kjax_export.json"), "w", encoding="utf-8") as f:
            json.dump({"workdir": workdir, "step": step, "weights": weights, "dtype": dtype,
                       "architecture": ARCHITECTURE, "tokenizer": tokenizer,
                       "verified_max_abs_diff": diff}, f, ensure_ascii=False, indent=1)
    return {"out": out_dir, "step": step, "weights": weights, "tensors": len(keys),
            "dtype": dtype,
            "architecture": ARCHITECTURE, "tokenizer": tokenizer["class"],
            "verified_max_abs_diff": diff}


def import_modernbert(hf_dir: str, workdir: str, base_config, config_out: str | None = None):
    """`kjax import` of a local ModernBERT folder: WORKDIR/checkpoints/0 + a config
    file with model.arch=modern (fresh AdamW state, step 0)."""
    import jax

    from kjax import paths
    from kjax.checkpoint.manager import Checkpointer
    from kjax.export.hf_import import FRESH_LOADER_STATE, write_config_file
    from kjax.objectives import check_config
    from kjax.parallel.mesh import make_mesh
    from kjax.train import ema
    from kjax.train.state import abstract_state, make_model, make_optimizer
    enc, params = read_modernbert(hf_dir, EncoderConfig.from_config(base_config.model))
    config = base_config.copy_and_resolve_references() if hasattr(
        base_config, "copy_and_resolve_references") else base_config
    for key in ("arch", "vocab_size", "hidden_size", "num_layers", "num_heads",
                "intermediate_size", "max_position_embeddings", "layer_norm_eps",
                "local_attention", "global_attn_every_n_layers", "rope_theta",
                "local_rope_theta", "dropout_rate", "attention_dropout_rate"):
        config.model[key] = getattr(enc, key)
    config.model.input_mode = "onehot"
    config.train.nsp_weight = 0.0
    config.data.max_seq_len = min(config.data.max_seq_len, enc.max_position_embeddings)
    check_config(config)
    ckpt_dir = paths.join(workdir, "checkpoints")
    if paths.listdir(ckpt_dir):
        raise KjaxError(f"{ckpt_dir} already holds checkpoints; pass an empty --out")
    tx = make_optimizer(config.train)
    target, shardings = abstract_state(config, make_mesh(config), make_model(config, False), tx)
    if jax.tree.structure(target["params"]) != jax.tree.structure(params):
        raise KjaxError(f"{hf_dir}: its tensors do not make kjax's modern model")
    _, dropout_rng = jax.random.split(jax.random.key(config.train.seed))
    state = ema.with_ema(config.train, {"step": np.zeros((), np.int32), "params": params,
                                        "opt_state": tx.init(params),
                                        "rng": jax.random.key_data(dropout_rng)})
    checkpoints = Checkpointer(ckpt_dir, config.train.checkpoint_every,
                               config.train.keep_checkpoints)
    checkpoints.save(0, jax.device_put(state, shardings), FRESH_LOADER_STATE, force=True)
    checkpoints.close()
    config_out = config_out or paths.join(workdir, "kjax_config.py")
    write_config_file(config, config_out, hf_dir)
    report = {"source": os.path.abspath(hf_dir), "model_type": MODEL_TYPE,
              "checkpoint": paths.join(ckpt_dir, "0"), "config": config_out}
    paths.write_text(paths.join(workdir, "import.json"),
                     json.dumps(report, ensure_ascii=False, indent=1))
    return report
