"""`kjax export` of an ELECTRA run (model.arch='electra', kjax/model/electra.py):
two transformers folders under --out, each loaded back and compared with kjax.

    OUT/discriminator   ElectraForPreTraining: the encoder and its RTD head
                        (--encoder-only: ElectraModel, and no generator)
    OUT/generator       ElectraForMaskedLM: the generator and its MLM head

Each folder holds the shared embedding tables (transformers ties them inside
one model, not across two) and its own embeddings_project where E differs
from its width. Names, on top of narrow_embedding_export.py's table:

    kjax                                        transformers
    discriminator_predictions/dense             discriminator_predictions.dense
    discriminator_predictions/dense_prediction  discriminator_predictions.dense_prediction
    generator/encoder, generator/mlm_*          (the generator folder's) electra.encoder, …

Fine-tune the discriminator; `kjax import --hf OUT/discriminator` reads its
encoder back as a BERT-recipe encoder (narrow_embedding_export.py), and so does
`kjax finetune --init` of the run itself (the task model's `bert` subtree).
"""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from kjax.errors import KjaxError
from kjax.export import hf_export as hx
from kjax.export import narrow_embedding_export as ne
from kjax.export.model_card import write_model_card
from kjax.export.tokenizer_export import export_tokenizer
from kjax.model.config import EncoderConfig
from kjax.model.electra import discriminator_config, generator_config

RTD_HEAD = (("discriminator_predictions.dense", ("discriminator_predictions", "dense"), "dense"),
            ("discriminator_predictions.dense_prediction",
             ("discriminator_predictions", "dense_prediction"), "dense"))
TABLES = ("word_embeddings", "position_embeddings", "token_type_embeddings", "layer_norm")


def side(params: dict, enc: EncoderConfig, name: str) -> tuple[dict, EncoderConfig]:
    """(BERT-layout params, encoder config) of one side of the run."""
    if name == "discriminator":
        return {k: params[k] for k in ("embeddings", "encoder", "discriminator_predictions")}, \
            discriminator_config(enc)
    gen = params["generator"]
    embeddings = {k: params["embeddings"][k] for k in TABLES}
    if "embeddings_project" in gen:
        embeddings["embeddings_project"] = gen["embeddings_project"]
    return {"embeddings": embeddings, **{k: gen[k] for k in gen if k != "embeddings_project"}}, \
        generator_config(enc)


def state_dict(params: dict, enc: EncoderConfig, heads) -> dict[str, np.ndarray]:
    """transformers ELECTRA tensors of one side: the encoder (prefix electra.),
    its projection if any, and `heads` (RTD_HEAD or narrow_embedding_export.HEADS)."""
    import flax.linen as nn
    params = nn.meta.unbox(params)
    out = hx.params_to_state_dict(params, enc, frozenset(), prefix="electra")   # no pooler
    parts = ((("electra.embeddings_project",) + ne.PROJECT[1:],)
             if enc.projects_embeddings else ()) + tuple(heads)
    for name, path, kind in parts:
        for key, value in hx.module_to_torch(hx._get(params, path), kind, enc).items():
            out[f"{name}.{key}"] = value
    if tuple(heads) == ne.HEADS:
        out[ne.MLM_BIAS] = np.asarray(params["mlm_bias"])
    return out


def write_side(params: dict, enc: EncoderConfig, out_dir: str, architecture: str,
               heads, dtype: str) -> list[str]:
    import torch
    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    config = ne.electra_config(enc, architecture == "ElectraForMaskedLM", dtype)
    config.architectures = [architecture]
    config.save_pretrained(out_dir)
    tensors = {k: torch.from_numpy(np.array(v, np.float32)).to(getattr(torch, dtype))
               for k, v in state_dict(params, enc, heads).items()}
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    return sorted(tensors)


