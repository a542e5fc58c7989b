"""Extractive QA (KorQuAD v1.0 / KLUE-MRC). The reader, doc-stride
windows, answer spans through every input mode's positions and back, the
official EM/F1 (KorQuAD's character F1 and SQuAD's whitespace F1), and a
tiny one-hot and multi-hot model learning a QA fixture well above chance."""
import json
import os

import numpy as np
import pytest

from conftest import ROOT
from kjax.errors import KjaxError
from kjax.finetune.experiment import finetune_settings, make_tuner
from kjax.finetune.qa import decode_answers, gold_answers, read_squad
from kjax.finetune.qa_metrics import char_f1, exact_match, normalize, qa_metrics, token_f1
from kjax.finetune.readers import split_examples
from test_finetune_modes import mode_config, train_tokenizers

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "qa")
NAMES = ["철수", "영희", "민수", "지영"]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    return train_tokenizers(tmp_path_factory)
FILLER = ["그리고", "법", "제", "조", "항", "및", "등", "수", "있다", "국민", "정부", "학교"]


def test_reader_parses_korquad_and_klue_mrc():
    korquad = read_squad(os.path.join(FIXTURES, "korquad.json"))
    assert [e.guid for e in korquad] == ["k1", "k2", "k3"]
    assert korquad[0].text_a == "훈민정음을 창제한 사람은?" and korquad[0].group == "훈민정음"
    assert gold_answers(korquad)[1] == ["1446년", "1446"]
    mrc = read_squad(os.path.join(FIXTURES, "klue_mrc.json"))
    assert [e.impossible for e in mrc] == [False, True]
    assert gold_answers(mrc) == [["한강"], [""]]     # plausible answers are not gold


