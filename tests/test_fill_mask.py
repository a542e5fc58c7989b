"""`kjax fill-mask` (kjax/analysis/fill_mask.py): how a text with [MASK]
becomes the model's input, how answers read, its probabilities against the
model run by hand, the check set's hit rule, and its one-line errors."""
import json
import shutil
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from conftest import tiny_config
from kjax.analysis import fill_mask as fm
from kjax.cli import main
from kjax.errors import KjaxError
from kjax.tokens.sentencepiece import CLS, MASK, SEP, WORD_START


@pytest.fixture(scope="module")
def trained(prepared, trained_run, tmp_path_factory):
    """Six steps of the tiny model on the fixture corpus (conftest's run, a
    copy of it): (the folder tiny_config reads its tokenizer from, workdir)."""
    run = str(tmp_path_factory.mktemp("fill_mask") / "run")
    shutil.copytree(trained_run, run)
    return prepared, run


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_masks_are_kept_whole_and_a_spaced_mask_takes_the_word_start(trained):
    from kjax.tokens.factory import open_tokenizer
    tmp, _ = trained
    tokenizer = open_tokenizer(tiny_config(tmp))
    ids, positions = fm.encode_masked(tokenizer, "국민은 [MASK] 평등하다.", 64)
    assert ids[0] == CLS and ids[-1] == SEP and [int(ids[p]) for p in positions] == [MASK]
    raw = [int(i) for i in tokenizer.encode("국민은 [MASK] 평등하다.")["ids"]]
    if tokenizer.id_to_token(raw[raw.index(MASK) - 1]) == WORD_START:
        assert len(ids) == len(raw) + 1   # [CLS] and [SEP] in, the bare ▁ before [MASK] out
    assert tokenizer.id_to_token(int(ids[positions[0] - 1])) != WORD_START
    ids, positions = fm.encode_masked(tokenizer, "국민[MASK] 법 앞에 [MASK][MASK]다", 64)
    assert len(positions) == 3 and positions[2] == positions[1] + 1
    assert fm.mask_starts_word("국민[MASK] 법 앞에 [MASK][MASK]다") == [False, True, False]
    assert fm.mask_starts_word("[MASK]은 평등하다") == [True]
    with pytest.raises(KjaxError, match=r"no \[MASK\] in '국민은 평등하다'"):
        fm.encode_masked(tokenizer, "국민은 평등하다", 64)
    with pytest.raises(KjaxError, match="the model takes 6"):
        fm.encode_masked(tokenizer, "대한민국은 민주공화국이다 [MASK] 모든 권력은", 8)


def test_answers_read_as_text():
    assert fm.readable(WORD_START + "학교") == ("학교", True)
    assert fm.readable(WORD_START) == ("", True)
    assert fm.readable("에") == ("에", False)
    assert fm.fill_text("학교[MASK] 갔다", 0, "에", False) == "학교에 갔다"
    assert fm.fill_text("나는 [MASK] 갔다", 0, "학교", True) == "나는 학교 갔다"
    assert fm.fill_text("학교[MASK] 갔다", 0, "집", True) == "학교 집 갔다"
    assert fm.fill_text("[MASK]는 [MASK] 갔다", 1, "", True) == "[MASK]는 ␣ 갔다"
    boundary = fm.Answer(WORD_START, "", True, 0.5, "")
    assert fm.shown(boundary) == fm.WORD_BOUNDARY
    accepted = ["에", "로"]
    assert fm.is_hit(fm.Answer("에", "에", False, 0.1, ""), accepted, starts_word=False)
    assert not fm.is_hit(fm.Answer("▁에", "에", True, 0.1, ""), accepted, starts_word=False)
    assert not fm.is_hit(boundary, accepted, starts_word=True)


