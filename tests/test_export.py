"""kjax ⇄ transformers 5 (PyTorch): weights, logits, shaking, tokenizers, CLI.

Randomly initialised tiny models, offline. Parameters get noise on top of
kjax's init so that biases and LayerNorm scales are not 0/1: a transposed
or swapped tensor then shows up in the logits."""
import dataclasses
import os
import pickle
import shutil
import unicodedata

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from safetensors import safe_open
from transformers import (AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining,
                          AutoTokenizer, BertConfig, BertForPreTraining, ElectraConfig,
                          ElectraForPreTraining,
                          RobertaConfig, RobertaForMaskedLM)

from conftest import DEMO_CONFIG, tiny_config, tiny_overrides
from kjax.cli import main
from kjax.config import load_config, platform_defaults
from kjax.checkpoint.restore import restore_params
from kjax.errors import KjaxError
from kjax.export import hf_export as hx
from kjax.export import hf_import as hi
from kjax.export import multihot_export as mx
from kjax.export.torch_shake import ATTN_IMPLEMENTATION
from kjax.model.config import EncoderConfig
from kjax.model.encoder import BertForPreTraining as KjaxBert

TOLERANCE = 1e-5
HF_SHAPE = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=37, max_position_embeddings=40)
HOSTILE = ["", " ", "   ", "\r\n", "헌법\r\n제1조", "\r\n대한민국\r\n", "이모지 🙂🙂 😀 끝",
           "漢字 大韓民國 憲法", "탭\t문자", "전각\u3000공백", "ＡＢＣ 123", "▁밑줄 ▁", "a  b   c ",
           "\u200b영폭", unicodedata.normalize("NFD", "자모 분해된 한글"), "[ ] ] [", "ㅋㅋㅋ ᄒᄒ"]


def tiny_encoder(scan: bool = True, **extra) -> EncoderConfig:
    return EncoderConfig(vocab_size=99, hidden_size=32, num_layers=2, num_heads=4,
                         intermediate_size=37, max_position_embeddings=40, dtype="float32",
                         scan_layers=scan, **extra)


def tiny_multihot(scan: bool = True, **extra) -> EncoderConfig:
    return tiny_encoder(scan, input_mode="multihot", num_pos_tags=7, max_tokens_per_morpheme=4,
                        **extra)


def random_params(enc: EncoderConfig, seed: int = 0) -> dict:
    """kjax's param tree (shapes traced, nothing compiled) filled with noise."""
    inputs = hx.sample_inputs(enc)
    multihot = mx.jax_multihot(inputs) if mx.is_multihot(enc) else None
    shapes = nn.meta.unbox(jax.eval_shape(KjaxBert(enc).init, jax.random.key(0), *(
        jnp.asarray(inputs[k]) for k in ("input_ids", "token_type_ids", "attention_mask")),
        multihot=multihot)["params"])
    rng = np.random.default_rng(seed)

    def fill(path, shape):
        noise = rng.standard_normal(shape.shape).astype(np.float32)
        return 1 + 0.1 * noise if getattr(path[-1], "key", "") == "scale" else 0.1 * noise
    return jax.tree_util.tree_map_with_path(fill, shapes)


def assert_close(diffs: dict, expected: set, tolerance: float = TOLERANCE) -> None:
    assert set(diffs) == expected
    assert max(diffs.values()) <= tolerance, diffs


# ---- weights and logits ---------------------------------------------------------------
@pytest.mark.parametrize("scan", [True, False], ids=["scan", "unscanned"])
def test_exported_bert_matches_kjax_logits(tmp_path, scan):
    enc = tiny_encoder(scan)
    params = random_params(enc)
    hx.write_hf_model(params, enc, str(tmp_path), heads=hx.PRETRAINING)
    model, info = AutoModelForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
    assert type(model).__name__ == "BertForPreTraining"
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    inputs = hx.sample_inputs(enc)
    want = hx.jax_outputs(params, enc, inputs)
    assert_close(hx.max_abs_diffs(want, hx.torch_outputs(model.eval(), inputs),
                                  inputs["attention_mask"]),
                 {"mlm_logits", "nsp_logits", "hidden", "pooled"})
    encoder = AutoModel.from_pretrained(tmp_path).eval()
    assert_close(hx.max_abs_diffs(want, hx.torch_outputs(encoder, inputs),
                                  inputs["attention_mask"]), {"hidden", "pooled"})


