"""Every kind of folder `kjax export` writes — a plain
BERT, a shaken BERT (Eq. 1 via attn_implementation="kjax_shake"), a multi-hot
UKnowBERT (remote code) and a modern-recipe ModernBERT — loads as a
sequence classifier AND as an extractive-QA model through transformers' Auto
classes, with the exported encoder inside (only the new head is missing) and
the head's logits of the right shape."""
import numpy as np
import pytest
import torch
from transformers import (AutoModel, AutoModelForQuestionAnswering,
                          AutoModelForSequenceClassification)

from kjax.export import hf_export as hx
from kjax.export import modernbert_export as me
from kjax.export.torch_shake import ATTN_IMPLEMENTATION
from test_export import random_params, tiny_encoder, tiny_multihot

KINDS = ["onehot", "shaken", "multihot", "modern"]
HEADS = {AutoModelForSequenceClassification: ("classifier",),
         AutoModelForQuestionAnswering: ("qa_outputs", "classifier")}


def exported(kind: str, out: str):
    """(load kwargs, torch inputs, kjax's hidden states or None, encoder key prefix)."""
    if kind == "modern":
        from test_modern import TINY
        from test_modern import random_params as modern_params
        me.write_modernbert(modern_params(TINY), TINY, out)
        rng = np.random.default_rng(1)
        mask = np.ones((2, 20), np.int64)
        mask[1, 13:] = 0
        inputs = {"input_ids": rng.integers(5, 100, (2, 20)), "attention_mask": mask}
        return {}, inputs, None, "model."
    enc = {"onehot": tiny_encoder, "multihot": tiny_multihot,
           "shaken": lambda: tiny_encoder(shake_factor=(0.3, 0.3))}[kind]()
    params = random_params(enc, seed=5)
    hx.write_hf_model(params, enc, out)
    inputs = hx.sample_inputs(enc)
    kwargs = {"multihot": {"trust_remote_code": True},
              "shaken": {"attn_implementation": ATTN_IMPLEMENTATION}}.get(kind, {})
    return kwargs, inputs, hx.jax_outputs(params, enc, inputs)["hidden"], "bert."


@pytest.mark.parametrize("kind", KINDS)
def test_every_export_loads_as_a_classifier_and_a_qa_model(tmp_path, kind):
    kwargs, inputs, kjax_hidden, prefix = exported(kind, str(tmp_path))
    batch = {k: torch.as_tensor(np.asarray(v), dtype=torch.long) for k, v in inputs.items()}
    mask = np.asarray(inputs["attention_mask"])
    with torch.no_grad():
        plain = AutoModel.from_pretrained(tmp_path, **kwargs).eval()(**batch).last_hidden_state
    for auto, head in HEADS.items():
        model, info = auto.from_pretrained(tmp_path, num_labels=3 if "Sequence" in auto.__name__
                                           else 2, output_loading_info=True, **kwargs)
        model.eval()
        # only the new head is fresh: every encoder tensor came from the export
        assert not [k for k in info["missing_keys"] if k.startswith(prefix)], info
        assert {k.split(".")[0] for k in info["missing_keys"]} <= set(head), info
        with torch.no_grad():
            hidden = model.base_model(**batch).last_hidden_state
            out = model(**batch)
        np.testing.assert_array_equal(hidden.numpy()[mask > 0], plain.numpy()[mask > 0])
        if kjax_hidden is not None:   # ... and it is kjax's encoder (≤ 1e-5 in fp32)
            diffs = hx.max_abs_diffs({"hidden": hidden.numpy()}, {"hidden": kjax_hidden}, mask)
            assert diffs["hidden"] <= 1e-5, diffs
        if auto is AutoModelForQuestionAnswering:
            assert out.start_logits.shape == out.end_logits.shape == mask.shape
        else:
            assert out.logits.shape == (mask.shape[0], 3)
        if kind == "shaken":   # Eq. 1 reaches the head: B changes the logits, bf=0 does not
            b = torch.as_tensor((np.random.default_rng(2).random(
                mask.shape + mask.shape[-1:]) < 0.3).astype(np.float32))
            with torch.no_grad():
                shaken = model(**batch, shake_matrix=b)
                zero = model(**batch, shake_matrix=b, shake_factor=0.0)
            first = "start_logits" if auto is AutoModelForQuestionAnswering else "logits"
            assert not torch.allclose(shaken[first], out[first])
            assert torch.equal(zero[first], out[first])


@pytest.mark.parametrize("kind", KINDS)
def test_every_export_fills_masks_with_its_pretrained_head(tmp_path, kind):
    """The default export keeps the MLM head; AutoModelForMaskedLM (what
    pipeline("fill-mask") loads) finds every weight in the folder and its logits
    are kjax's."""
    from transformers import AutoModelForMaskedLM
    kwargs, inputs, _, _ = exported(kind, str(tmp_path))
    model, info = AutoModelForMaskedLM.from_pretrained(tmp_path, output_loading_info=True,
                                                       **kwargs)
    assert not info["missing_keys"], info
    if kind == "modern":   # test_modern.py compares ModernBERT's logits
        return
    batch = {k: torch.as_tensor(np.asarray(v), dtype=torch.long) for k, v in inputs.items()}
    with torch.no_grad():
        logits = model.eval()(**batch).logits.numpy()
    enc = {"onehot": tiny_encoder, "multihot": tiny_multihot,
           "shaken": lambda: tiny_encoder(shake_factor=(0.3, 0.3))}[kind]()
    want = hx.jax_outputs(random_params(enc, seed=5), enc, inputs)["mlm_logits"]
    diffs = hx.max_abs_diffs({"mlm_logits": logits}, {"mlm_logits": want},
                             inputs["attention_mask"])
    assert diffs["mlm_logits"] <= 1e-4, diffs


