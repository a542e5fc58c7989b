"""`kjax import` of an ELECTRA pair: a discriminator folder and a generator
folder (transformers ElectraForPreTraining + ElectraForMaskedLM, as `kjax
export` of an ELECTRA run writes them, or as KoELECTRA publishes them) → one
kjax run with `model.arch='electra'` (kjax/model/electra.py).

    kjax import --hf OUT --out W                   OUT/discriminator + OUT/generator
    kjax import --hf DISC --generator GEN --out W  two folders named apart

    transformers                                      kjax
    (discriminator) electra.embeddings.*              embeddings/* (the shared tables)
    (discriminator) electra.embeddings_project,       embeddings/embeddings_project,
                    electra.encoder                   encoder
    (discriminator) discriminator_predictions.*       discriminator_predictions/*
    (generator)     electra.embeddings_project,       generator/embeddings_project,
                    electra.encoder                   generator/encoder
    (generator)     generator_predictions.*,          generator/mlm_transform, mlm_layer_norm,
                    generator_lm_head.bias            generator/mlm_bias

kjax ties the generator's embedding tables to the discriminator's, so the
two folders' copies must be equal, and the generator may differ from the
discriminator only in the four sizes kjax gives it (model.generator_*).
Everything else — tokenizer, recorded config, import.json, the "imported"
origin a phase's lineage reports — is hf_import.py's.
"""
from __future__ import annotations

import json
import os

import numpy as np

from kjax import paths
from kjax.errors import KjaxError
from kjax.export import hf_import as hi
from kjax.export.electra_pair_export import RTD_HEAD
from kjax.export.hf_export import EMBEDDINGS, _get, _set, module_from_torch

PAIR = ("discriminator", "generator")
MODEL_TYPE = "electra"   # transformers' model_type of both folders
# HF generator config key → the kjax key that holds it (kjax/model/electra.py generator_config).
OWN = {"hidden_size": "generator_hidden_size", "num_hidden_layers": "generator_num_layers",
       "num_attention_heads": "generator_num_heads",
       "intermediate_size": "generator_intermediate_size"}
# What the generator takes from the discriminator's config in kjax, with ElectraConfig's defaults.
SHARED = {"vocab_size": None, "max_position_embeddings": 512, "type_vocab_size": 2,
          "layer_norm_eps": 1e-12, "hidden_dropout_prob": 0.1,
          "attention_probs_dropout_prob": 0.1, "kjax_input_mode": None}


def pair_folders(hf_dir: str, generator: str | None) -> tuple[str, str] | None:
    """(discriminator, generator) folders when `kjax import` was given a pair:
    --generator, or an --hf folder holding discriminator/ and generator/; else None."""
    if generator:
        return hf_dir, generator
    if os.path.isfile(os.path.join(hf_dir, "config.json")):
        return None
    sub = {name: os.path.join(hf_dir, name) for name in PAIR}
    present = {name: os.path.isfile(os.path.join(d, "config.json")) for name, d in sub.items()}
    if present["discriminator"] and not present["generator"]:
        raise KjaxError(f"{hf_dir} holds discriminator/ but no generator/ (an --encoder-only "
                        f"export?); pass --hf {sub['discriminator']} to import the encoder "
                        f"alone, or name the generator with --generator DIR")
    return (sub["discriminator"], sub["generator"]) if all(present.values()) else None


def read_pair(disc_dir: str, gen_dir: str) -> tuple[dict, dict]:
    """Both folders' configs, refused in one line unless kjax can hold them as one run."""
    hfs = {}
    for name, folder in zip(PAIR, (disc_dir, gen_dir)):
        hf = {**hi.read_hf_config(folder), "_dir": folder}
        if hf["model_type"] != MODEL_TYPE:
            raise KjaxError(f"{folder}/config.json: model_type={hf['model_type']!r}, but the "
                            f"{name} of an ELECTRA pair is an electra folder")
        hfs[name] = hf
    disc, gen = hfs["discriminator"], hfs["generator"]
    width = {name: hf.get("embedding_size", hf["hidden_size"]) for name, hf in hfs.items()}
    if width["generator"] != width["discriminator"]:
        raise KjaxError(f"{gen_dir}/config.json: embedding_size={width['generator']}, but the "
                        f"discriminator's is {width['discriminator']}; kjax's generator shares "
                        f"the discriminator's embedding tables, so this generator cannot be "
                        f"expressed (only its {', '.join(OWN)} are its own)")
    for key, default in SHARED.items():
        have, want = gen.get(key, default), disc.get(key, default)
        if have != want:
            raise KjaxError(f"{gen_dir}/config.json: {key}={have!r}, but the discriminator's is "
                            f"{want!r}; kjax's generator takes it from the discriminator (only "
                            f"its {', '.join(OWN)} are its own), so this pair cannot be one run")
    return disc, gen