def test_export_without_heads_is_a_plain_encoder(tmp_path):
    enc = tiny_encoder()
    params = random_params(enc)
    hx.write_hf_model(params, enc, str(tmp_path), heads=hx.ENCODER, dtype="bfloat16")
    with safe_open(os.path.join(tmp_path, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert f.get_tensor("bert.pooler.dense.weight").dtype == torch.bfloat16
    assert keys and all(k.startswith("bert.") for k in keys)
    encoder, info = AutoModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and encoder.config.architectures == ["BertModel"]
    # Documented: AutoModelForPreTraining still loads; its heads are new (reported missing).
    _, info = AutoModelForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] and all(k.startswith("cls.") for k in info["missing_keys"])
    diffs = hx.verify_export(params, enc, str(tmp_path), heads=hx.ENCODER, dtype="bfloat16")
    assert max(diffs.values()) <= TOLERANCE


@pytest.mark.parametrize("scan,multihot", [(True, False), (False, False), (True, True)],
                         ids=["scan", "unscanned", "multihot"])
def test_state_dict_round_trip_is_bit_exact(scan, multihot):
    enc = tiny_multihot(scan) if multihot else tiny_encoder(scan)
    params = random_params(enc, seed=1)
    state_dict = hx.params_to_state_dict(params, enc, heads=hx.PRETRAINING)
    assert ("bert.embeddings.inpos_embeddings.weight" in state_dict) == multihot
    model_type = mx.MODEL_TYPE if multihot else "bert"
    back, missing, unused = hi.hf_to_params(state_dict, {"model_type": model_type, "_dir": "mem"},
                                            enc)
    assert missing == [] and unused == []
    assert jax.tree.structure(back) == jax.tree.structure(params)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(back),
                                                    jax.tree.leaves(params)))


# ---- import of transformers models ------------------------------------------------------
def _hf_model(kind: str):
    torch.manual_seed({"bert": 0, "roberta": 1, "electra": 2}[kind])
    if kind == "bert":
        model = BertForPreTraining(BertConfig(**HF_SHAPE))
    elif kind == "roberta":
        model = RobertaForMaskedLM(RobertaConfig(**HF_SHAPE, type_vocab_size=1, pad_token_id=1,
                                                 layer_norm_eps=1e-5))
    else:
        model = ElectraForPreTraining(ElectraConfig(**HF_SHAPE, embedding_size=32))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


INITIALISED = {"bert": [], "roberta": ["pooler", "nsp"],
               "electra": ["pooler", "mlm_bias", "mlm_transform", "mlm_layer_norm", "nsp"]}


@pytest.mark.parametrize("kind", ["bert", "roberta", "electra"])
def test_import_matches_transformers(tmp_path, kind):
    model = _hf_model(kind)
    model.save_pretrained(tmp_path / "hf")
    report = hi.import_hf(str(tmp_path / "hf"), str(tmp_path / "w"), load_config(DEMO_CONFIG))
    assert report["initialised"] == INITIALISED[kind]
    # the written config file loads; as a verb, resolved for this platform
    config = platform_defaults.resolved(load_config(report["config"]))
    params, step = restore_params(config, str(tmp_path / "w"))   # eval-style restore
    enc = EncoderConfig.from_config(config.model)
    assert step == 0 and enc.max_position_embeddings == 40 - report["position_offset"]
    inputs = hx.sample_inputs(enc, length=12)
    if kind == "roberta":  # RoBERTa's pad id is 1; positions of real tokens start at 2
        inputs["input_ids"][inputs["attention_mask"] == 0] = 1
    got = hx.jax_outputs(params, enc, inputs)
    with torch.no_grad():
        out = model(**{k: torch.as_tensor(v) for k, v in inputs.items()},
                    output_hidden_states=True)
    want = {"hidden": out.hidden_states[-1].numpy()}
    if kind == "bert":
        want.update(mlm_logits=out.prediction_logits.numpy(),
                    nsp_logits=out.seq_relationship_logits.numpy(),
                    pooled=model.bert.pooler(out.hidden_states[-1]).detach().numpy())
    elif kind == "roberta":
        want["mlm_logits"] = out.logits.numpy()
    assert_close(hx.max_abs_diffs(got, want, inputs["attention_mask"]), set(want))


