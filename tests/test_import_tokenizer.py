"""`kjax import --hf DIR` keeps the folder's tokenizer
(tokenizer.json, or vocab.txt) as tokenizer.scheme='imported', whose ids are
the transformers tokenizer's own; fine-tuning builds its rows with the
vocabulary's special ids. Tiny random models built by transformers, offline."""
import json
import os

import numpy as np
import pytest
import torch
from tokenizers import BertWordPieceTokenizer
from transformers import AutoTokenizer, BertConfig, BertForPreTraining

from conftest import DEMO_CONFIG
from kjax.config import load_config, platform_defaults
from kjax.errors import KjaxError
from kjax.export import hf_import as hi
from kjax.finetune.features import Encoder
from kjax.finetune.readers import Example
from kjax.finetune.registry import finetune_task
from kjax.tokens.factory import load_tokenizer

CORPUS = ["대한민국은 민주공화국이다.", "대한민국의 주권은 국민에게 있고, 모든 권력은 국민으로부터 나온다.",
          "국민 정부 서울 부산 철수 영희 그리고 이 법 제 조 항 및 등 의 는 에 를 수 있다",
          "헌법 제1조 2항: 모든 국민은 법 앞에 평등하다!", "KLUE 2021 데이터셋 (dev)"]
KOREAN = CORPUS + ["처음 보는 낱말들: 꿹뷁 똠얌꿍 🙂", "  앞뒤 공백과   여러 칸  ", "",
                   "서울에서 부산까지 KTX로 2시간 30분 걸린다고 철수가 말했다."]
SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def wordpiece_folder(path, with_json: bool) -> int:
    """A BERT-style tokenizer folder whose specials are NOT kjax's ids 0..4
    ([PAD] 0, [UNK] [CLS] [SEP] [MASK] last, as mBERT's 100..103 are not
    1..4). with_json: tokenizer.json (save_pretrained); else vocab.txt +
    tokenizer_config.json only (KoELECTRA's hub layout)."""
    trained = BertWordPieceTokenizer(lowercase=False, strip_accents=False)
    trained.train_from_iterator(CORPUS * 5, vocab_size=150, min_frequency=1,
                                show_progress=False)
    vocab = sorted(trained.get_vocab().items(), key=lambda kv: kv[1])
    words = [w for w, _ in vocab if w not in SPECIALS + ["[PAD]"]]
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(["[PAD]", *words, *SPECIALS]) + "\n")
    with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"do_lower_case": False, "strip_accents": False,
                   "tokenizer_class": "BertTokenizer"}, f)
    if with_json:   # transformers' own conversion, saved as a fast tokenizer
        AutoTokenizer.from_pretrained(path).save_pretrained(path)
        os.remove(os.path.join(path, "vocab.txt"))
    return len(words) + 5