def kjax_outputs(params: dict, enc: EncoderConfig, inputs: dict) -> dict:
    """The run's model on `inputs` with nothing masked (nothing replaced):
    each side's last hidden state, the generator's MLM logits and the RTD logits."""
    import jax
    import jax.numpy as jnp
    from kjax.model.electra import ElectraForPreTraining
    model = ElectraForPreTraining(dataclasses.replace(enc, dtype="float32"))
    out = jax.jit(model.apply)({"params": params}, *(jnp.asarray(inputs[k]) for k in (
        "input_ids", "token_type_ids", "attention_mask")))
    return {"discriminator": {"hidden": out["hidden"], "logits": out["rtd_logits"][..., None]},
            "generator": {"hidden": out["generator_hidden"], "logits": out["mlm_logits"]}}


def torch_outputs(model, inputs: dict) -> dict:
    import torch
    batch = {k: torch.as_tensor(np.asarray(v), dtype=torch.long) for k, v in inputs.items()}
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    result = {"hidden": out.hidden_states[-1]}
    if hasattr(out, "logits"):   # the RTD logits [b, s] get a feature axis: per token
        result["logits"] = out.logits if out.logits.ndim == 3 else out.logits[..., None]
    return {k: v.float().numpy() for k, v in result.items()}


def verify_sides(params: dict, enc: EncoderConfig, folders: dict, dtype: str,
           tolerance: float = 1e-4) -> dict[str, dict[str, float]]:
    """Each folder loaded by transformers' own class agrees with kjax (bf16
    exports: against bf16-rounded params)."""
    import jax
    import torch
    from transformers import ElectraForMaskedLM, ElectraForPreTraining, ElectraModel
    if dtype == "bfloat16":
        params = jax.tree.map(lambda x: np.asarray(torch.from_numpy(np.array(x, np.float32))
                                                   .bfloat16().float()), params)
    classes = {"ElectraForPreTraining": ElectraForPreTraining, "ElectraModel": ElectraModel,
               "ElectraForMaskedLM": ElectraForMaskedLM}
    inputs = hx.sample_inputs(enc)
    want = kjax_outputs(params, enc, inputs)
    diffs = {}
    for name, (folder, architecture) in folders.items():
        model = classes[architecture].from_pretrained(folder, dtype=torch.float32).eval()
        diffs[name] = hx.max_abs_diffs(want[name], torch_outputs(model, inputs),
                                       inputs["attention_mask"])
        if max(diffs[name].values()) > tolerance:
            raise KjaxError(f"{folder}: transformers disagrees with kjax (max abs diff "
                            f"{diffs[name]}); this is a kjax bug — report it with the config")
    return diffs


CARD = {"discriminator": (
    "This folder is the discriminator of an ELECTRA run ({architecture}: the encoder{head}); "
    "the generator that trained with it is `{sibling}` (ElectraForMaskedLM). Fine-tune this "
    "one: {layers} layers, hidden {hidden}, {heads} heads, embeddings {embed} wide."),
    "generator": (
    "This folder is the generator of an ELECTRA run ({architecture}: {layers} layers, hidden "
    "{hidden}, {heads} heads, FFN {ffn}, embeddings {embed} wide; the Model line above "
    "describes the discriminator), which sampled the replacements the discriminator `{sibling}` "
    "learnt to detect. Its fill-mask answers are the generator's.")}
RTD_USAGE = ["import torch", "from transformers import AutoTokenizer, ElectraForPreTraining", "",
             "folder = {folder!r}", "tokenizer = AutoTokenizer.from_pretrained(folder)",
             "model = ElectraForPreTraining.from_pretrained(folder).eval()",
             "inputs = tokenizer(\"대한민국의 수도는 부산이다.\", return_tensors=\"pt\")",
             "with torch.no_grad():",
             "    replaced = model(**inputs).logits > 0          # [1, tokens]: True = replaced",
             "print(replaced.int().tolist())"]


