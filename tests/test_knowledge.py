"""Knowledge resources, verb-relation targets and target builders (METHODS §2.5)."""
import os
import runpy

import numpy as np
import pytest

from kjax.errors import KjaxError
from kjax.knowledge import (DATA_DIR, KnowledgeBase, LemmaKey, ResourceError, coverage_stats,
                            find_verb_relations, hypernym_targets, knowledge_targets,
                            load_case_frames, load_hypernyms, load_sense_vectors, parse_lemma,
                            sense_targets, verb_relation_targets)

KB = KnowledgeBase.load_samples()

# METHODS §2.5: "지금까지 내가 차를 마신 날은 얼마나 될까?" as Kiwi analyses it.
EXAMPLE = [("지금", "NNG"), ("까지", "JX"), ("나", "NP"), ("가", "JKS"), ("차", "NNG"),
           ("를", "JKO"), ("마시", "VV"), ("ᆫ", "ETM"), ("날", "NNG"), ("은", "JX"),
           ("얼마나", "MAG"), ("되", "VV"), ("ᆯ까", "EF"), ("?", "SF")]


def split(morphemes):
    return [f for f, _ in morphemes], [t for _, t in morphemes]


def parse(text):
    """'차/NNG 를/JKO 마시/VV' → (forms, tags)."""
    return split([tuple(m.rsplit("/", 1)) for m in text.split()])


# ---- resources ----------------------------------------------------------------

def test_lemma_keys():
    assert parse_lemma("일가_02/NNG") == LemmaKey("일가", 2, "NNG")
    assert parse_lemma("칫솔/NNG") == LemmaKey("칫솔", 0, "NNG")
    assert parse_lemma("듣/VV-I") == LemmaKey("듣", 0, "VV")
    assert str(LemmaKey("일가", 2, "NNG")) == "일가_02/NNG"


def test_shipped_samples_load_with_real_relations():
    assert 60 <= len(KB.hypernyms) <= 160 and 40 <= len(KB.case_frames) <= 60
    assert KB.sense_dim == 16 and set(KB.sense_vectors) == set(KB.hypernyms)
    assert KB.hypernyms_of("칫솔", "NNG") == ("솔",)
    assert KB.hypernyms_of("일가", "NNG") == ("가족", "경지", "현상")
    assert KB.hypernyms_of("사과", "NNG") == ("과일",)
    assert KB.hypernyms_of("고양이", "NNG") == ("동물",)
    for word in ("국민", "법률", "국가", "대통령", "국회", "권리", "의무", "선거", "헌법"):
        assert KB.hypernyms_of(word, "NNG"), word       # demo-corpus coverage
    assert KB.case_frame_of("마시", "VV") == KB.case_frame_of("마시다", "VV") >= {"을", "를"}
    assert {"이", "가"} <= KB.case_frame_of("되", "VV")
    assert {"로", "으로", "에"} <= KB.case_frame_of("가", "VV")


def test_shipped_sense_vectors_follow_the_documented_projection():
    generator = runpy.run_path(os.path.join(DATA_DIR, "generate_sense_vectors.py"))
    expected = generator["sense_vectors"](load_hypernyms(os.path.join(DATA_DIR, "hypernyms.tsv")))
    assert set(expected) == set(KB.sense_vectors)
    for key, vector in expected.items():
        np.testing.assert_allclose(KB.sense_vectors[key], vector, atol=1e-4)
    apple, grape, president = (KB.sense_vector_of(w, "NNG") for w in ("사과", "포도", "대통령"))
    assert apple @ grape > apple @ president                # shared hypernym 과일


def test_homograph_lookup_rules(tmp_path):
    (tmp_path / "h.tsv").write_text("배_03/NNG\t과일\n배_02/NNG\t탈것,물건\n배_10/NNG\t물건\n"
                                    "유엔/NNP\t기구\n", encoding="utf-8")
    (tmp_path / "v.tsv").write_text("배_03/NNG\t3 3\n배_02/NNG\t2 2\n", encoding="utf-8")
    (tmp_path / "c.tsv").write_text("있다/VA\t이\n가_01/VV\t에\n가_02/VV\t을\n", encoding="utf-8")
    kb = KnowledgeBase.load(str(tmp_path / "h.tsv"), str(tmp_path / "v.tsv"),
                            str(tmp_path / "c.tsv"))
    assert kb.hypernyms_of("배", "NNG") == ("탈것", "물건", "과일")   # homograph order, union
    assert kb.hypernyms_of("배", "NNG", homograph=3) == ("과일",)
    assert list(kb.sense_vector_of("배", "NNG")) == [2, 2]         # lowest number
    assert list(kb.sense_vector_of("배", "NNG", homograph=3)) == [3, 3]
    assert kb.hypernyms_of("유엔", "NNG") == ("기구",)              # NNP entry, NNG query
    assert kb.hypernyms_of("배", "VV") == () and kb.case_frame_of("배", "NNG") is None
    assert kb.case_frame_of("있", "VV") == {"이", "가"}             # VA entry, allomorph added
    assert kb.case_frame_of("가", "VV-R") == {"에", "을", "를", "ᆯ"}