@pytest.mark.parametrize("with_json", [True, False], ids=["tokenizer.json", "vocab.txt"])
def test_imported_tokenizer_ids_equal_transformers(tmp_path, with_json):
    n = wordpiece_folder(tmp_path / "hf", with_json)
    torch.manual_seed(0)
    BertForPreTraining(BertConfig(vocab_size=n, hidden_size=32, num_hidden_layers=1,
                                  num_attention_heads=4, intermediate_size=37,
                                  max_position_embeddings=40)).save_pretrained(tmp_path / "hf")
    want = AutoTokenizer.from_pretrained(tmp_path / "hf")
    report = hi.import_hf(str(tmp_path / "hf"), str(tmp_path / "w"), load_config(DEMO_CONFIG))
    assert report["tokenizer"] == str(tmp_path / "w" / "tokenizer.json")
    # the written config reads it back (resolved for this platform, as a verb loads it)
    config = platform_defaults.resolved(load_config(report["config"]))
    assert config.tokenizer.scheme == "imported" and config.tokenizer.path == report["tokenizer"]
    tok = load_tokenizer(config)
    assert tok.special_ids == {"pad": 0, "unk": n - 4, "cls": n - 3, "sep": n - 2, "mask": n - 1}
    for text in KOREAN:
        got = tok.encode(text)
        assert got["ids"].tolist() == want(text, add_special_tokens=False)["input_ids"], text
        assert (got["tag"] == 0).all() and got["morph"].tolist() == got["eojeol"].tolist()
    got = tok.encode("대한민국은 민주공화국이다.")   # eojeol from the offsets' whitespace
    pieces = [tok.id_to_token(i) for i in got["ids"]]
    second = pieces.index(next(p for p in pieces[1:] if not p.startswith("##")))
    assert got["eojeol"][0] == 0 and got["eojeol"][second] == 1 and got["inpos"][second] == 0
    # fine-tuning rows: [CLS] a [SEP] b [SEP] with the vocabulary's own ids, padded with [PAD]
    pair = finetune_task("pair")
    feats = Encoder(tok, pair, ["x"], 24).encode([Example("g", KOREAN[0], KOREAN[1], "x")])
    row = want(KOREAN[0], KOREAN[1], truncation="longest_first", max_length=24,
               padding="max_length")
    assert feats.input_ids[0].tolist() == row["input_ids"]
    assert feats.token_type_ids[0].tolist() == row["token_type_ids"]
    assert feats.attention_mask[0].tolist() == row["attention_mask"]
    # kjax inspect reads it; kjax export writes it back as the fast tokenizer it was
    from kjax.cli.inspect import inspect_text
    from kjax.export.checkpoint_export import export_checkpoint
    shown = inspect_text(KOREAN[0], config, tok)
    assert shown["scheme"] == "imported"
    assert [r["id"] for r in shown["tokens"]] == want(KOREAN[0], add_special_tokens=False)[
        "input_ids"]
    export_checkpoint(config, str(tmp_path / "w"), str(tmp_path / "out"))
    back = AutoTokenizer.from_pretrained(tmp_path / "out")
    for text in KOREAN:
        assert back(text, "국민")["input_ids"] == want(text, "국민")["input_ids"], text
    # POS shaking: the imported tokens lined up with Kiwi's morphemes (as plain sentencepiece)
    from kjax.finetune.experiment import finetune_settings, shake_settings
    from kjax.finetune.features import make_batch
    pos = Encoder(tok, finetune_task("pair"), ["x"], 40, pos_from_kiwi=True).encode(
        [Example("p", KOREAN[1], "모든 국민은 법 앞에 평등하다", "x")])
    assert pos.units["tags"][0].max() > 0 and 0.5 < pos.aligned_tokens <= 1
    b = np.asarray(make_batch(pos, [0], shake_settings(config, finetune_settings([])))["shake"],
                   np.float32)
    assert len(np.nonzero(b[0])[0]) >= 2     # postposition → its substantive pairs (§1.3)
    # QA rows: [CLS] question [SEP] context [SEP] in its ids; the answer's tokens cover it
    from kjax.finetune.qa import QAEncoder
    context = KOREAN[1]
    start = context.index("국민에게")
    qa = QAEncoder(tok, 40, 16, 12).encode([Example("q", "주권은 누구에게 있나?", context,
                                                    [(start, "국민")])])
    ids = qa.input_ids[0]
    q_ids = tok.encode("주권은 누구에게 있나?")["ids"].tolist()
    assert ids[0] == tok.special_ids["cls"] and ids[len(q_ids) + 1] == tok.special_ids["sep"]
    first, last = qa.labels[0]
    covered = (qa.token_spans[0][first][0], qa.token_spans[0][last][1])
    assert covered[0] <= start and covered[1] >= start + 2 and first > len(q_ids) + 1

def test_imported_scheme_is_refused_where_it_cannot_work(tmp_path):
    from kjax.objectives import check_config
    from kjax.tokens.factory import train_tokenizer
    config = load_config(DEMO_CONFIG, ["--config.tokenizer.scheme=imported",
                                       f"--config.tokenizer.path={tmp_path}/none.json"])
    with pytest.raises(KjaxError, match="not trained by kjax"):
        train_tokenizer(config)
    with pytest.raises(KjaxError, match="imported tokenizer .* not found"):
        load_tokenizer(config)
    from kjax.pretrain.prepare import pretraining_tokenizer   # masking writes kjax's [MASK]
    n = wordpiece_folder(tmp_path / "hf", with_json=True)     # specials at 0 and n-4..n-1
    foreign = load_config(DEMO_CONFIG, ["--config.tokenizer.scheme=imported",
                                        f"--config.tokenizer.path={tmp_path}/hf/tokenizer.json"])
    with pytest.raises(KjaxError, match=rf"special tokens have the ids pad 0, unk {n - 4}, "
                                        rf"cls {n - 3}, sep {n - 2}, mask {n - 1}; .* cannot "
                                        rf"pretrain on this vocabulary yet") as e:
        pretraining_tokenizer(foreign)
    assert "\n" not in str(e.value)
    with pytest.raises(KjaxError, match="needs POS tags"):   # pretraining B from POS pairs
        check_config(load_config(DEMO_CONFIG, ["--config.tokenizer.scheme=imported",
                                               "--config.shake.variant=pos"]))
    # kjax analyze reads it now: tests/test_import_roberta.py::test_analyze_reads_an_imported_vocabulary
    for mode in ("multihot", "merged", "shared_position"):   # they need morphemes / POS
        bad = load_config(DEMO_CONFIG, ["--config.tokenizer.scheme=imported",
                                        f"--config.model.input_mode={mode}"])
        with pytest.raises(KjaxError, match="tokenizer.scheme"):
            check_config(bad)
    (tmp_path / "bad.json").write_text("{}")
    config.tokenizer.path = str(tmp_path / "bad.json")
    with pytest.raises(KjaxError, match="not a tokenizers tokenizer.json"):
        load_tokenizer(config)


def electra_small_folder(path) -> "torch.nn.Module":
    """A KoELECTRA-small-shaped discriminator (embedding_size 16 < hidden 32,
    so `embeddings_project` exists) with its own tokenizer, noise on every
    weight so that a dropped projection or a swapped tensor shows."""
    from transformers import ElectraConfig, ElectraForPreTraining
    n = wordpiece_folder(path, with_json=False)
    torch.manual_seed(3)
    model = ElectraForPreTraining(ElectraConfig(
        vocab_size=n, embedding_size=16, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=37, max_position_embeddings=40))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(path)
    return model.eval()


