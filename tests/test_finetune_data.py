"""`kjax finetune` without training: the KLUE/generic readers on the
fixtures in tests/fixtures/klue, the BIO char → token → char mapping on
hostile text, the metrics against hand-computed values and the one-line
errors for bad inputs. The training side is in test_finetune.py."""
import json
import os
import unicodedata

import pytest

from conftest import ROOT, tiny_config
from kjax.errors import KjaxError
from kjax.finetune import metrics as M
from kjax.finetune.alignment import map_spans, nfc_with_offsets, token_char_spans
from kjax.finetune.bio import (char_to_token_tags, round_trip, spans_to_tags, tags_to_spans,
                               token_to_char_tags)
from kjax.finetune.experiment import mean_std
from kjax.finetune import readers
from kjax.finetune.features import Encoder
from kjax.finetune.readers import Example, split_examples
from kjax.finetune.registry import finetune_task

KLUE = os.path.join(ROOT, "tests", "fixtures", "klue")

def read_examples(path, task, fmt="auto"):
    """The readers take the task object (kjax/finetune/readers.py); these
    tests name it."""
    return readers.read_examples(path, finetune_task(task), fmt)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from kjax.tokens.factory import load_tokenizer, train_tokenizer
    config = tiny_config(tmp_path_factory.mktemp("tok"))
    train_tokenizer(config)
    return load_tokenizer(config)


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return str(path)


def entities(ex):
    return [(ex.text_a[s:e], t) for s, e, t in tags_to_spans(ex.char_tags)]


# --- readers ----------------------------------------------------------------------------
def test_klue_json_readers_parse_the_fixtures():
    nli = read_examples(os.path.join(KLUE, "nli.json"), "pair")
    assert [e.label for e in nli] == ["contradiction", "entailment", "neutral"]
    assert nli[1].text_a == "정부는 내년부터 청년 주거 지원을 늘린다."
    assert nli[1].text_b == "청년 주거 지원이 확대된다." and nli[1].guid == "klue-nli-v1_dev_00001"
    assert nli[1].where.endswith("nli.json:14 (guid klue-nli-v1_dev_00001)")
    assert finetune_task("pair").label_names([nli]) == ["entailment", "neutral", "contradiction"]
    sts = read_examples(os.path.join(KLUE, "sts.json"), "regress")
    assert [e.label for e in sts] == [4.9, 1.4]          # labels.label, not real-label
    assert sts[0].text_b == "무엇보다도, 호스트들은 매우 친절했습니다."
    ynat = read_examples(os.path.join(KLUE, "ynat.json"), "classify")
    assert [e.label for e in ynat] == ["사회", "사회", "세계"] and ynat[2].text_b is None
    assert finetune_task("classify").label_names([ynat]) == ["사회", "세계"]


def test_klue_ner_reader_parses_the_fixture():
    ner = read_examples(os.path.join(KLUE, "ner.tsv"), "ner")
    assert [e.guid for e in ner] == ["klue-ner-v1_dev_00000-wikitree",
                                     "klue-ner-v1_dev_00001-wikitree", "klue-ner-v1_dev_00002-nsmc"]
    assert ner[0].text_a.startswith("경찰은 또 성매매") and ner[0].where.endswith("ner.tsv:6")
    assert entities(ner[0]) == [("경찰", "OG"), ("박", "PS"), ("32", "QT"), ("16명", "QT")]
    assert entities(ner[1]) == [("미국 뉴욕", "LC"), ("2020년 3월", "DT")]
    assert ner[2].text_a == "  이건  그냥 😀 漢字 테스트 " and entities(ner[2]) == [("漢字", "OG")]
    assert all(len(e.text_a) == len(e.char_tags) for e in ner)
    assert finetune_task("ner").label_names([ner]) == [
        "O", "B-DT", "I-DT", "B-LC", "I-LC", "B-OG", "I-OG", "B-PS", "I-PS", "B-QT", "I-QT"]