def test_bom_crlf_comments_and_blank_lines_are_tolerated(tmp_path):
    path = tmp_path / "h.tsv"
    path.write_bytes("\ufeff# comment\r\n\r\n칫솔/NNG\t솔\r\n  # indented comment\r\n"
                     "일가_02/NNG\t가족, 경지\r\n".encode("utf-8"))
    table = load_hypernyms(str(path))
    assert table == {LemmaKey("칫솔", 0, "NNG"): ("솔",),
                     LemmaKey("일가", 2, "NNG"): ("가족", "경지")}


GOOD_HEADER = "# header comment\n\n칫솔/NNG\t{good}\n"     # the bad line is line 4


@pytest.mark.parametrize("loader, good, bad, problem", [
    (load_hypernyms, "솔", "일가_02/NNG\t가족\t현상", "expected 2 TAB-separated columns"),
    (load_hypernyms, "솔", "일가_02/NNG", "found 1"),
    (load_hypernyms, "솔", "일가_2/NNG\t가족", "bad homograph number"),
    (load_hypernyms, "솔", "일가_02/XYZ\t가족", "unknown POS tag 'XYZ'"),
    (load_hypernyms, "솔", "일가\t가족", "is not form/TAG"),
    (load_hypernyms, "솔", "일가_02/NNG\t가족,,현상", "empty hypernym"),
    (load_hypernyms, "솔", "칫솔/NNG\t도구", "duplicate lemma 칫솔/NNG (first on line 3)"),
    (load_sense_vectors, "0.1 0.2 0.3", "사과/NNG\t0.1 abc 0.3", "non-numeric vector component 'abc'"),
    (load_sense_vectors, "0.1 0.2 0.3", "사과/NNG\t0.1 0.2", "has 2 components but the first entry has 3"),
    (load_sense_vectors, "0.1 0.2 0.3", "사과/NNG\t0.1 nan 0.3", "NaN/inf"),
    (load_case_frames, "을", "마시/VV\t을,를", "duplicate lemma 마시/VV"),
    (load_case_frames, "을", "사과/NNG\t을", "case frames are for predicates"),
])
def test_malformed_lines_name_file_line_and_problem(tmp_path, loader, good, bad, problem):
    path = tmp_path / "bad.tsv"
    first = "마시다/VV" if loader is load_case_frames else "칫솔/NNG"
    path.write_text(GOOD_HEADER.replace("칫솔/NNG", first).format(good=good) + bad + "\n",
                    encoding="utf-8")
    with pytest.raises(ResourceError) as error:
        loader(str(path))
    assert f"{path}:4:" in str(error.value) and problem in str(error.value)
    assert isinstance(error.value, KjaxError)


