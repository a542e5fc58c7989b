"""Each export format's writer (`kjax export`) and reader (`kjax import`),
the top of the export package. An architecture names the format it exports
as (kjax/model/arch: `export_format`), a folder to import the format it
holds (`folder_format`); the verbs ask here and branch on neither.

    bert          a BERT-recipe run → BertFor… (ElectraFor… where the embedding is
                  narrower, KjaxMultihotFor… for multi-hot input): checkpoint_export.py;
                  back: hf_import.py (BERT, RoBERTa, an ELECTRA discriminator alone,
                  a kjax multi-hot folder)
    modernbert    the modern recipe ⇄ ModernBertForMaskedLM: modernbert_export.py
    electra_pair  an ELECTRA run ⇄ OUT/discriminator + OUT/generator:
                  electra_pair_export.py, electra_pair_import.py
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable

from kjax.errors import KjaxError
from kjax.export import (checkpoint_export, electra_pair_export, electra_pair_import, hf_import,
                         modernbert_export)


@dataclasses.dataclass(frozen=True)
class Format:
    name: str
    # (config, workdir, out_dir, step, dtype, with_heads, verify, weights: params | ema)
    # -> the report `kjax export` prints
    write: Callable
    # (hf_dir, generator folder or None, workdir, base config, config_out) -> `kjax import`'s report
    read: Callable


def _read_pair(hf_dir: str, generator: str | None, workdir: str, base_config,
               config_out: str | None) -> dict:
    source = hf_dir if not generator else f"{hf_dir} --generator {generator}"
    return electra_pair_import.import_electra_pair(
        *electra_pair_import.pair_folders(hf_dir, generator), workdir, base_config, config_out,
        source)


FORMATS: dict[str, Format] = {
    "bert": Format("bert", checkpoint_export.export_checkpoint,
                   lambda hf_dir, _, *rest: hf_import.import_hf(hf_dir, *rest)),
    "modernbert": Format("modernbert", modernbert_export.export_checkpoint,
                         lambda hf_dir, _, *rest: modernbert_export.import_modernbert(hf_dir,
                                                                                      *rest)),
    "electra_pair": Format("electra_pair", electra_pair_export.export_electra, _read_pair),
}


def format_of(arch) -> Format:
    """The format an architecture (kjax/model/arch) exports as; one line where
    it names none (transformers has no class that runs it)."""
    if arch.export_format is None:
        raise KjaxError(f"model.arch={arch.name!r}: transformers has no class that runs it, so "
                        f"kjax export cannot write it; evaluate and fine-tune it in kjax")
    return FORMATS[arch.export_format]


def folder_format(hf_dir: str, generator: str | None) -> str:
    """The format `kjax import --hf DIR [--generator GEN]` reads: an ELECTRA
    pair (--generator, or DIR/discriminator + DIR/generator), a ModernBERT
    folder (its config.json's model_type), else a BERT-family folder."""
    if electra_pair_import.pair_folders(hf_dir, generator):
        return "electra_pair"
    if model_type(hf_dir) == modernbert_export.MODEL_TYPE:
        return "modernbert"
    return "bert"


def model_type(hf_dir: str) -> str | None:
    """config.json's model_type, or None where there is none to read (the
    reader then names the problem)."""
    try:
        with open(os.path.join(hf_dir, "config.json"), encoding="utf-8") as f:
            return json.load(f).get("model_type")
    except (OSError, ValueError):
        return None