def test_probabilities_are_the_mlm_head_run_by_hand(trained, capsys):
    """The verb's top-k against BertForPreTraining over the whole sequence
    (mlm_positions=None) with the restored parameters, softmax by numpy."""
    from kjax.checkpoint.restore import restore_params
    from kjax.train.state import make_model
    tmp, run = trained
    config = tiny_config(tmp)
    text = "모든 국민은 법 앞에 [MASK]하다. 국민[MASK] 권리"
    assert main(["fill-mask", "--workdir", run, text, "--top-k", "4", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["step"] == 6 and len(printed["masks"]) == 2

    filler = fm.FillMask(config, run)
    ids, positions = fm.encode_masked(filler.tokenizer, text, config.data.max_seq_len)
    params, _ = restore_params(config, run)
    model = make_model(config, deterministic=True)
    logits = model.apply({"params": params}, ids[None], np.zeros_like(ids)[None],
                         np.ones_like(ids)[None])["mlm_logits"][0]
    for p, found in zip(positions, printed["masks"]):
        row = np.asarray(jax.nn.softmax(np.asarray(logits[p], np.float64)))
        top = np.argsort(-row)[:4]
        assert [a["piece"] for a in found] == [filler.tokenizer.id_to_token(int(i)) for i in top]
        np.testing.assert_allclose([a["probability"] for a in found], row[top], rtol=1e-4)
    assert all(fm.MASK_TEXT not in a["filled"] or a is not None for a in printed["masks"][0])
    assert printed["masks"][1][0]["filled"].startswith("모든 국민은 법 앞에 [MASK]하다. 국민")

    assert main(["fill-mask", "--workdir", run, text]) == 0
    table = capsys.readouterr().out
    assert "[MASK] 2 of 2" in table and "(step 6;" in table and "word boundary" in table


def assert_pipeline_answers_as_kjax(out: str, tmp, run: str) -> None:
    """transformers' pipeline("fill-mask") on the exported folder gives the
    same top-5 pieces and probabilities as `kjax fill-mask` on the checkpoint."""
    import torch
    from transformers import pipeline
    text = "모든 국민[MASK] 법 앞에 평등하다."
    answers = pipeline("fill-mask", model=out, dtype=torch.float32)(text, top_k=5)
    (found,), = fm.FillMask(tiny_config(tmp), run).predict([text], top_k=5)
    assert [a["token_str"].replace(" ", "") for a in answers] == [a.text for a in found]
    np.testing.assert_allclose([a["score"] for a in answers], [a.probability for a in found],
                               rtol=1e-4, atol=1e-6)


def test_exported_folder_answers_through_the_transformers_pipeline(trained, tmp_path, capsys):
    """`kjax export` (default: with the pretraining heads) → pipeline("fill-mask"):
    no weight newly initialised, the same top-k pieces and probabilities as
    `kjax fill-mask` on the checkpoint."""
    from transformers import AutoModel, AutoModelForMaskedLM
    tmp, run = trained
    out = str(tmp_path / "hf")
    assert main(["export", "--workdir", run, "--out", out]) == 0
    capsys.readouterr()
    _, info = AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"], info
    _, info = AutoModel.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"], info
    assert_pipeline_answers_as_kjax(out, tmp, run)
    card = open(f"{out}/README.md", encoding="utf-8").read()
    assert "pipeline(\"fill-mask\", model=folder)" in card and "pipeline_tag: fill-mask" in card


def test_an_mlm_only_export_is_a_masked_lm_with_no_untrained_weight(trained, tmp_path, capsys):
    """When NSP did not train (train.nsp_weight=0, as the demo) `kjax
    export` writes BertForMaskedLM — no NSP head, no pooler (only NSP trains
    it) — which AutoModelForMaskedLM loads with no missing or unexpected key
    and whose fill-mask answers are `kjax fill-mask`'s. (The export asks the
    config's objectives; this checkpoint's recorded config trained NSP, so the
    MLM-only config is given with --config.)"""
    from safetensors import safe_open
    from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification
    from conftest import DEMO_CONFIG, tiny_overrides
    from test_export import run_model_card
    tmp, run = trained
    out = str(tmp_path / "hf")
    overrides = tiny_overrides(str(tmp), **{"train.nsp_weight": 0.0})
    assert main(["export", "--config", DEMO_CONFIG, *overrides, "--workdir", run,
                 "--out", out]) == 0
    assert json.loads(capsys.readouterr().out)["architecture"] == "BertForMaskedLM"
    with safe_open(f"{out}/model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert "cls.predictions.bias" in keys
    assert not [k for k in keys if k.startswith(("cls.seq_relationship.", "bert.pooler."))]
    assert json.load(open(f"{out}/config.json"))["architectures"] == ["BertForMaskedLM"]
    written = json.load(open(f"{out}/kjax_export.json", encoding="utf-8"))
    assert written["objectives"] == "MLM" and written["architecture"] == "BertForMaskedLM"
    assert "nsp" not in written["heads"] and "pooler" not in written["heads"]
    assert set(written["verified_max_abs_diff"]) == {"hidden", "mlm_logits"}
    _, info = AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    _, info = AutoModelForSequenceClassification.from_pretrained(out, num_labels=2,
                                                                 output_loading_info=True)
    assert {k.rsplit(".", 1)[0] for k in info["missing_keys"]} == {"bert.pooler.dense",
                                                                    "classifier"}, info
    assert_pipeline_answers_as_kjax(out, tmp, run)
    card = open(f"{out}/README.md", encoding="utf-8").read()
    assert "pretrained with kjax (MLM)" in card and "as BertForMaskedLM" in card
    assert "neither its head nor the pooler is written" in card and "| nsp_" not in card
    assert "torch.Size([1, 3])" in run_model_card(out)   # its code runs, classifier included


def test_check_set_hit_rates(trained, tmp_path, capsys):
    rows = fm.read_check_set()   # the shipped everyday sentences
    assert len(rows) >= 30 and all(s.count("[MASK]") == 1 and a for s, a in rows)
    tmp, run = trained
    check = tmp_path / "check.tsv"
    check.write_text("# a comment\n국민[MASK] 권리\t의|은\n모든 [MASK] 평등하다\t국민\n",
                     encoding="utf-8")
    filler = fm.FillMask(tiny_config(tmp), run)
    result = fm.run_check(filler, fm.read_check_set(str(check)), top_k=600)
    assert result["sentences"] == 2 and result["top1"] <= result["topk"]
    # with k = the whole vocabulary every answer the vocabulary holds is found, at its rank
    for row in result["rows"]:
        ranks = [k + 1 for k, a in enumerate(row["answers"])
                 if fm.is_hit(fm.Answer(**a), row["accepted"],
                              fm.mask_starts_word(row["sentence"])[0])]
        assert row["hit_rank"] == (ranks[0] if ranks else None)
    assert main(["fill-mask", "--workdir", run, "--check", str(check), "--top-k", "3"]) == 0
    assert "top-3" in capsys.readouterr().out
    check.write_text("국민의 권리\t의\n", encoding="utf-8")
    with pytest.raises(KjaxError, match=r"check.tsv:1: a check line is a sentence with one"):
        fm.read_check_set(str(check))


def test_one_line_errors(trained, tmp_path, capsys):
    tmp, run = trained
    ov = []   # the run's recorded config
    assert main(["fill-mask", "--workdir", run, "국민은 평등하다", *ov]) == 2
    assert "no [MASK] in '국민은 평등하다'" in one_line_error(capsys)
    assert main(["fill-mask", "--workdir", run, *ov]) == 2
    assert "give one of a text, --file TEXTS or --check" in one_line_error(capsys)
    assert main(["fill-mask", "--workdir", run, "x[MASK]", "--top-k", "0", *ov]) == 2
    assert "--top-k 0" in one_line_error(capsys)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    assert main(["fill-mask", "--workdir", run, "--file", str(empty), *ov]) == 2
    assert "no texts" in one_line_error(capsys)
    empty.write_text("국민[MASK] 권리\n\n국민의 권리\n", encoding="utf-8")
    assert main(["fill-mask", "--workdir", run, "--file", str(empty), *ov]) == 2
    assert "empty.txt:3: no [MASK] in '국민의 권리'" in one_line_error(capsys)
    empty.write_text("국민[MASK] 권리\n\n모든 [MASK] 평등하다\n", encoding="utf-8")
    assert main(["fill-mask", "--workdir", run, "--file", str(empty), "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["text"] for x in lines] == ["국민[MASK] 권리", "모든 [MASK] 평등하다"]
    assert all(len(x["masks"]) == 1 and len(x["masks"][0]) == 5 for x in lines)
    assert main(["fill-mask", "--workdir", str(tmp_path / "none"), "x[MASK]", *ov]) == 2
    one_line_error(capsys)
    config = tiny_config(tmp, **{"model.input_mode": "merged"})
    with pytest.raises(KjaxError, match="input_mode='merged' puts several tokens"):
        fm.check_supported(config, SimpleNamespace(scheme="sentencepiece"))
    config = tiny_config(tmp, **{"model.input_mode": "shared_position"})
    with pytest.raises(KjaxError, match="input_mode='shared_position' numbers them from morph"):
        fm.check_supported(config, SimpleNamespace(scheme="sentencepiece"))
    with pytest.raises(KjaxError, match="tokenizer.scheme='sentencepiece' \\(this run's is "
                                        "'morph-sp'"):
        fm.check_supported(tiny_config(tmp), SimpleNamespace(scheme="morph-sp"))


# ---- multi-hot (UKnowBERT) models: a [MASK] is one morpheme position ----------------------
@pytest.fixture(scope="module")
def multihot_run(tmp_path_factory):
    """A multi-hot checkpoint with random weights (a transformers folder from
    kjax's writer, brought in by `kjax import`): (config, workdir)."""
    from test_export import random_params
    from conftest import DEMO_CONFIG, tiny_overrides
    from kjax.config import load_config, platform_defaults
    from kjax.export import hf_export as hx
    from kjax.model.config import EncoderConfig
    from kjax.morph.tags import TAGS
    from kjax.tokens.multihot import BASE_TOKENS, MultihotVocab
    tmp = tmp_path_factory.mktemp("fill_mask_multihot")
    words = ["나", "##는", "##가", "##를", "##을", "##에", "학교", "커피", "좋아하##", "##ㅂ니다",
             "보##", "##았", "##다", "@날", "@씨"]
    MultihotVocab([*BASE_TOKENS, *words]).save(str(tmp / "mh.multihot.txt"))
    overrides = tiny_overrides(str(tmp), **{
        "model.input_mode": "multihot", "tokenizer.scheme": "multihot",
        "tokenizer.path": f"{tmp}/mh", "model.vocab_size": len(BASE_TOKENS) + len(words),
        "model.num_pos_tags": len(TAGS), "model.max_tokens_per_morpheme": 4,
        "train.mlm_loss": "eq9", "data.mask_unit": "morpheme"})
    config = platform_defaults.resolved(load_config(DEMO_CONFIG, overrides))  # as a verb
    enc = EncoderConfig.from_config(config.model)
    hx.write_hf_model(random_params(enc, seed=3), enc, str(tmp / "hf"))
    assert main(["import", "--hf", str(tmp / "hf"), "--out", str(tmp / "w"), *overrides]) == 0
    return config, str(tmp / "w")


def test_multihot_fill_mask_is_its_mlm_head_run_by_hand(multihot_run, capsys):
    """Morpheme answers: the mixture over word-class tags (fill_mask_morphemes.py)
    against BertForPreTraining over every position, softmax by numpy, and every
    (token, tag) the vocabulary's §2.2 rules make one morpheme."""
    from kjax.analysis import fill_mask_morphemes as fmm
    from kjax.checkpoint.restore import restore_params
    from kjax.morph.tags import TAGS
    from kjax.tokens.multihot import token_surface
    from kjax.train.state import make_model
    config, run = multihot_run
    text = "저는 커피[MASK] 좋아합니다."
    assert main(["fill-mask", "--workdir", run, text, "--top-k", "3", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    (found,) = printed["masks"]
    filler = fmm.open_filler(config, run)
    assert isinstance(filler, fmm.MorphemeFillMask)
    row, (at,) = filler.encode(text)
    tokens = row["token_ids"][row["token_position"] == at]
    assert tokens.tolist() == [MASK]                  # one position, one [MASK] token
    params, _ = restore_params(config, run)
    model = make_model(config, deterministic=True)
    vocab = filler.tokenizer.vocab
    mixture = {}
    for tag in fmm.TAG_SET:
        multihot = {k: row[k][None] for k in ("token_ids", "token_position", "token_inpos",
                                              "position_tags")}
        multihot["position_tags"] = multihot["position_tags"].copy()
        multihot["position_tags"][0, at] = tag
        logits = model.apply({"params": params}, row["token_ids"][None],
                             row["token_type_ids"][None], row["attention_mask"][None],
                             multihot=multihot)["mlm_logits"][0, at]
        probs = np.asarray(jax.nn.softmax(np.asarray(logits, np.float64)))
        for v in range(5, len(vocab)):
            form = token_surface(vocab.id_to_token(v))
            if vocab.encode_morpheme_ids(form, TAGS[tag]) == (v,):
                key = (form, not fmm.continues_word(TAGS[tag]))
                mixture[key] = mixture.get(key, 0.0) + probs[v] / len(fmm.TAG_SET)
    best = sorted(mixture, key=lambda k: -mixture[k])[:3]
    assert [(a["text"], a["starts_word"]) for a in found] == best
    np.testing.assert_allclose([a["probability"] for a in found],
                               [mixture[k] for k in best], rtol=1e-4)
    assert ("를", False) in mixture and ("학교", True) in mixture    # particles glue, nouns start
    assert found[0]["filled"] == fm.fill_text(text, 0, *best[0])
    # --check runs on it (the hit rule reads answers as morphemes)
    assert main(["fill-mask", "--workdir", run, "--check", "--top-k", "3"]) == 0
    assert "top-3" in capsys.readouterr().out


def test_merged_positions_are_refused_in_one_line(trained, capsys):
    from kjax.analysis.fill_mask_morphemes import open_filler
    tmp, run = trained
    config = tiny_config(tmp, **{"model.input_mode": "merged"})
    with pytest.raises(KjaxError, match="substantive and its postposition in one position"):
        open_filler(config, run)