def test_unreadable_files(tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes("칫솔/NNG\t솔\n".encode("utf-8") + "사과/NNG\t".encode("utf-8") + b"caf\xe9\n")
    with pytest.raises(ResourceError, match=r"latin1.tsv:2: not UTF-8"):
        load_hypernyms(str(path))
    with pytest.raises(ResourceError, match="cannot read"):
        load_hypernyms(str(tmp_path / "missing.tsv"))


# ---- verb relation --------------------------------------------------------------

def test_methods_example():
    forms, tags = split(EXAMPLE)
    relations = find_verb_relations(forms, tags, KB.case_frame_of)
    assert [(forms[r.predicate], forms[r.target], r.rule) for r in relations] == [
        ("마시", "차", "frame"), ("되", "날", "nearest")]
    expected = np.full(20, -1)
    expected[6], expected[11] = 4, 8
    np.testing.assert_array_equal(verb_relation_targets(forms, tags, KB.case_frame_of, 20),
                                  expected)


def relations(text, frames=None):
    forms, tags = parse(text)
    lookup = (lambda form, tag: frames.get(form)) if frames is not None else KB.case_frame_of
    return [(forms[r.predicate], r.target, r.rule)
            for r in find_verb_relations(forms, tags, lookup)]


def test_frame_particle_beats_the_nearest_noun():
    text = "학교/NNG 에/JKB 친구/NNG 가/JKS 가/VV 았/EP 다/EF"
    assert relations(text) == [("가", 0, "frame")]
    assert relations(text, frames={}) == [("가", 2, "nearest")]       # no case frame known
    assert relations("물/NNG 을/JKO 컵/NNG 으로/JKB 마시/VV 다/EF") == [("마시", 0, "frame")]
    # particles in a run after the noun count: 차만을 = 차 만/JX 을/JKO
    assert relations("차/NNG 만/JX 을/JKO 마시/VV") == [("마시", 0, "frame")]


def test_search_stops_at_another_predicate_and_sentence_end():
    assert relations("책/NNG 을/JKO 읽/VV 고/EC 가/VV 았/EP 다/EF") == [
        ("읽", 0, "frame"), ("가", 4, "self")]
    assert relations("밥/NNG 을/JKO 먹/VV 고/EC 있/VX 다/EF") == [("먹", 0, "frame")]  # VX: no target
    # 공부/NNG 하/XSV is a predicate too (X+하 as one predicate, METHODS §2.2)
    assert relations("물/NNG 을/JKO 공부/NNG 하/XSV 고/EC 마시/VV") == [
        ("하", 0, "nearest"), ("마시", 5, "self")]
    assert relations("물/NNG ./SF 마시/VV") == [("마시", 2, "self")]
    assert relations("마시/VV 다/EF") == [("마시", 0, "self")]


def test_compound_noun_points_to_its_last_noun():
    # 국회 의원 들 이 되 → 의원, through the XSN suffix, via the frame particle 이
    assert relations("국회/NNG 의원/NNG 들/XSN 이/JKS 되/VV 었/EP 다/EF") == [("되", 1, "frame")]
    assert relations("대한민국/NNP 국민/NNG 은/JX 되/VV") == [("되", 1, "nearest")]
    # the frame match is the compound's last noun, never its first
    assert relations("여기/NP 에/JKB 국제/NNG 결혼/NNG 을/JKO 하/VV") == [("하", 3, "frame")]


# Real sentences: Kiwi splits X+하/되 into stem + XSV/XSA, and they still get a target.
DERIVED = [  # sentence, predicate lemma, its tag, frame particles, expected target noun, rule
    ("정부는 그 결정을 인정하였다.", "인정하", "VV", {"을", "를"}, "결정", "frame"),
    ("새 장비가 현장에 투입되었다.", "투입되", "VV", {"에"}, "현장", "frame"),
    ("나는 그의 의견에 동의했다.", "동의하", "VV", None, "의견", "nearest"),
    ("그녀는 매우 행복했다.", "행복하", "VA", None, "그녀", "nearest"),
    ("공장이 강물을 오염시켰다.", "오염시키", "VV", {"을", "를"}, "강물", "frame"),
]


@pytest.mark.parametrize("sentence, lemma, tag, frame, noun, rule", DERIVED)
def test_x_ha_doe_is_one_predicate_on_kiwis_split(analyzer, sentence, lemma, tag, frame, noun,
                                                   rule):
    from kjax.morph.predicates import join_derived_predicates
    looked_up = []

    def case_frame(form, t):
        looked_up.append((form, t))
        return frozenset(frame) if frame and form == lemma else None

    kiwi = analyzer.analyze(sentence)
    suffix = next(i for i, m in enumerate(kiwi) if m.tag in ("XSV", "XSA"))
    for morphemes in (kiwi, join_derived_predicates(kiwi)):   # split and joined alike
        forms, tags = [m.form for m in morphemes], [m.tag for m in morphemes]
        (relation,) = find_verb_relations(forms, tags, case_frame)
        assert (forms[relation.target], relation.rule) == (noun, rule)
        assert (lemma, tag) in looked_up
        if morphemes is kiwi:
            assert relation.predicate == suffix               # the pointer sits on 하/되
        targets = verb_relation_targets(forms, tags, case_frame, 32)
        assert (targets >= 0).sum() == 1 and targets[relation.predicate] == relation.target


def test_a_later_predicate_stops_at_a_derived_one(analyzer):
    kiwi = analyzer.analyze("물을 공부하고 마셨다")
    forms, tags = [m.form for m in kiwi], [m.tag for m in kiwi]
    found = [(forms[r.predicate], forms[r.target], r.rule)
             for r in find_verb_relations(forms, tags, KB.case_frame_of)]
    assert found == [("하", "물", "nearest"), ("마시", "마시", "self")]


def test_conjugation_suffixes_are_stripped():
    assert relations("음악/NNG 을/JKO 듣/VV-I 다/EF") == [("듣", 0, "frame")]


# ---- target builders -------------------------------------------------------------

VOCAB = {"[PAD]": 0, "[UNK]": 1, "과일": 5, "동물": 6, "탈것": 7, "음료": 8, "가족": 10,
         "사람": 11, "법": 12, "시간": 13}


def token_to_id(text):
    return VOCAB.get(text, 1)


NOUNS = ["사과", "고양이", "국민", "헌법", "차", "일가", "칫솔"]   # 칫솔's 솔 is not a token


def long_sequence(repeats):
    forms, tags = [], []
    for _ in range(repeats):
        for noun in NOUNS:
            forms += [noun, "와"]
            tags += ["NNG", "JC"]
    return forms, tags


def test_hypernym_targets_respect_limits_and_vocabulary():
    forms, tags = long_sequence(5)                # 30 qualifying nouns (칫솔 never)
    out = hypernym_targets(forms, tags, KB, token_to_id, np.random.default_rng(1),
                           max_hypernym=20, max_hypernyms_per_noun=3, unk_id=1)
    assert out["hyp_positions"].shape == (20,) and out["hyp_targets"].shape == (20, 3)
    assert out["hyp_mask"].all()
    positions = out["hyp_positions"]
    assert len(set(positions)) == 20 and list(positions) == sorted(positions)
    expected = {"사과": [5], "고양이": [6], "국민": [11], "헌법": [12], "차": [7, 8],
                "일가": [10]}
    for slot, position in enumerate(positions):
        ids = out["hyp_targets"][slot][out["hyp_target_mask"][slot]]
        assert list(ids) == expected[forms[position]]
    assert not out["hyp_targets"][~out["hyp_target_mask"]].any()     # padding is 0
    other = hypernym_targets(forms, tags, KB, token_to_id, np.random.default_rng(2), unk_id=1)
    assert set(other["hyp_positions"]) != set(positions)             # a random draw


def test_hypernym_targets_few_nouns_exclude_and_k():
    forms, tags = split(EXAMPLE)
    out = hypernym_targets(forms, tags, KB, token_to_id, np.random.default_rng(0),
                           max_hypernym=4, max_hypernyms_per_noun=1, unk_id=1)
    assert list(out["hyp_positions"]) == [4, 8, 0, 0] and list(out["hyp_mask"]) == [1, 1, 0, 0]
    assert list(out["hyp_targets"][:, 0]) == [7, 13, 0, 0]           # 차: 탈것 (first of K=1)
    exclude = np.zeros(len(forms), bool)
    exclude[4] = True                                                # 차 is [MASK]ed
    out = hypernym_targets(forms, tags, KB, token_to_id, np.random.default_rng(0),
                           max_hypernym=4, exclude=exclude, unk_id=1)
    assert list(out["hyp_positions"][out["hyp_mask"]]) == [8]


def test_sense_targets():
    forms, tags = long_sequence(4)                # 28 nouns, all with vectors
    out = sense_targets(forms, tags, KB, np.random.default_rng(0), max_sense=20)
    assert out["sense_vectors"].shape == (20, 16) and out["sense_mask"].all()
    for slot, position in enumerate(out["sense_positions"]):
        np.testing.assert_array_equal(out["sense_vectors"][slot],
                                      KB.sense_vector_of(forms[position], "NNG"))
    few = sense_targets(*split(EXAMPLE), KB, np.random.default_rng(0), max_sense=20)
    assert list(few["sense_positions"][few["sense_mask"]]) == [4, 8]
    assert not few["sense_vectors"][~few["sense_mask"]].any()


def test_knowledge_targets_fixed_shapes_with_padding():
    forms, tags = split(EXAMPLE)
    out = knowledge_targets(forms, tags, KB, token_to_id, np.random.default_rng(0),
                            seq_len=32, max_hypernyms_per_noun=4, unk_id=1)
    shapes = {k: v.shape for k, v in out.items()}
    assert shapes == {"hyp_positions": (20,), "hyp_targets": (20, 4),
                      "hyp_target_mask": (20, 4), "hyp_mask": (20,),
                      "sense_positions": (20,), "sense_vectors": (20, 16),
                      "sense_mask": (20,), "verb_targets": (32,)}
    assert out["verb_targets"][6] == 4 and out["verb_targets"][11] == 8
    assert (np.delete(out["verb_targets"], [6, 11]) == -1).all()


def test_coverage_stats():
    second = parse("학교/NNG 에/JKB 칫솔/NNG 가/JKS 없/VA 다/EF")
    stats = coverage_stats([split(EXAMPLE), second], KB, token_to_id, unk_id=1)
    # nouns 지금 나 차 날 학교 칫솔; hypernyms: 차 날 학교 칫솔; token ones: 차 날
    # (학교's 기관 and 칫솔's 솔 are not in VOCAB)
    assert stats["sequences"] == 2 and stats["nouns"] == 6 and stats["predicates"] == 3
    assert stats["noun_hypernym_share"] == pytest.approx(4 / 6)
    assert stats["noun_token_hypernym_share"] == pytest.approx(2 / 6)
    assert stats["noun_sense_share"] == pytest.approx(4 / 6)
    assert stats["predicate_frame_share"] == 1.0
    assert stats["verb_frame_share"] == pytest.approx(2 / 3)            # 마시→차, 없→칫솔
    assert stats["mean_hyp_per_sequence"] == pytest.approx(2 / 2)
    assert stats["mean_verb_per_sequence"] == pytest.approx(3 / 2)
