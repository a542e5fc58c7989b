"""The NIKL and NSMC readers (CoPA multiple choice, BoolQ pairs,
NSMC sentences) on small fixtures in their published layouts, and the
multiple-choice head learning a fixture well above chance."""
import json
import os

import numpy as np
import pytest

from conftest import ROOT, tiny_config
from kjax.errors import KjaxError
from kjax.finetune.experiment import finetune_settings, make_tuner
from kjax.finetune import readers
from kjax.finetune.registry import finetune_task

NIKL = os.path.join(ROOT, "tests", "fixtures", "nikl")

def read_examples(path, task, fmt="auto"):
    """The readers take the task object (kjax/finetune/readers.py); these
    tests name it."""
    return readers.read_examples(path, finetune_task(task), fmt)


def test_copa_reads_premise_question_and_alternatives():
    rows = read_examples(os.path.join(NIKL, "copa.tsv"), "choice")
    assert [r.label for r in rows] == [0, 0, 1]                # Answer 1, 1, 2 → 0-based
    assert rows[2].text_a == "남자는 휴가를 떠났다. 원인" and rows[2].guid == "3"
    assert rows[0].choices == ("베이스 소리가 강조되었다.", "베이스 소리가 약해졌다.")


def test_boolq_and_nsmc_read_as_pair_and_sentence():
    boolq = read_examples(os.path.join(NIKL, "boolq.tsv"), "pair")
    assert (boolq[1].text_a, boolq[1].text_b, boolq[1].label) == \
        ("고양이는 육식 동물이다.", "고양이는 풀만 먹는가?", "0")
    nsmc = read_examples(os.path.join(NIKL, "nsmc.txt"), "classify")
    assert [(r.guid, r.label) for r in nsmc] == [("6270596", "1"), ("9274899", "0"),
                                                 ("8544678", "0")]


def test_choice_errors_are_one_line(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("ID\tsentence\tquestion\t1\t2\tAnswer\n1\t비가 왔다.\t결과\t젖었다.\t말랐다.\t3\n",
                    encoding="utf-8")
    with pytest.raises(KjaxError, match=r"bad.tsv:2: answer '3' is neither a choice number "
                                        r"1..2 nor one of the choices"):
        read_examples(str(path), "choice")
    path.write_text('{"text": "비가 왔다.", "1": "젖었다.", "label": 1}\n', encoding="utf-8")
    with pytest.raises(KjaxError, match="needs two or more alternatives"):
        read_examples(str(path), "choice", "jsonl")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from kjax.tokens.factory import load_tokenizer, train_tokenizer
    tmp = tmp_path_factory.mktemp("tasks")
    config = tiny_config(tmp)
    train_tokenizer(config)
    return tmp, config, load_tokenizer(config)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                    encoding="utf-8")
    return str(path)


def test_sts_targets_are_scaled_and_a_constant_predictor_is_undefined(env, tmp_path):
    from kjax.finetune.experiment import summarize
    tmp, config, tokenizer = env
    rows = [{"text": f"국민 {i}", "text_b": "정부", "score": i % 6 * 1.0} for i in range(12)]
    tuner = make_tuner(config, finetune_settings(["finetune.max_seq_len=16"]), "regress",
                       write_jsonl(tmp_path / "sts.jsonl", rows),
                       write_jsonl(tmp_path / "dev.jsonl", rows[:3]), init="none",
                       tokenizer=tokenizer)
    labels = tuner.data.features["train"].labels
    assert tuner.target_scale == 5.0 and 0 <= labels.min() and labels.max() == 1.0
    assert tuner._decode(tuner.data.features["dev"], 0, np.float32(0.5)) == 2.5
    constant = finetune_task("regress").metrics([0.0, 2.0, 5.0], [3.0, 3.0, 3.0])
    assert constant["pearson"] is None and constant["spearman"] is None
    # the training-mean baseline: a mean whose x - mean(x) is rounding noise, not 0
    mean = float(np.mean([3.2, 1.1, 0.7]))
    noisy = np.full(104, mean)
    assert (noisy - noisy.mean()).any()
    assert finetune_task("regress").metrics(np.linspace(0, 5, 104), noisy)["pearson"] is None
    run = {"bf_train": 0.0, "results": {"+0": {"dev": constant}},
           "baseline": {"dev": constant}}
    assert "| +0 | +0 | undefined | 1 |" in summarize([run], "pearson")["table"]