def test_generic_jsonl_and_tsv_readers(tmp_path):
    rows = [{"text": "서울에 간다", "entities": [[0, 2, "LC"]]},
            {"text": "철수", "tags": ["B-PS", "I-PS"]},
            {"text": "부산", "entities": [{"start": 0, "end": 2, "label": "LC"}]}]
    path = write(tmp_path / "ner.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    assert [entities(e) for e in read_examples(path, "ner")] == [
        [("서울", "LC")], [("철수", "PS")], [("부산", "LC")]]
    tsv = write(tmp_path / "pair.tsv", "text_a\ttext_b\tlabel\n가\t나\tyes\n다\t라\tno\n")
    got = read_examples(tsv, "pair")
    assert [(e.text_a, e.text_b, e.label) for e in got] == [("가", "나", "yes"), ("다", "라", "no")]
    plain = write(tmp_path / "reg.tsv", "좋다\t4.5\n나쁘다\t0.5\n")
    assert [e.label for e in read_examples(plain, "regress")] == [4.5, 0.5]


def test_seeded_split_is_fixed_and_disjoint():
    exs = [Example(str(i), f"t{i}", label="a") for i in range(50)]
    a, b = split_examples(exs, (0.8, 0.2), 7), split_examples(exs, (0.8, 0.2), 7)
    assert [len(p) for p in a] == [40, 10] and a == b
    assert sorted(e.guid for p in a for e in p) == sorted(e.guid for e in exs)
    assert split_examples(exs, (0.8, 0.2), 8)[1] != a[1]


# --- bad inputs: one line, file:line, what to do ---------------------------------------------
def one_line_error(match, fn, *args):
    with pytest.raises(KjaxError, match=match) as err:
        fn(*args)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_bad_inputs_name_file_line_and_the_fix(tmp_path):
    one_line_error(r"'.*nope\.json' not found; pass --train", read_examples,
                   str(tmp_path / "nope.json"), "pair")
    klue = [{"guid": "g0", "premise": "a", "hypothesis": "b", "gold_label": "neutral"},
            {"guid": "g1", "premise": "a", "hypotesis": "b", "gold_label": "neutral"}]
    bad_key = write(tmp_path / "nli.json", json.dumps(klue, indent=4))
    one_line_error(r"nli\.json:8 \(guid g1\): --task pair needs a second sentence "
                   r"\(text_b, sentence2, hypothesis, question\)", read_examples, bad_key, "pair")
    no_text = write(tmp_path / "c.jsonl",
                    '{"text": "a", "label": "x"}\n{"txt": "b", "label": "y"}\n')
    one_line_error(r"c\.jsonl:2: no text; give one of the keys text, sentence", read_examples,
                   no_text, "classify")
    one_line_error(r"bad\.json: not valid JSON \(.* line 1 column", read_examples,
                   write(tmp_path / "bad.json", "[{"), "pair")
    one_line_error(r"n\.tsv:3: expected one character, a tab and a BIO tag", read_examples,
                   write(tmp_path / "n.tsv", "가\tO\n나\tO\n다 O\n"), "ner")
    one_line_error(r"ner\.tsv: the KLUE-NER format holds character tags; use --task ner",
                   read_examples, os.path.join(KLUE, "ner.tsv"), "classify")
    one_line_error(r"t\.tsv:1: tag 'X-PS' is not BIO", read_examples,
                   write(tmp_path / "t.tsv", "가\tX-PS\n"), "ner")
    one_line_error(r"e\.jsonl:1: entity \[2, 2, 'PS'\] must be \[start, end, type\]",
                   read_examples, write(tmp_path / "e.jsonl", '{"text": "가나", "entities": '
                                        '[[2, 2, "PS"]]}\n'), "ner")
    one_line_error(r"r\.jsonl:1: label 'high' is not a number; --task regress", read_examples,
                   write(tmp_path / "r.jsonl", '{"text": "a", "score": "high"}\n'), "regress")