def test_imported_missing_heads_equal_a_fresh_kjax_init(tmp_path):
    """The heads a source lacks start as kjax's own init would draw them, not
    1.14x too wide (a truncated normal divided by its std, which flax does
    not do)."""
    from kjax.parallel.mesh import make_mesh
    from kjax.train.state import init_state, make_model, make_optimizer
    _hf_model("electra").save_pretrained(tmp_path / "hf")
    report = hi.import_hf(str(tmp_path / "hf"), str(tmp_path / "w"), load_config(DEMO_CONFIG))
    config = load_config(report["config"])
    params, _ = restore_params(config, str(tmp_path / "w"))
    fresh, _ = init_state(config, make_mesh(config), make_model(config, False),
                          make_optimizer(config.train))
    for name in report["initialised"]:    # pooler, MLM head, NSP
        for a, b in zip(jax.tree.leaves(params[name]), jax.tree.leaves(fresh["params"][name])):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)
    kernel = np.asarray(params["mlm_transform"]["kernel"])
    assert abs(kernel.std() / (0.02 * 0.8796) - 1) < 0.05   # flax: std · 0.88, not std


def test_import_round_trip_through_files_is_bit_exact(tmp_path):
    enc = tiny_encoder(scan=False)
    params = random_params(enc, seed=2)
    hx.write_hf_model(params, enc, str(tmp_path / "hf"), heads=hx.PRETRAINING)
    base = load_config(DEMO_CONFIG, ["--config.model.scan_layers=False"])
    report = hi.import_hf(str(tmp_path / "hf"), str(tmp_path / "w"), base)
    back, _ = restore_params(load_config(report["config"]), str(tmp_path / "w"))
    assert report["initialised"] == []
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(back),
                                                    jax.tree.leaves(params)))
    with pytest.raises(KjaxError, match="already holds checkpoints"):
        hi.import_hf(str(tmp_path / "hf"), str(tmp_path / "w"), base)


class _Exploit:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_import_refuses_pickled_code_and_bad_configs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _hf_model("bert").config.save_pretrained(tmp_path / "hf")
    with open(tmp_path / "hf" / "pytorch_model.bin", "wb") as f:
        pickle.dump({"x": _Exploit()}, f)
    with pytest.raises(KjaxError, match="cannot be loaded safely"):
        hi.read_hf_weights(str(tmp_path / "hf"))
    assert not (tmp_path / "pwned").exists()
    config = BertConfig(**HF_SHAPE, hidden_act="gelu_new")
    config.save_pretrained(tmp_path / "tanh")
    with pytest.raises(KjaxError, match="hidden_act='gelu_new'"):
        hi.read_hf_config(str(tmp_path / "tanh"))
    with pytest.raises(KjaxError, match="config.json not found"):
        hi.read_hf_config(str(tmp_path / "nowhere"))


# ---- Eq. 1 in PyTorch ----------------------------------------------------------------------
@pytest.mark.parametrize("factors", [(0.3, 0.3), (-0.3, -0.3), (0.5, -0.2)],
                         ids=["bf+", "bf-", "per-layer"])
def test_torch_shaking_equals_jax_shaking(tmp_path, factors):
    enc = tiny_encoder(shake_factor=factors)
    params = random_params(enc, seed=3)
    hx.write_hf_model(params, enc, str(tmp_path), heads=hx.PRETRAINING)
    model = AutoModelForPreTraining.from_pretrained(
        tmp_path, attn_implementation=ATTN_IMPLEMENTATION).eval()
    assert model.config.kjax_shake_factor == list(factors)
    inputs = hx.sample_inputs(enc)
    rng = np.random.default_rng(4)
    shape = inputs["input_ids"].shape + inputs["input_ids"].shape[-1:]
    b = ((rng.random(shape) < 0.2) * rng.uniform(0.5, 2.0, shape)).astype(np.float32)
    shaken = hx.jax_outputs(params, enc, inputs, shake=b)
    keys = {"mlm_logits", "nsp_logits", "hidden", "pooled"}
    assert_close(hx.max_abs_diffs(shaken, hx.torch_outputs(
        model, inputs, shake_matrix=torch.from_numpy(b)), inputs["attention_mask"]), keys)
    plain = hx.torch_outputs(model, inputs)   # no B: plain attention
    assert_close(hx.max_abs_diffs(hx.jax_outputs(params, enc, inputs), plain,
                                  inputs["attention_mask"]), keys)
    assert hx.max_abs_diffs(shaken, plain, inputs["attention_mask"])["mlm_logits"] > 1e-2
    zero = hx.torch_outputs(model, inputs, shake_matrix=torch.from_numpy(b), shake_factor=0.0)
    assert_close(hx.max_abs_diffs(plain, zero, inputs["attention_mask"]), keys, 0.0)
    with pytest.raises(KjaxError, match="shake_matrix has shape"):
        hx.torch_outputs(model, inputs, shake_matrix=torch.zeros(2, 3, 3))