KEYS = ["국민", "정부", "학교", "법"]


def choice_rows(n, seed):
    """The right alternative repeats the premise's keyword; the other holds another one."""
    rng, rows = np.random.default_rng(seed), []
    for _ in range(n):
        right, wrong = rng.choice(len(KEYS), 2, replace=False)
        first = int(rng.integers(2))
        alts = [f"그리고 {KEYS[right]} 있다", f"그리고 {KEYS[wrong]} 있다"][::1 - 2 * first]
        rows.append({"text": f"{KEYS[right]} 및 {KEYS[right]} 등", "1": alts[0], "2": alts[1],
                     "label": first + 1})
    return rows


@pytest.mark.slow
def test_the_multiple_choice_head_learns_its_fixture(env, tmp_path):
    from kjax.finetune.run import run_one
    _, config, tokenizer = env
    files = []
    for name, n, seed in (("train", 128, 0), ("dev", 32, 1)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                                for r in choice_rows(n, seed)), encoding="utf-8")
        files.append(str(path))
    ft = finetune_settings(["finetune.max_seq_len=24", "finetune.batch_size=16",
                            "finetune.epochs=8", "finetune.learning_rate=5e-3",
                            "finetune.patience=0", "finetune.classifier_dropout=0.0",
                            "finetune.checkpoint_every=1000"])
    tuner = make_tuner(config, ft, "choice", *files, init="none", tokenizer=tokenizer)
    assert len(tuner.data.features["train"]) == 256 and tuner.steps_per_epoch == 8
    result = run_one(tuner, 0, 0.0, [0.0], str(tmp_path / "run"), progress=False)
    dev, baseline = result["results"]["+0"]["dev"], result["baseline"]["dev"]
    assert baseline["accuracy"] <= 0.65 and dev["accuracy"] >= 0.85, (dev, baseline)


def test_wic_reads_target_spans_and_masks_the_target_word(env, tmp_path):
    from kjax.finetune.features import make_batch
    from kjax.finetune.heads import model_inputs
    _, config, tokenizer = env
    rows = read_examples(os.path.join(NIKL, "wic.tsv"), "wic")
    assert [(r.label, r.target_spans) for r in rows] == [("True", ((0, 1), (2, 3))),
                                                        ("False", ((0, 2), (3, 5)))]
    bad = tmp_path / "bad.tsv"
    bad.write_text(open(os.path.join(NIKL, "wic.tsv"), encoding="utf-8").read()
                   .replace("\t3\t5\n", "\t3\t40\n"), encoding="utf-8")
    with pytest.raises(KjaxError, match=r"bad.tsv:3: target span \[3, 40\) lies outside "
                                        r"sentence 2"):
        read_examples(str(bad), "wic")
    wic = os.path.join(NIKL, "wic.tsv")
    tuner = make_tuner(config, finetune_settings(["finetune.max_seq_len=24"]), "wic", wic, wic,
                       init="none", tokenizer=tokenizer)
    feats = tuner.data.features["train"]
    for r, ex in enumerate(rows):                   # the masked tokens spell the target
        for k, sentence in enumerate((ex.text_a, ex.text_b)):
            ids = feats.input_ids[r][feats.target_mask[r, k]]
            text = "".join(tokenizer.id_to_token(int(i)) for i in ids).replace("▁", "")
            start, end = ex.target_spans[k]
            assert sentence[start:end] in text and len(ids) >= 1
    batch = make_batch(feats, np.arange(2))
    params = tuner.init_state(0)["params"]
    logits = tuner.model(0.0, True).apply({"params": params}, **model_inputs(batch, tuner.mode))
    moved = dict(batch, target_mask=np.roll(batch["target_mask"], 1, axis=-1))
    other = tuner.model(0.0, True).apply({"params": params}, **model_inputs(moved, tuner.mode))
    assert logits.shape == (2, 2) and np.abs(np.asarray(logits) - np.asarray(other)).max() > 1e-4