def rtd_head(tensors: dict, enc) -> dict | None:
    """discriminator_predictions (dense, dense_prediction), or None if the folder lacks it."""
    head = {}
    for name, path, kind in RTD_HEAD:
        found = {key: tensors.get(f"{name}.{key}") for key in ("weight", "bias")}
        if any(v is None for v in found.values()):
            return None
        _set(head, path[1:], module_from_torch(found, kind, enc))
    return head


def check_tied(disc: dict, gen: dict, gen_dir: str) -> None:
    """The generator folder's embedding tables are the discriminator's, exactly."""
    names = {"embedding": "weight", "scale": "weight", "bias": "bias"}
    for name, path, _ in EMBEDDINGS:
        for leaf, value in _get(disc, path).items():
            other = _get(gen, path)[leaf]
            if other.shape != value.shape or not np.array_equal(other, value):
                raise KjaxError(f"{gen_dir}: electra.{name}.{names[leaf]} differs from the "
                                f"discriminator's; kjax ties the generator's embeddings to the "
                                f"discriminator's, so the pair cannot be imported as one run")


def import_electra_pair(disc_dir: str, gen_dir: str, workdir: str, base_config,
                        config_out: str | None = None, source: str | None = None) -> dict:
    """The pair → `workdir/checkpoints/0` of a model.arch='electra' run + its config file."""
    hf_d, hf_g = read_pair(disc_dir, gen_dir)
    scan = base_config.model.scan_layers
    enc_d, enc_g = hi.encoder_config(hf_d, scan), hi.encoder_config(hf_g, scan)
    tensors = {"discriminator": hi.read_hf_weights(disc_dir),
               "generator": hi.read_hf_weights(gen_dir)}
    for name, other, folder in (("discriminator", "generator", disc_dir),
                                ("generator", "discriminator", gen_dir)):
        head = f"{other}_predictions."
        if any(k.startswith(head) for k in tensors[name]):
            raise KjaxError(f"{folder} holds {head}* tensors, the {other}'s head: are the "
                            f"discriminator and the generator folders swapped?")
    found_d, _, unused_d = hi.hf_to_params(tensors["discriminator"], hf_d, enc_d)
    found_g, _, unused_g = hi.hf_to_params(tensors["generator"], hf_g, enc_g)
    check_tied(found_d, found_g, gen_dir)
    found = {"embeddings": found_d["embeddings"], "encoder": found_d["encoder"],
             "generator": {k: v for k, v in found_g.items() if k != "embeddings"}}
    if "embeddings_project" in found_g["embeddings"]:   # the generator's own E → width
        found["generator"]["embeddings_project"] = found_g["embeddings"]["embeddings_project"]
    head = rtd_head(tensors["discriminator"], enc_d)
    if head is not None:
        found["discriminator_predictions"] = head
    rtd_names = {f"{name}.{key}" for name, _, _ in RTD_HEAD for key in ("weight", "bias")}
    unused = [f"discriminator:{k}" for k in unused_d if head is None or k not in rtd_names] \
        + [f"generator:{k}" for k in unused_g]
    config = electra_config(base_config, enc_d, hf_g, name_of(disc_dir, gen_dir))
    ckpt_dir = hi.check_empty(workdir)
    tokenizer = hi.import_tokenizer(disc_dir, hf_d, workdir, config)
    source = source or f"{disc_dir} --generator {gen_dir}"
    initialised, config_out = hi.save_imported(config, found, workdir, config_out, source)
    report = {"source": {"discriminator": os.path.abspath(disc_dir),
                         "generator": os.path.abspath(gen_dir)},
              "model_type": MODEL_TYPE, "arch": config.model.arch,
              "checkpoint": paths.join(ckpt_dir, "0"), "config": config_out,
              "generator": {key: config.model[key] for key in OWN.values()},
              "tokenizer": tokenizer, "initialised": initialised,
              "unused_source_tensors": unused}
    paths.write_text(paths.join(workdir, "import.json"),
                     json.dumps(report, ensure_ascii=False, indent=1))
    return report


def electra_config(base, enc, hf_g: dict, name: str):
    """hf_import.kjax_config's config, made an ELECTRA run with the generator's sizes."""
    config = hi.kjax_config(base, enc, name)
    config.model.arch = "electra"
    for key, kjax_key in OWN.items():
        config.model[kjax_key] = hf_g[key]
    config.train.nsp_weight = 0.0   # ELECTRA has no NSP head (the base may train one)
    return config


def name_of(disc_dir: str, gen_dir: str) -> str:
    """The run's name: the pair's parent folder (kjax export), else the discriminator's
    folder without its -discriminator suffix (KoELECTRA's repository names)."""
    disc, gen = (os.path.normpath(os.path.abspath(d)) for d in (disc_dir, gen_dir))
    if os.path.dirname(disc) == os.path.dirname(gen) and \
            {os.path.basename(disc), os.path.basename(gen)} == set(PAIR):
        return os.path.basename(os.path.dirname(disc))
    return os.path.basename(disc).removesuffix("-discriminator")
