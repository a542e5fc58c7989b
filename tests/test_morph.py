"""Kiwi analysis (kjax/morph): tag inventory, eojeol indices, Kiwi's
overlapping/lemma spans and hostile input."""
import unicodedata

import pytest

from kjax.morph import KoreanAnalyzer, Morpheme, get_kiwi, normalize_coda, normalize_text
from kjax.morph import tags as T

HOSTILE = ["", "   ", "\r\n\r\n", "\x00", "a\x00b", "첫줄\r\n둘째 줄", "😀👍 👨\u200d👩\u200d👧",
           "漢字語 한자", "ㅋㅋㅋ ᄀᄀ ᆫ", "!!!...?", "Москва こんにちは café ２０", "한\ud800글",
           "\ufeff가나\u200b다", "e\u0301 가\u0301", "ab\u2028cd\x1c가"]


# ---- tags -------------------------------------------------------------------
def test_tag_inventory_matches_kiwi():
    from kiwipiepy.utils import _valid_tags
    assert set(T.KIWI_TAGS) == set(_valid_tags)
    assert T.TAGS[0] == "" and T.tag_id("") == 0
    assert len(set(T.TAGS)) == T.NUM_TAGS
    assert sorted(T.tag_id(t) for t in T.TAGS[1:]) == list(range(1, T.NUM_TAGS))


def test_tag_suffixes_are_stripped():
    assert T.tag_id("VV-R") == T.tag_id("VV-I") == T.tag_id("VV")
    assert T.tag_id("VA-I") == T.tag_id("VA") != T.tag_id("VV")
    assert T.base_tag("XSA-I") == "XSA" and T.base_tag("NNG") == "NNG"


def test_unknown_tag_names_the_fix():
    with pytest.raises(ValueError, match="KIWI_TAGS"):
        T.tag_id("NOPE")


def test_tag_classes():
    assert all(T.is_substantive(t) for t in ("NNG", "NNP", "NNB", "NP", "NR"))
    assert not T.is_substantive("VV") and not T.is_substantive("XSN")
    assert all(T.is_postposition(t) for t in ("JKS", "JKO", "JX", "JC", "JKB"))
    assert not T.is_postposition("EF")
    assert all(T.is_predicate(t) for t in ("VV", "VA-I", "VX", "VCP", "VCN"))
    assert not T.is_predicate("XSV")
    assert all(T.is_prefix_or_adnominal(t) for t in ("XPN", "MM", "MMA", "MMD", "MMN"))
    assert not T.is_prefix_or_adnominal("MAG")
    assert [T.pos_class(t) for t in ("NNP", "VV-R", "JKS", "")] == \
        ["noun", "predicate", "other", "other"]


# ---- analyzer ---------------------------------------------------------------
def test_eojeol_indices_on_the_spec_sentence(analyzer):
    got = [(m.form, m.tag, m.eojeol) for m in analyzer.analyze("나는 너를 학교에서 보았다")]
    assert got == [("나", "NP", 0), ("는", "JX", 0), ("너", "NP", 1), ("를", "JKO", 1),
                   ("학교", "NNG", 2), ("에서", "JKB", 2),
                   ("보", "VV", 3), ("었", "EP", 3), ("다", "EF", 3)]


def test_offsets_point_into_the_text(analyzer):
    text = "나는 너를 학교에서 보았다"
    for m in analyzer.analyze(text)[:6]:  # before the contraction 보았 → 보 + 었
        assert text[m.start:m.end] == m.form


def test_contracted_forms_share_a_span_and_keep_their_eojeol(analyzer):
    ms = analyzer.analyze("그는 일을 했다")
    ha, eot = [m for m in ms if m.form in ("하", "었")]
    assert (ha.start, ha.end) == (eot.start, eot.end) == (6, 7)
    assert ha.eojeol == eot.eojeol == 2