def test_unknown_labels_are_reported_with_their_line(tmp_path):
    train = read_examples(write(tmp_path / "train.jsonl", '{"text": "a", "label": "pos"}\n'
                                '{"text": "b", "label": "neg"}\n'), "classify")
    dev = read_examples(write(tmp_path / "dev.jsonl", '{"text": "a", "label": "pos"}\n'
                              '{"text": "c", "label": "neutral"}\n'), "classify")
    one_line_error(r"dev\.jsonl:2: label 'neutral' never occurs in the training data "
                   r"\(labels: neg, pos\)", finetune_task("classify").label_names, [train, dev])
    nli = read_examples(write(tmp_path / "nli.jsonl", "".join(
        json.dumps({"premise": "p", "hypothesis": "h", "gold_label": g}) + "\n"
        for g in ("entailment", "neutral", "entailmnt"))), "pair")
    one_line_error(r"nli\.jsonl:3: label 'entailmnt' is not an NLI label",
                   finetune_task("pair").label_names, [nli])


# --- BIO: characters → tokens → characters ------------------------------------------------
HOSTILE = ["  이건  그냥 😀 漢字 테스트 ", "Seoul 2020년 3월 ABC코리아에서", "서울\t부산\u00a0대구",
           unicodedata.normalize("NFD", "한국 서울특별시에 간다"), "1 2 3", "😀"]


def aligned_entities(text, spans, pick):
    """Entities made of whole tokens (whitespace trimmed): those survive exactly."""
    content = [(s, e) for s, e in spans if text[s:e].strip()]
    out = []
    for i, j, kind in pick:
        if j <= len(content) and i < j:
            s, e = content[i][0], content[j - 1][1]
            while text[s].isspace():
                s += 1
            while text[e - 1].isspace():
                e -= 1
            out.append((s, e, kind))
    return out