# ---- multi-hot (UKnowBERT, Eq. 3–4) through transformers remote code -------------------------
def test_exported_multihot_matches_kjax_logits(tmp_path):
    enc = tiny_multihot(scan=False, shake_factor=(0.3, -0.2))
    params = random_params(enc, seed=5)
    hx.write_hf_model(params, enc, str(tmp_path), heads=hx.PRETRAINING)
    assert os.path.isfile(tmp_path / "modeling_kjax_multihot.py")   # remote code travels
    model, info = AutoModelForPreTraining.from_pretrained(tmp_path, trust_remote_code=True,
                                                          output_loading_info=True)
    assert type(model).__name__ == "KjaxMultihotForPreTraining"
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    inputs = hx.sample_inputs(enc)   # padding, filler tokens (-1) and an all-zero filler row
    mask = inputs["attention_mask"]
    assert mask[1].min() == 0 and mask[2].max() == 0 and inputs["token_position"][1].min() == -1
    assert inputs["token_inpos"].max() >= enc.max_tokens_per_morpheme   # shares E_inpos[-1]
    want = hx.jax_outputs(params, enc, inputs)
    keys = {"mlm_logits", "nsp_logits", "hidden", "pooled"}
    assert_close(hx.max_abs_diffs(want, hx.torch_outputs(model.eval(), inputs), mask), keys)
    encoder = AutoModel.from_pretrained(tmp_path, trust_remote_code=True).eval()
    assert type(encoder).__name__ == "KjaxMultihotModel"
    assert_close(hx.max_abs_diffs(want, hx.torch_outputs(encoder, inputs), mask),
                 {"hidden", "pooled"})
    # "eager" attention agrees with kjax everywhere, padding and the filler row included.
    eager = AutoModelForPreTraining.from_pretrained(tmp_path, trust_remote_code=True,
                                                    attn_implementation="eager").eval()
    assert_close(hx.max_abs_diffs(want, hx.torch_outputs(eager, inputs), np.ones_like(mask)),
                 keys)
    # Eq. 1 over morpheme positions, B [b, s, s].
    shaker = AutoModelForPreTraining.from_pretrained(
        tmp_path, trust_remote_code=True, attn_implementation=ATTN_IMPLEMENTATION).eval()
    rng = np.random.default_rng(6)
    b = ((rng.random(mask.shape + mask.shape[-1:]) < 0.2) * 1.5).astype(np.float32)
    shaken = hx.jax_outputs(params, enc, inputs, shake=b)
    assert hx.max_abs_diffs(want, shaken, mask)["mlm_logits"] > 1e-2
    assert_close(hx.max_abs_diffs(shaken, hx.torch_outputs(
        shaker, inputs, shake_matrix=torch.from_numpy(b)), mask), keys)
    with pytest.raises(ValueError, match="token_position, token_inpos, position_tags"):
        encoder(input_ids=torch.as_tensor(inputs["input_ids"]))


def test_cli_multihot_import_export_and_tokenizer_hand_off(tmp_path):
    """folder → `kjax import` → `kjax export` (verified) → transformers + tokenizer → kjax."""
    from kjax.morph.tags import TAGS
    from kjax.tokens.multihot import BASE_TOKENS, MultihotVocab
    MultihotVocab([*BASE_TOKENS, "나", "##는", "학교", "##에서", "보##", "##았", "##다",
                   "@신", "@기", "@루"]).save(str(tmp_path / "mh.multihot.txt"))
    vocab = len(BASE_TOKENS) + 10
    overrides = tiny_overrides(str(tmp_path), **{
        "model.input_mode": "multihot", "tokenizer.scheme": "multihot",
        "tokenizer.path": f"{tmp_path}/mh", "model.vocab_size": vocab,
        "model.num_pos_tags": len(TAGS), "model.max_tokens_per_morpheme": 4,
        "train.mlm_loss": "eq9", "data.mask_unit": "morpheme"})
    config = platform_defaults.resolved(load_config(DEMO_CONFIG, overrides))  # as a verb
    enc = EncoderConfig.from_config(config.model)
    params = random_params(enc, seed=9)
    hx.write_hf_model(params, enc, str(tmp_path / "hf"), heads=hx.PRETRAINING)
    assert main(["import", "--hf", str(tmp_path / "hf"), "--out", str(tmp_path / "w"),
                 *overrides]) == 0
    out = str(tmp_path / "out")
    assert main(["export", "--config", DEMO_CONFIG, *overrides, "--workdir",
                 str(tmp_path / "w"), "--out", out, "--with-pretraining-heads"]) == 0
    assert "trust_remote_code=True" in open(os.path.join(out, "README.md")).read()
    printed = run_model_card(out)
    assert "torch.Size([1, 3])" in printed           # the classification head's logits
    assert "QA start logits: torch.Size([1, " in printed   # ... and a QA head's
    mlm = AutoModelForMaskedLM.from_pretrained(out, trust_remote_code=True).eval()
    batch = AutoTokenizer.from_pretrained(out, trust_remote_code=True).multihot_inputs(
        ["나는 학교에서 보았다"], return_tensors="pt")
    with torch.no_grad():     # the MaskedLM class loads the pretraining MLM head as exported
        logits = mlm(**batch).logits.numpy()
        mask = batch["attention_mask"].numpy()
    reference = hx.jax_outputs(params, enc, {k: v.numpy() for k, v in batch.items()})
    assert np.abs((logits - np.asarray(reference["mlm_logits"])) * mask[..., None]).max() < 1e-4
    back, _ = restore_params(config, str(tmp_path / "w"))
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(back),
                                                    jax.tree.leaves(params)))
    tokenizer = AutoTokenizer.from_pretrained(out, trust_remote_code=True)
    model = AutoModelForPreTraining.from_pretrained(out, trust_remote_code=True).eval()
    batch = tokenizer.multihot_inputs(["나는 학교에서 보았다", "신기루"], ["나는", None])
    assert batch["input_ids"][0, 0] == 2 and batch["attention_mask"][1].min() == 0
    assert batch["token_position"][1].min() == -1    # 신기루 = @신 @기 @루 in one position
    assert batch["token_inpos"][1, 1:4].tolist() == [0, 1, 2]
    assert_close(hx.max_abs_diffs(hx.jax_outputs(params, enc, batch),
                                  hx.torch_outputs(model, batch), batch["attention_mask"]),
                 {"mlm_logits", "nsp_logits", "hidden", "pooled"})