# ---- only heads that trained leave kjax --------------------------------------------------
MLM_ONLY = {"onehot": "BertForMaskedLM", "multihot": "KjaxMultihotForMaskedLM"}


@pytest.mark.parametrize("nsp_weight,heads", [(0.0, hx.MASKED_LM), (1.0, hx.PRETRAINING)])
def test_the_registry_says_which_heads_trained(nsp_weight, heads):
    """MLM alone trains no NSP head and no pooler (it feeds only NSP); with NSP
    both trained. --encoder-only keeps the pooler only when it trained."""
    from conftest import tiny_config
    from kjax.export.checkpoint_export import architecture, exported_heads
    from kjax.objectives import trained_head_params
    config = tiny_config("/nonexistent", **{"train.nsp_weight": nsp_weight})
    enc = tiny_encoder()
    assert trained_head_params(config) == heads
    assert exported_heads(config, enc, True) == heads
    assert exported_heads(config, enc, False) == (heads & {"pooler"})
    assert architecture(enc, heads) == ("BertForPreTraining" if nsp_weight else "BertForMaskedLM")
    assert architecture(tiny_multihot(), heads) == (
        "KjaxMultihotForPreTraining" if nsp_weight else "KjaxMultihotForMaskedLM")
    assert architecture(enc, exported_heads(config, enc, False)) == "BertModel"


@pytest.mark.parametrize("kind", sorted(MLM_ONLY))
def test_an_mlm_only_export_holds_no_nsp_head_and_no_pooler(tmp_path, kind):
    """MLM-only (train.nsp_weight=0): the folder is *ForMaskedLM — no
    cls.seq_relationship, no pooler — which AutoModelForMaskedLM loads with no
    missing or unexpected key and whose logits are kjax's; the export check
    compares hidden states and MLM logits. AutoModel and the classifier load
    the encoder and start a new pooler, honestly reported as missing."""
    import json
    import os
    from safetensors import safe_open
    from transformers import AutoModelForMaskedLM
    enc = {"onehot": tiny_encoder, "multihot": tiny_multihot}[kind]()
    params = random_params(enc, seed=5)
    keys = hx.write_hf_model(params, enc, str(tmp_path), heads=hx.MASKED_LM)
    with safe_open(os.path.join(tmp_path, "model.safetensors"), "pt") as f:
        assert set(f.keys()) == set(keys)
    assert not [k for k in keys if k.startswith(("cls.seq_relationship.", "bert.pooler."))]
    assert "cls.predictions.bias" in keys and "cls.predictions.transform.dense.weight" in keys
    config = json.load(open(os.path.join(tmp_path, "config.json")))
    assert config["architectures"] == [MLM_ONLY[kind]]
    remote = {"trust_remote_code": True} if kind == "multihot" else {}
    model, info = AutoModelForMaskedLM.from_pretrained(tmp_path, output_loading_info=True,
                                                       **remote)
    assert type(model).__name__ == MLM_ONLY[kind]
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    inputs = hx.sample_inputs(enc)
    want = hx.jax_outputs(params, enc, inputs)
    got = hx.torch_outputs(model.eval(), inputs)
    assert set(got) == {"hidden", "mlm_logits"}
    diffs = hx.max_abs_diffs(want, got, inputs["attention_mask"])
    assert max(diffs.values()) <= 1e-4, diffs
    checked = hx.verify_export(params, enc, str(tmp_path), hx.MASKED_LM, "float32")
    assert set(checked) == {"hidden", "mlm_logits"}
    _, info = AutoModel.from_pretrained(tmp_path, output_loading_info=True, **remote)
    assert sorted(info["missing_keys"]) == ["pooler.dense.bias", "pooler.dense.weight"], info
    _, info = AutoModelForSequenceClassification.from_pretrained(
        tmp_path, num_labels=3, output_loading_info=True, **remote)
    assert {k.split(".dense")[0] for k in info["missing_keys"]} == {
        "bert.pooler", "classifier.weight", "classifier.bias"}, info


def test_an_nsp_run_keeps_both_heads(tmp_path):
    """With NSP trained the folder stays BertForPreTraining with the NSP head and
    the pooler, both compared with kjax by the export check."""
    enc = tiny_encoder()
    keys = hx.write_hf_model(random_params(enc, seed=5), enc, str(tmp_path))
    assert {"cls.seq_relationship.weight", "bert.pooler.dense.weight"} <= set(keys)
    checked = hx.verify_export(random_params(enc, seed=5), enc, str(tmp_path), hx.PRETRAINING,
                               "float32")
    assert set(checked) == {"hidden", "pooled", "mlm_logits", "nsp_logits"}