def wic_rows(n, seed):
    """Same sense iff the word before the target is the same in both sentences."""
    rng, rows = np.random.default_rng(seed), []
    for _ in range(n):
        target = str(rng.choice(["법률", "국민"]))
        k1, k2 = rng.choice(["정부", "대통령"], 2)
        s1, s2 = f"그리고 {k1} {target} 및 등", f"제 {k2} {target} 수 있다"
        rows.append({"sentence1": s1, "sentence2": s2, "label": str(k1 == k2),
                     "start_s1": s1.index(target), "end_s1": s1.index(target) + len(target),
                     "start_s2": s2.index(target), "end_s2": s2.index(target) + len(target)})
    return rows


@pytest.mark.slow
def test_the_wic_head_learns_its_fixture(env, tmp_path):
    from kjax.finetune.run import run_one
    _, config, tokenizer = env
    ft = finetune_settings(["finetune.max_seq_len=24", "finetune.batch_size=16",
                            "finetune.epochs=8", "finetune.learning_rate=5e-3",
                            "finetune.patience=0", "finetune.classifier_dropout=0.0",
                            "finetune.checkpoint_every=1000"])
    tuner = make_tuner(config, ft, "wic", write_jsonl(tmp_path / "t.jsonl", wic_rows(128, 0)),
                       write_jsonl(tmp_path / "d.jsonl", wic_rows(32, 1)), init="none",
                       tokenizer=tokenizer)
    result = run_one(tuner, 0, 0.0, [0.0], str(tmp_path / "run"), progress=False)
    dev, baseline = result["results"]["+0"]["dev"], result["baseline"]["dev"]
    assert baseline["accuracy"] <= 0.65 and dev["accuracy"] >= 0.85, (dev, baseline)


def test_a_model_that_cannot_beat_the_baseline_is_told_so():
    from kjax.finetune.experiment import summarize, weak_model_note
    run = {"bf_train": 0.0, "results": {"+0": {"dev": {"accuracy": 0.3217}}},
           "baseline": {"dev": {"accuracy": 0.3217}}}
    summary = {**summarize([run], "accuracy"), "learning_rate": 5e-5, "epochs": 3}
    note = weak_model_note(summary)
    assert note.startswith("note: dev accuracy 0.3217 does not beat the no-model baseline "
                           "0.3217") and "learning rate 5e-05, 3 epochs" in note
    run["results"]["+0"]["dev"]["accuracy"] = 0.45
    assert weak_model_note({**summarize([run], "accuracy"), "learning_rate": 5e-4,
                            "epochs": 3}) is None


def test_a_constant_predictor_is_told_so_even_above_the_baseline():
    """KLUE-NLI on the demo: every dev prediction one class that leads dev but
    not train scored 0.3533 against the majority's 0.3217 — not learning."""
    from kjax.finetune.experiment import summarize, weak_model_note
    from kjax.finetune.run import constant_prediction
    assert constant_prediction(["neutral"] * 5) == '"neutral"'
    assert constant_prediction(["neutral"] * 4 + ["entailment"]) is None
    assert constant_prediction([["O", "O"], ["O", "O"]]) == '["O", "O"]'
    run = {"bf_train": 0.0, "results": {"+0": {"dev": {"accuracy": 0.3533}}},
           "baseline": {"dev": {"accuracy": 0.3217}}}
    summary = {**summarize([run], "accuracy"), "learning_rate": 5e-4, "epochs": 3}
    assert weak_model_note(summary) is None   # above the baseline by itself
    note = weak_model_note(summary, '"neutral"')
    assert note.startswith('note: every run predicted "neutral" for all of dev (dev accuracy '
                           '0.3533, the no-model baseline 0.3217): a constant predictor'), note