def test_reader_errors_name_the_question_and_the_fix(tmp_path):
    bad = json.load(open(os.path.join(FIXTURES, "korquad.json"), encoding="utf-8"))
    bad["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 3
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(KjaxError, match=r"question k1: answer '세종대왕' is not at answer_start 3 "
                                        r"of its context \(found '왕은 1'\); fix answer_start"):
        read_squad(str(path))
    path.write_text('[{"text": "a", "label": "x"}]', encoding="utf-8")
    with pytest.raises(KjaxError, match="needs SQuAD-style JSON"):
        read_squad(str(path))


def test_split_keeps_an_article_on_one_side():
    examples = read_squad(os.path.join(FIXTURES, "korquad.json")) * 1
    for seed in range(5):
        parts = split_examples(examples, (0.5, 0.5), seed)
        sides = [{e.group for e in part} for part in parts]
        assert not sides[0] & sides[1] and sum(map(len, parts)) == 3


def test_korquad_character_f1_and_squad_whitespace_f1_by_hand():
    assert normalize("《훈민정음》을  (1446)") == "훈민정음 을 1446"
    # KorQuAD: characters without spaces; 세종대왕 vs 세종 대왕은: 4 shared of 4 / 5
    assert char_f1("세종 대왕은", "세종대왕") == pytest.approx(2 * (4 / 5) * 1 / (4 / 5 + 1))
    assert token_f1("세종 대왕은", "세종대왕") == 0.0          # no whitespace token in common
    assert token_f1("1446년 에", "1446년") == pytest.approx(2 / 3)
    assert exact_match("'서울'", "서울") == 1.0
    m = qa_metrics([["1446년", "1446"], [""], ["한강"]], ["1446", "", "한강이"])
    assert m["exact_match"] == pytest.approx(2 / 3)
    assert m["f1"] == pytest.approx((1 + 1 + 2 * 1 * (2 / 3) / (1 + 2 / 3)) / 3)
    assert m["no_answer_accuracy"] == 1.0 and m["has_answer_f1"] == pytest.approx((1 + 0.8) / 2)


def qa_rows(n, seed, impossible=0.0, words=18):
    """A name (the answer) among filler words; `impossible`: share with no name."""
    rng, data = np.random.default_rng(seed), []
    for i in range(n):
        ws = list(rng.choice(FILLER, words))
        answer = None
        if rng.random() >= impossible:
            k = int(rng.integers(len(ws)))
            ws[k] = str(rng.choice(NAMES)) + "가"
            answer = ws[k][:-1]
        context = " ".join(ws)
        qa = {"id": f"q{seed}-{i}", "question": "누가 왔나요?"}
        if answer is None:
            qa.update(answers=[], is_impossible=True)
        else:
            qa["answers"] = [{"text": answer, "answer_start": context.index(answer + "가")}]
        data.append({"title": f"t{seed}-{i}", "paragraphs": [{"context": context, "qas": [qa]}]})
    return {"data": data}


def write(path, obj):
    path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return str(path)


QA_FT = ["finetune.max_seq_len=24", "finetune.doc_stride=6", "finetune.max_query_len=8",
         "finetune.batch_size=16", "finetune.classifier_dropout=0.0", "finetune.patience=0",
         "finetune.checkpoint_every=1000", "finetune.log_every=10"]


@pytest.mark.parametrize("mode", ["onehot", "multihot", "merged"])
def test_windows_and_spans_round_trip_through_the_modes_positions(tokenizers, tmp_path, mode):
    """Logits that point at the gold labels decode to the gold answer: the
    char span → token → position → token → char path loses nothing, over
    several doc-stride windows per question."""
    config, tokenizer = mode_config(tokenizers, mode)
    path = write(tmp_path / "qa.json", qa_rows(12, 0, impossible=0.25))
    tuner = make_tuner(config, finetune_settings(QA_FT + ["finetune.split=(0.5,0.5)"]), "qa",
                       path, init="none", tokenizer=tokenizer)
    feats, examples = tuner.data.features["train"], tuner.data.examples["train"]
    per_question = np.bincount(feats.example_index)
    assert per_question.min() >= 2, per_question     # contexts outgrow one window
    outputs = []
    for row in range(len(feats)):
        logits = np.full((24, 2), -5.0)
        logits[feats.labels[row, 0], 0] = logits[feats.labels[row, 1], 1] = 5.0
        outputs.append(logits)
    preds = decode_answers(feats, outputs, examples, allow_null=True)
    for pred, (gold, *_) in zip(preds, gold_answers(examples)):
        # merged: 철수+가 is one position, so the answer takes its postposition
        # along (never past the eojeol); every other mode gives it back exactly
        assert pred == gold or (mode == "merged" and pred.startswith(gold) and gold
                                and " " not in pred), (pred, gold)
    assert any(p == "" for p in preds) and any(p for p in preds)
    answered = [(e.label[0][1], feats.labels[feats.example_index == i])
                for i, e in enumerate(examples) if not e.impossible]
    for _, labels in answered:                        # some window holds the whole answer
        assert (labels[:, 0] > 0).any() and (labels[:, 1] >= labels[:, 0]).all()


# One run per mode: compiles and checkpoints (about 40-60 s on the shared CPU).
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["onehot", "multihot"])
def test_a_tiny_model_learns_the_qa_fixture(tokenizers, tmp_path, mode):
    from kjax.finetune.run import run_one
    config, tokenizer = mode_config(tokenizers, mode)
    train = write(tmp_path / "train.json", qa_rows(96, 0, words=10))
    dev = write(tmp_path / "dev.json", qa_rows(32, 1, words=10))
    ft = finetune_settings(QA_FT + ["finetune.epochs=8", "finetune.learning_rate=5e-3",
                                    "finetune.max_seq_len=32", "finetune.doc_stride=16"])
    tuner = make_tuner(config, ft, "qa", train, dev, init="none", tokenizer=tokenizer)
    result = run_one(tuner, 0, 0.0, [0.0], str(tmp_path / "run"), progress=False)
    dev_metrics, baseline = result["results"]["+0"]["dev"], result["baseline"]["dev"]
    assert baseline["f1"] == 0.0
    assert dev_metrics["f1"] >= 0.7 and dev_metrics["exact_match"] >= 0.6, dev_metrics
    rows = [json.loads(line) for line in open(tmp_path / "run" / "predictions_dev.jsonl",
                                              encoding="utf-8")]
    assert len(rows) == 32 and {"guid", "question", "gold", "pred"} <= set(rows[0])