def add_card_section(folder: str, name: str, enc: EncoderConfig, architecture: str,
                     shown_as: str, sibling: str) -> None:
    """The model card's ELECTRA part: which side this is, its sizes, and (the
    discriminator) code that runs its replaced-token head."""
    path = os.path.join(folder, "README.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    rtd = architecture == "ElectraForPreTraining"
    if rtd:   # the card was asked for the encoder's usage: it holds the RTD head too
        text = text.replace(", encoder only.", ", with its replaced-token-detection head.", 1)
    lines = ["## ELECTRA", CARD[name].format(
        architecture=architecture, head=" and its replaced-token-detection head" if rtd else "",
        sibling=sibling, layers=enc.num_layers, hidden=enc.hidden_size, heads=enc.num_heads,
        ffn=enc.intermediate_size, embed=enc.embed_dim), ""]
    if rtd:
        lines += ["```python", *(line.format(folder=shown_as) for line in RTD_USAGE), "```", ""]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.rstrip("\n") + "\n\n" + "\n".join(lines))


def export_electra(config, workdir: str, out_dir: str, step: int | None = None,
                   dtype: str = "float32", with_heads: bool = True, verify: bool = True,
                   weights: str = "params") -> dict:
    """`kjax export` of an ELECTRA run: OUT/discriminator and OUT/generator."""
    from kjax import paths
    from kjax.checkpoint.restore import restore_params
    from kjax.objectives import objectives_title
    from kjax.tokens.factory import local_tokenizer
    if dtype not in ("float32", "bfloat16"):
        raise KjaxError(f"--dtype {dtype!r}: choose float32 or bfloat16")
    enc = EncoderConfig.from_config(config.model)
    params, step = restore_params(config, workdir, step, weights)
    sides = {"discriminator": ("ElectraForPreTraining" if with_heads else "ElectraModel",
                               RTD_HEAD if with_heads else ())}
    if with_heads:
        sides["generator"] = ("ElectraForMaskedLM", ne.HEADS)
    result = {"out": out_dir, "step": step, "weights": weights, "dtype": dtype, "folders": {}}
    with paths.staged_dir(out_dir) as local_out, local_tokenizer(config) as tok_config:
        folders, tensors = {}, {}
        for name, (architecture, heads) in sides.items():
            folder, shown_as = os.path.join(local_out, name), paths.join(out_dir, name)
            tokenizer = export_tokenizer(tok_config, folder, shown_as=shown_as)
            side_params, side_enc = side(params, enc, name)
            tensors[name] = write_side(side_params, side_enc, folder, architecture, heads, dtype)
            folders[name] = (folder, architecture)
            write_model_card(config, workdir, folder, step, architecture,
                             name == "generator", dtype, tokenizer, shown_as=shown_as,
                             pooler=True,   # (ELECTRA has no pooler: no note about one)
                             weights=weights)
            sibling = paths.join(out_dir, "generator" if name == "discriminator"
                                 else "discriminator")
            add_card_section(folder, name, side_enc, architecture, shown_as, sibling)
        diffs = verify_sides(params, enc, folders, dtype) if verify else {}
        for name, (folder, architecture) in folders.items():
            record = {"workdir": workdir if paths.is_remote(workdir) else os.path.abspath(workdir),
                      "step": step, "weights": weights, "dtype": dtype,
                      "architecture": architecture,
                      "objectives": objectives_title(config), "side": name,
                      "with_pretraining_heads": with_heads, "tokenizer": tokenizer,
                      "verified_max_abs_diff": diffs.get(name)}
            with open(os.path.join(folder, "kjax_export.json"), "w", encoding="utf-8") as f:
                json.dump(record, f, ensure_ascii=False, indent=1)
            result["folders"][name] = {"out": paths.join(out_dir, name),
                                       "architecture": architecture,
                                       "tensors": len(tensors[name]),
                                       "verified_max_abs_diff": diffs.get(name)}
    result["tokenizer"] = tokenizer["class"]
    return result
