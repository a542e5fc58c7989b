"""`kjax export` of a BERT-recipe run (format `bert`, kjax/export/formats.py):
checkpoint → transformers folder (weights, config, tokenizer, model card,
kjax_export.json), loaded back and compared with kjax.

It chooses the writer (hf_export.py for BERT and multi-hot models,
narrow_embedding_export.py for models with an embedding projection) and
hands the model card (model_card.py) what was written. None of those
imports this module, so the arrows run one way.

By default the heads the run trained are written, and nothing that did not
train: MLM + NSP → BertForPreTraining; MLM alone (train.nsp_weight = 0) →
BertForMaskedLM, without the NSP head and the pooler, which only NSP trains
(multi-hot: KjaxMultihotFor…; ELECTRA: the MLM head). The objectives
registry says which heads trained (kjax.objectives.trained_head_params). The
folder loads with AutoModelForMaskedLM / pipeline("fill-mask") with no newly
initialised weight, and AutoModel or AutoModelFor…Classification /
QuestionAnswering still load the encoder from it (after an MLM-only run with
a new pooler: it never trained). `with_heads=False` (`--encoder-only`)
writes the encoder (and the pooler, if NSP trained it) alone.
"""
from __future__ import annotations

import json
import os

from kjax.checkpoint.restore import restore_params
from kjax.errors import KjaxError
from kjax.export import hf_export as hx
from kjax.export import multihot_export as mx
from kjax.export import narrow_embedding_export as ne
from kjax.export.model_card import write_model_card
from kjax.export.tokenizer_export import export_tokenizer
from kjax.inputs import input_mode
from kjax.model.config import EncoderConfig
from kjax.objectives import objectives_title, trained_head_params


def exported_heads(config, enc: EncoderConfig, with_heads: bool) -> frozenset[str]:
    """The kjax head params the folder holds: those the run trained (the
    registry knows), or with --encoder-only the pooler alone, if it trained.
    ELECTRA has no pooler or NSP head: its folder holds the MLM head at most."""
    trained = trained_head_params(config)
    heads = trained if with_heads else hx.encoder_only(trained)
    return heads & hx.MLM_HEAD if enc.projects_embeddings else heads


def architecture(enc: EncoderConfig, heads: frozenset[str]) -> str:
    """The transformers class the folder is written as."""
    if enc.projects_embeddings:   # E < H: BERT has no embeddings_project, ELECTRA has
        return ne.architecture(hx.MLM_HEAD <= heads)
    return hx.architecture(enc, heads)


def export_checkpoint(config, workdir: str, out_dir: str, step: int | None = None,
                      dtype: str = "float32", with_heads: bool = True,
                      verify: bool = True, weights: str = "params") -> dict:
    """`kjax export`: checkpoint → transformers folder (weights, config,
    tokenizer, model card); `weights`: the checkpoint's params or their EMA."""
    from kjax import paths
    from kjax.tokens.factory import local_tokenizer
    input_mode(config).export_check(config)   # a mode transformers cannot run: one line
    enc = EncoderConfig.from_config(config.model)
    if enc.projects_embeddings and mx.is_multihot(enc):
        raise KjaxError(f"model.embedding_size={enc.embedding_size} ≠ hidden_size: a multi-hot "
                        f"model with an embedding projection has no transformers class yet")
    params, step = restore_params(config, workdir, step, weights)
    heads = exported_heads(config, enc, with_heads)
    with_heads = hx.MLM_HEAD <= heads
    # transformers writes and reads local folders: a gs:// --out is written to a
    # local folder first and uploaded once verified (kjax/paths.py).
    with paths.staged_dir(out_dir) as local_out, local_tokenizer(config) as tok_config:
        # the tokenizer first: a missing one fails before the weights are written
        tokenizer = export_tokenizer(tok_config, local_out, shown_as=out_dir)
        if enc.projects_embeddings:
            keys = ne.write_electra(params, enc, local_out, with_heads, dtype)
            diffs = ne.verify_electra(params, enc, local_out, with_heads, dtype) \
                if verify else None
        else:
            keys = hx.write_hf_model(params, enc, local_out, heads, dtype)
            diffs = hx.verify_export(params, enc, local_out, heads, dtype) \
                if verify else None
        written_as = architecture(enc, heads)
        write_model_card(config, workdir, local_out, step, written_as,
                         with_heads, dtype, tokenizer, shown_as=out_dir,
                         pooler="pooler" in heads, weights=weights)
        with open(os.path.join(local_out, "kjax_export.json"), "w", encoding="utf-8") as f:
            json.dump({"workdir": workdir if paths.is_remote(workdir) else os.path.abspath(workdir),
                       "step": step, "weights": weights, "dtype": dtype,
                       "architecture": written_as,
                       "objectives": objectives_title(config),
                       "with_pretraining_heads": with_heads, "heads": sorted(heads),
                       "tokenizer": tokenizer, "verified_max_abs_diff": diffs},
                      f, ensure_ascii=False, indent=1)
    return {"out": out_dir, "step": step, "weights": weights, "tensors": len(keys),
            "dtype": dtype,
            "architecture": written_as,
            "tokenizer": tokenizer["class"], "verified_max_abs_diff": diffs}