@pytest.mark.parametrize("text", HOSTILE)
def test_bio_round_trip_on_hostile_text(tokenizer, text):
    nfc, starts, ends = nfc_with_offsets(text)
    spans = map_spans(token_char_spans(tokenizer, nfc)[1], starts, ends)
    # First token, a middle run and the last token: entities at both edges.
    n = len([s for s in spans if text[s[0]:s[1]].strip()])
    gold = aligned_entities(text, spans, [(0, 1, "PS"), (n // 2, n // 2 + 2, "LC"),
                                          (n - 1, n, "OG")])
    gold = [g for k, g in enumerate(gold)
            if all(g[1] <= h[0] or g[0] >= h[1] for h in gold[:k])]
    assert gold
    tags = spans_to_tags(len(text), sorted(gold))
    assert tags_to_spans(round_trip(text, tags, spans)) == sorted(gold)
    # The same through the Encoder: labels on tokens, decoded back onto characters.
    names = ["O"] + [f"{p}-{k}" for k in ("LC", "OG", "PS") for p in "BI"]
    ner = finetune_task("ner")
    feats = Encoder(tokenizer, ner, names, 64).encode([Example("g", text, char_tags=tuple(tags))])
    token_tags = [names[i] for i in feats.labels[0, 1:1 + len(feats.token_spans[0])]]
    assert feats.texts[0] == text
    assert token_to_char_tags(text, token_tags, feats.token_spans[0]) == tags


def test_nfd_jamo_reach_the_tokenizer_composed(tokenizer):
    text = unicodedata.normalize("NFD", "한 a")
    nfc, starts, ends = nfc_with_offsets(text)
    assert nfc == "한 a" and len(text) == 5
    assert (starts, ends) == ([0, 3, 4, 5], [3, 4, 5])
    assert map_spans([(0, 1), (2, 3), (3, 3)], starts, ends) == [(0, 3), (4, 5), (5, 5)]
    nfd = unicodedata.normalize("NFD", "한국 국회")
    for task in ("ner", "classify"):
        ex = Example("g", nfd, None, None if task == "ner" else "a",
                     ("O",) * len(nfd) if task == "ner" else None)
        feats = Encoder(tokenizer, finetune_task(task), ["O", "a"], 32).encode([ex])
        pieces = [tokenizer.id_to_token(i) for i in feats.input_ids[0, 1:feats.lengths[0] - 1]]
        assert "".join(pieces).replace("▁", " ").strip() == "한국 국회"   # no [UNK]


def test_bio_edge_cases_whitespace_entities_and_cut_tokens():
    spans = [(0, 2), (2, 5)]                                  # 서울 | 특별시
    assert tags_to_spans(round_trip("서울특별시", spans_to_tags(5, [(0, 3, "LC")]), spans)) \
        == [(0, 5, "LC")]                                      # cut token: widened to it
    text = " 서울 "
    tags = spans_to_tags(4, [(0, 1, "LC"), (1, 3, "LC"), (3, 4, "PS")])  # space-only entities
    assert tags_to_spans(round_trip(text, tags, [(0, 3), (3, 4)])) == [(1, 3, "LC")]
    assert round_trip("", [], []) == [] and char_to_token_tags("", [], []) == []
    # A token without content continues its neighbour; characters no token wrote are O.
    assert char_to_token_tags("가나", [(0, 2, "PS")], [(0, 1), (1, 1), (1, 2)]) == \
        ["B-PS", "I-PS", "I-PS"]
    assert token_to_char_tags("가 나 다", ["B-PS", "O"], [(0, 1), (2, 3)]) == \
        ["B-PS", "O", "O", "O", "O"]
    assert tags_to_spans(["I-PS", "I-PS", "O"]) == [] and \
        tags_to_spans(["I-PS", "I-PS"], strict=False) == [(0, 2, "PS")]


# --- metrics against hand-computed values --------------------------------------------------
def test_classification_and_regression_metrics():
    assert M.accuracy(list("abac"), list("abbc")) == 0.75
    # a: 2/3, b: 2·1/(2+2) = 0.5, c: 0 → 7/18.
    assert M.macro_f1(list("aabc"), list("abbb")) == pytest.approx(7 / 18)
    assert M.pearson([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert M.pearson([1, 1, 1], [1, 2, 3]) is None
    # Ties share their mean rank: x → [1, 2.5, 2.5, 4]; ρ = 4.5 / sqrt(4.5 · 5).
    assert list(M.average_ranks([1, 2, 2, 3])) == [1, 2.5, 2.5, 4]
    assert M.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / (4.5 * 5) ** 0.5)
    # KLUE-STS binary F1 at 3.0 (>= positive): tp 1, fp 1, fn 1.
    assert M.binary_f1([4.9, 1.4, 3.0, 2.9], [3.5, 3.1, 2.0, 2.95]) == pytest.approx(0.5)
    got = finetune_task("regress").metrics([0.0, 1.0, 4.0], [0.0, 2.0, 4.0])
    assert got["mse"] == pytest.approx(1 / 3) and got["f1"] == 1.0
    assert finetune_task("pair").baseline(list("aab"), [1, 2]) == ["a", "a"]
    # Sample std over seeds: sqrt((0.1² + 0.1²) / (2 - 1)).
    assert mean_std([0.5, 0.7]) == {"mean": pytest.approx(0.6), "std": pytest.approx(0.02 ** 0.5),
                                    "n": 2}


def test_entity_and_character_metrics():
    gold = [["B-PS", "I-PS", "O", "B-LC"], ["B-LC", "I-LC", "O"]]
    pred = [["B-PS", "I-PS", "O", "B-PS"], ["I-LC", "I-LC", "O"]]   # I- opens nothing (IOB2)
    got = M.entity_scores(gold, pred)
    # PS: tp 1, fp 1 → 2/3; LC: fn 2 → 0. Micro: tp 1, fp 1, fn 2 → 2/5.
    assert got["entity_f1"] == pytest.approx(0.4)
    assert got["entity_f1_by_type"] == {"LC": 0.0, "PS": pytest.approx(2 / 3)}
    assert got["entity_macro_f1"] == pytest.approx(1 / 3)
    assert (got["entity_precision"], got["entity_recall"]) == (0.5, pytest.approx(1 / 3))
    labels = ["O", "B-PS", "I-PS", "B-LC", "I-LC", "B-DT", "I-DT"]
    # B-PS 2/3, I-PS 1, B-LC 0, I-LC 2·1/(2+0+1) … counted per character, O left out;
    # B-DT and I-DT occur nowhere and count 1 (as KLUE's zero_division=True).
    char = M.char_macro_f1(gold, pred, labels)
    assert char == pytest.approx((2 / 3 + 1 + 0 + 2 / 3 + 1 + 1) / 6)