def test_coda_jamo_and_irregular_tags(analyzer):
    ms = analyzer.analyze("간 사람")
    assert [(m.form, m.tag, m.eojeol) for m in ms] == \
        [("가", "VV", 0), ("ᆫ", "ETM", 0), ("사람", "NNG", 1)]
    assert normalize_coda("ᆫ") == "ㄴ" and normalize_coda("ᆯ다") == "ㄹ다"
    assert normalize_coda("ᆸ니다") == "ㅂ니다" and normalize_coda("ㄴ가") == "ㄴ가"
    gomap = analyzer.analyze("고마운 사람")[0]
    assert (gomap.form, gomap.tag) == ("고맙", "VA")  # Kiwi says VA-I


def test_zero_length_morpheme_is_kept(analyzer):
    ms = analyzer.analyze("가나\u200b다")
    assert any(m.start == m.end for m in ms)


def test_nfd_input_is_analysed_as_nfc(analyzer):
    nfd = unicodedata.normalize("NFD", "한글을 배웠다")
    assert [(m.form, m.tag) for m in analyzer.analyze(nfd)] == \
        [(m.form, m.tag) for m in analyzer.analyze("한글을 배웠다")]


def test_normalize_text_is_one_for_one():
    text, replaced = normalize_text("a\x00b\tc\u2028d\ud800")
    assert text == "a b c d\ufffd" and replaced == 3  # \t is an ordinary space


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_never_crashes(analyzer, text):
    prepared = analyzer.prepare(text)
    ms = analyzer.analyze(text)
    n_words = len(prepared.split())
    assert all(isinstance(m, Morpheme) and 0 <= m.start <= m.end <= len(prepared) for m in ms)
    assert all(0 <= m.eojeol < max(n_words, 1) for m in ms)
    assert [m.eojeol for m in ms] == sorted(m.eojeol for m in ms)
    assert all(T.is_known_tag(m.tag) and "-" not in m.tag for m in ms)
    assert (ms == []) == (not prepared.strip())


def test_nul_splits_words_and_kiwi_only_tags_survive(analyzer):
    assert [(m.form, m.eojeol) for m in analyzer.analyze("a\x00b")] == [("a", 0), ("b", 1)]
    tags = {m.tag for m in analyzer.analyze("https://kjax.dev 😀 漢字 ㅋㅋ")}
    assert {"W_URL", "W_EMOJI", "SH"} <= tags


def test_long_text_is_truncated_or_skipped_and_counted():
    long_text = "나는 학교에 갔다 " * 200
    cut = KoreanAnalyzer(max_chars=100)
    ms = cut.analyze(long_text)
    assert ms and max(m.end for m in ms) <= 100 and cut.stats.truncated == 1
    skip = KoreanAnalyzer(max_chars=100, long_text="skip")
    assert skip.analyze(long_text) == [] and skip.stats.skipped_long == 1
    assert skip.analyze("짧은 문장") != [] and skip.stats.skipped_long == 1


def test_bad_settings_name_the_value():
    with pytest.raises(ValueError, match="num_workers=0"):
        KoreanAnalyzer(num_workers=0)
    with pytest.raises(ValueError, match="long_text='drop'"):
        KoreanAnalyzer(long_text="drop")


def test_analyze_many_matches_analyze(analyzer):
    texts = ["나는 너를 학교에서 보았다", "", "\x00", "그는 일을 했다", "😀"]
    assert list(analyzer.analyze_many(texts)) == [analyzer.analyze(t) for t in texts]


def test_one_kiwi_per_process():
    assert get_kiwi(1) is get_kiwi(1)
    assert KoreanAnalyzer().kiwi is KoreanAnalyzer().kiwi


def test_split_sentences(analyzer):
    assert analyzer.split_sentences("나는 학교에 갔다. 그리고 집에 왔다! 정말?") == \
        ["나는 학교에 갔다.", "그리고 집에 왔다!", "정말?"]
    assert analyzer.split_sentences("") == [] and analyzer.split_sentences(" \x00 ") == []
    text = "나는 학교에 갔다. 그리고 집에 왔다. " * 20
    small = KoreanAnalyzer(max_chars=50)
    sentences = small.split_sentences(text)
    assert all(len(s) <= 50 for s in sentences)
    assert "".join(sentences).replace(" ", "") == text.replace(" ", "")  # nothing lost