def test_electra_small_with_an_embedding_projection_imports_exactly(tmp_path):
    from kjax.checkpoint.restore import restore_params
    from kjax.export import hf_export as hx
    from kjax.model.config import EncoderConfig
    model = electra_small_folder(tmp_path / "hf")
    report = hi.import_hf(str(tmp_path / "hf"), str(tmp_path / "w"), load_config(DEMO_CONFIG))
    config = platform_defaults.resolved(load_config(report["config"]))  # as a verb loads it
    assert config.model.embedding_size == 16 and config.model.hidden_size == 32
    assert "electra.embeddings_project.weight" not in report["unused_source_tensors"]
    params, _ = restore_params(config, str(tmp_path / "w"))
    assert params["embeddings"]["word_embeddings"]["embedding"].shape == (model.config.vocab_size, 16)
    assert params["embeddings"]["embeddings_project"]["kernel"].shape == (16, 32)
    enc = EncoderConfig.from_config(config.model)
    tok = load_tokenizer(config)     # the folder's vocab.txt, imported
    feats = Encoder(tok, finetune_task("pair"), ["x"], 32).encode(
        [Example("a", KOREAN[0], KOREAN[1], "x"), Example("b", KOREAN[3], None, "x")])
    inputs = {"input_ids": feats.input_ids, "token_type_ids": feats.token_type_ids,
              "attention_mask": feats.attention_mask}
    got = hx.jax_outputs(params, enc, inputs)
    with torch.no_grad():
        out = model(**{k: torch.as_tensor(v).long() for k, v in inputs.items()},
                    output_hidden_states=True)
    diffs = hx.max_abs_diffs({"hidden": got["hidden"]},
                             {"hidden": out.hidden_states[-1].numpy()}, inputs["attention_mask"])
    assert diffs["hidden"] <= 1e-5, diffs
    # exported back as ELECTRA (BERT has no projection), MLM head = the generator head
    import jax
    from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForQuestionAnswering
    from kjax.export.checkpoint_export import export_checkpoint
    result = export_checkpoint(config, str(tmp_path / "w"), str(tmp_path / "out"),
                                  with_heads=True)
    assert result["architecture"] == "ElectraForMaskedLM"
    assert max(result["verified_max_abs_diff"].values()) <= 1e-5, result
    batch = {k: torch.as_tensor(v).long() for k, v in inputs.items()}
    with torch.no_grad():
        exported = AutoModel.from_pretrained(tmp_path / "out").eval()(**batch)
    real = inputs["attention_mask"] > 0
    np.testing.assert_array_equal(exported.last_hidden_state.numpy()[real],
                                  out.hidden_states[-1].numpy()[real])
    assert type(AutoModelForMaskedLM.from_pretrained(tmp_path / "out")).__name__ == \
        "ElectraForMaskedLM"
    qa = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "out")
    assert type(qa).__name__ == "ElectraForQuestionAnswering"
    back = hi.import_hf(str(tmp_path / "out"), str(tmp_path / "w2"), load_config(DEMO_CONFIG))
    assert back["initialised"] == ["pooler", "nsp"]     # ELECTRA has neither
    again, _ = restore_params(load_config(back["config"]), str(tmp_path / "w2"))
    for name in ("embeddings", "encoder", "mlm_transform", "mlm_layer_norm", "mlm_bias"):
        for a, b in zip(jax.tree.leaves(again[name]), jax.tree.leaves(params[name])):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)


@pytest.mark.slow
def test_finetune_from_an_imported_electra_with_its_tokenizer_learns(tmp_path):
    """`kjax import` → `kjax finetune --init W` with W/kjax_config.py: the
    imported vocabulary tokenizes the task, the imported encoder learns it."""
    import glob
    from kjax.cli import main
    from test_finetune import FT, synthetic, write_jsonl
    electra_small_folder(tmp_path / "hf")
    w = str(tmp_path / "w")
    assert main(["import", "--hf", str(tmp_path / "hf"), "--out", w]) == 0
    train = write_jsonl(tmp_path / "train.jsonl", synthetic("classify", 64, 0))
    dev = write_jsonl(tmp_path / "dev.jsonl", synthetic("classify", 32, 1))
    out = str(tmp_path / "ft")
    assert main(["finetune", "--config", os.path.join(w, "kjax_config.py"), "--init", w,
                 "--task", "classify", "--train", train, "--dev", dev, "--out", out,
                 *[f"--config.{x}" for x in FT]]) == 0
    [metrics] = glob.glob(os.path.join(out, "**", "metrics.json"), recursive=True)
    with open(metrics, encoding="utf-8") as f:
        result = json.load(f)
    dev_scores = result["results"]["+0"]["dev"]
    assert dev_scores["macro_f1"] >= 0.9, dev_scores
    assert result["baseline"]["dev"]["macro_f1"] < 0.65