def run_model_card(folder: str) -> str:
    """Runs every ```python block of an exported README.md as a user would
    (a fresh namespace, nothing imported before); returns what it printed."""
    import contextlib
    import io
    import re
    card = open(os.path.join(folder, "README.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", card, re.S)
    assert blocks
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for block in blocks:
            exec(compile(block, os.path.join(folder, "README.md"), "exec"), {})
    return printed.getvalue()


# ---- the command line: train → export → transformers → import ----------------------------
def assert_export_matches(config, workdir: str, out: str) -> dict:
    """`out`, exported from `workdir` (trained 6 steps) and loaded by
    transformers' own classes, gives kjax's logits on text its own tokenizer
    encodes (padding included); returns kjax's params."""
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForPreTraining.from_pretrained(out).eval()
    batch = tokenizer(["대한민국은 민주공화국이다.", "국회는 법률을 만든다."],
                      ["모든 권력은 국민으로부터 나온다.", "🙂"], padding=True, return_tensors="np")
    params, step = restore_params(config, workdir)
    enc = dataclasses.replace(EncoderConfig.from_config(config.model), dropout_rate=0.0)
    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    assert step == 6 and inputs["attention_mask"].min() == 0
    assert_close(hx.max_abs_diffs(hx.jax_outputs(params, enc, inputs),
                                  hx.torch_outputs(model, inputs), inputs["attention_mask"]),
                 {"mlm_logits", "nsp_logits", "hidden", "pooled"})
    return params


def test_cli_export_and_import_round_trip(prepared, trained_run, tmp_path):
    overrides = tiny_overrides(str(prepared))
    config = tiny_config(prepared)   # trained_run's: 6 steps
    workdir, out = str(tmp_path / "run"), str(tmp_path / "hf")
    shutil.copytree(trained_run, workdir)
    assert main(["export", "--config", DEMO_CONFIG, *overrides, "--workdir", workdir,
                 "--out", out]) == 0   # the pretraining heads by default
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= \
        set(os.listdir(out))
    card = open(os.path.join(out, "README.md"), encoding="utf-8").read()
    assert "step 6" in card and "mlm_accuracy" in card and "konlpy" in card
    printed = run_model_card(out)
    assert "torch.Size([1, 3])" in printed and printed.count("[") >= 3   # shapes, top-5
    assert "QA start logits: torch.Size([1, " in printed
    params = assert_export_matches(config, workdir, out)
    assert main(["import", "--hf", out, "--out", str(tmp_path / "back"), *overrides]) == 0
    back, _ = restore_params(load_config(str(tmp_path / "back" / "kjax_config.py")),
                                str(tmp_path / "back"))
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(back),
                                                    jax.tree.leaves(params)))
    assert main(["export", "--config", DEMO_CONFIG, *overrides, "--workdir", workdir,
                 "--out", str(tmp_path / "x"), "--step", "5"]) == 2   # no such step
