"""UKnowBERT vocabulary (METHODS §2.1) and morpheme → token set (§2.2,
Table 7), the multi-hot tokenizer's per-token arrays, save/load and build."""
import collections
import json

import numpy as np
import pytest

from kjax.errors import KjaxError
from kjax.morph import KoreanAnalyzer, Morpheme
from kjax.morph.tags import tag_id
from kjax.tokens import multihot as mh
from kjax.tokens.characters import JAMO_TOKENS, SYMBOL_TOKENS, is_syllable_char
from kjax.tokens.multihot import (BASE_TOKENS, FALLBACK_TOKENS, MultihotTokenizer, MultihotVocab,
                                  rewrite, token_surface)
from kjax.tokens.multihot_build import build_vocab, train_tokenizer
from kjax.tokens.sentencepiece import SPECIAL_TOKENS, TOKEN_ARRAYS

FIXTURE_TOKENS = [
    "서울", "당하##", "동의", "하##", "투입", "되##",                      # Table 7
    "@신", "@기", "@루", "@삭", "@히", "@소", "@크", "@라", "@테", "@스", "@제",
    "나", "##는", "너", "##를", "학교", "##에서", "보##", "##었", "##다",   # round trip
    "사과", "##의", "마시##", ".", "@😀",
]
TABLE_7 = [
    ("서울", "NNP", ["서울"]),
    ("당하", "VV", ["당하##"]),
    ("동의하", "VV", ["동의", "하##"]),
    ("투입되", "VV", ["투입", "되##"]),
    ("신기루", "NNG", ["@신", "@기", "@루"]),
    ("삭히", "VV", ["@삭", "@히"]),
    ("소크라테스", "NNP", ["@소", "@크", "@라", "@테", "@스"]),
    ("20", "SN", ["2##", "0##"]),
    ("7", "SN", ["7"]),
    ("1,000", "SN", ["1##", ",##", "0##", "0##", "0##"]),
    ("Seed", "SL", ["S", "e", "e", "d"]),
    ("漢字", "SH", ["[CHC]"]),
]


@pytest.fixture(scope="module")
def vocab():
    return MultihotVocab([*BASE_TOKENS, *FIXTURE_TOKENS])


@pytest.fixture(scope="module")
def tokenizer(vocab):
    return MultihotTokenizer(vocab, KoreanAnalyzer())


def morphemes(pairs):
    return [Morpheme(form, tag, 0, len(form), k) for k, (form, tag) in enumerate(pairs)]


# ---- §2.1 rewriting and §2.2 encoding ----------------------------------------------
def test_rewrite_rules():
    assert [rewrite(f, t) for f, t in [("마시", "VV"), ("좋", "VA-I"), ("답", "XSA"),
                                       ("시키", "XSV"), ("맨", "XPN"), ("이", "VCP")]] == \
        ["마시##", "좋##", "답##", "시키##", "맨##", "이##"]
    assert [rewrite(f, t) for f, t in [("의", "JKG"), ("상", "XSN"), ("었", "EP"),
                                       ("ᆫ", "ETM")]] == ["##의", "##상", "##었", "##ᆫ"]
    assert [rewrite(f, t) for f, t in [("사과", "NNG"), ("잠재적", "NNG"), ("아주", "MAG"),
                                       (".", "SF")]] == ["사과", "잠재적", "아주", "."]


@pytest.mark.parametrize("form,tag,expected", TABLE_7)
def test_table_7(vocab, form, tag, expected):
    assert vocab.encode_morpheme(form, tag) == expected


def test_step_order_and_fallbacks(vocab):
    bigger = MultihotVocab([*BASE_TOKENS, *FIXTURE_TOKENS, "동의하##"])
    assert bigger.encode_morpheme("동의하", "VV") == ["동의하##"]       # step 1 wins
    assert vocab.encode_morpheme("삭제하", "VV") == ["@삭", "@제", "하##"]  # X not a token
    assert vocab.encode_morpheme("삭감하", "VV") == ["[UNK]"]           # X: unknown syllable
    assert vocab.encode_morpheme("동의하", "NNG") == ["[UNK]"]          # only predicates split
    assert vocab.encode_morpheme("신기한", "NNG") == ["[UNK]"]          # one unknown → [UNK]
    assert vocab.encode_morpheme("서울", "JKB") == ["[UNK]"]            # ##서울: not a token


def test_numbers_letters_and_scripts(vocab):
    enc = vocab.encode_morpheme
    assert enc("3.14", "SN") == ["3##", ".##", "1##", "4##"]
    assert enc("２０", "SN") == ["2##", "0##"] and enc("７", "SN") == ["7"]
    assert enc("café", "SL") == ["c", "a", "f", "e"]
    assert enc("Москва", "SW") == ["[OTL]"] and enc("東", "SH") == ["[CHC]"]
    assert enc("A4", "SL") == ["A", "4##"]
    assert enc("😀", "W_EMOJI") == ["@😀"] and enc("👍", "W_EMOJI") == ["[UNK]"]
    assert enc("", "NNG") == ["[UNK]"]


def test_token_surface():
    assert [token_surface(t) for t in ["##의", "하##", "@신", "0##", ",##", "서울", "[UNK]",
                                       "@", "@@"]] == \
        ["의", "하", "신", "0", ",", "서울", "[UNK]", "@", "@"]


# ---- vocabulary files -----------------------------------------------------------
def test_save_load_round_trip(vocab, tmp_path):
    path = str(tmp_path / "vocab.txt")
    MultihotVocab(vocab.tokens, {"min_syllable_count": 50}).save(path)
    lines = open(path, encoding="utf-8").read().split("\n")
    assert lines[:5] == list(SPECIAL_TOKENS) and lines[-1] == "" and len(lines) == len(vocab) + 1
    loaded = MultihotVocab.load(path)
    assert loaded.tokens == vocab.tokens and loaded.settings == {"min_syllable_count": 50}
    assert loaded.token_to_id("동의") == vocab.tokens.index("동의")
    assert loaded.token_to_id("없는토큰") == 1


def test_bad_vocab_files_name_the_problem(vocab, tmp_path):
    with pytest.raises(KjaxError, match=r"'서울' appears twice \(lines"):
        MultihotVocab([*vocab.tokens, "서울"])
    with pytest.raises(KjaxError, match="ids 0..4"):
        MultihotVocab(["[UNK]", "[PAD]", *vocab.tokens[2:]])
    with pytest.raises(KjaxError, match="character-rule tokens"):
        MultihotVocab([t for t in vocab.tokens if t != "7##"])
    with pytest.raises(KjaxError, match="whitespace"):
        MultihotVocab([*vocab.tokens, "a b"])
    path = str(tmp_path / "v.txt")
    vocab.save(path)
    with open(path + ".json", "w") as f:
        json.dump({"format": mh.FORMAT, "size": 3}, f)
    with pytest.raises(KjaxError, match="do not belong together"):
        MultihotVocab.load(path)
    with pytest.raises(KjaxError, match="not found"):
        MultihotVocab.load(str(tmp_path / "missing.txt"))


# ---- the tokenizer's arrays ------------------------------------------------------
def check_arrays(tok, text, out):
    assert sorted(out) == sorted(TOKEN_ARRAYS)
    n = len(out["ids"])
    assert all(a.dtype == np.int32 and a.shape == (n,) for a in out.values())
    ms = tok.analyzer.analyze(text)
    assert out["morph"].tolist() == sorted(out["morph"].tolist())
    assert sorted(set(out["morph"].tolist())) == list(range(len(ms)))  # >= 1 token each
    for k, m in enumerate(ms):
        sel = out["morph"] == k
        assert out["inpos"][sel].tolist() == list(range(int(sel.sum())))
        assert set(out["tag"][sel].tolist()) == {tag_id(m.tag)}
        assert set(out["eojeol"][sel].tolist()) == {m.eojeol}
    assert ((out["ids"] >= 0) & (out["ids"] < tok.vocab_size)).all()


def test_encode_arrays_and_round_trip(tokenizer):
    text = "나는 너를 학교에서 보았다"
    out = tokenizer.encode(text)
    check_arrays(tokenizer, text, out)
    assert tokenizer.decode(out["ids"]) == "나 ##는 너 ##를 학교 ##에서 보## ##었 ##다"
    assert out["eojeol"].tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 3]
    assert tokenizer.decode_morphemes(out) == \
        [(m.form, m.tag) for m in tokenizer.analyzer.analyze(text)]


def test_round_trip_through_token_sets(tokenizer):
    pairs = [(f, t) for f, t, _ in TABLE_7 if f != "漢字"] + [("삭제하", "VV"), ("3.14", "SN")]
    out = tokenizer.encode_morphemes(morphemes(pairs))
    assert tokenizer.decode_morphemes(out) == pairs
    assert out["inpos"].tolist()[:4] == [0, 0, 0, 1]  # 서울 | 당하## | 동의 하##


@pytest.mark.parametrize("text", ["", "\r\n", "a\x00b", "😀👍 ok", "漢字語 한자", "ㅋㅋㅋ ᄀᄀ",
                                  "Москва 東京 café 1,000원", "신기루\r\n소크라테스",
                                  "한\ud800글", "가" * 300])
def test_hostile_inputs_keep_arrays_aligned(tokenizer, text):
    check_arrays(tokenizer, text, tokenizer.encode(text))


def test_encode_many_matches_encode(tokenizer):
    texts = ["나는 너를 학교에서 보았다", "", "😀"]
    for a, text in zip(tokenizer.encode_many(texts), texts):
        b = tokenizer.encode(text)
        assert all(np.array_equal(a[k], b[k]) for k in TOKEN_ARRAYS)


def test_interface_constants(tokenizer):
    assert (tokenizer.PAD, tokenizer.UNK, tokenizer.CLS, tokenizer.SEP, tokenizer.MASK) == \
        (0, 1, 2, 3, 4)
    assert [tokenizer.id_to_token(i) for i in range(5)] == list(SPECIAL_TOKENS)
    assert tokenizer.token_to_id("[MASK]") == 4 and tokenizer.vocab_size == len(tokenizer.vocab)


# ---- §2.1 building ----------------------------------------------------------------
def test_build(tmp_path):
    sentence = [("사과", "NNG"), ("를", "JKO"), ("마시", "VV"), ("었", "EP"), ("다", "EF"),
                ("20", "SN"), ("Seed", "SL"), ("漢字", "SH"), (".", "SF")]
    rare = [("소크라테스", "NNP"), ("의", "JKG"), ("신기루", "NNP")]
    corpus = [sentence] * 60 + [rare] * 3 + [[("소크라테스", "NNP")]] * 2
    vocab = build_vocab(iter(corpus), bpe_vocab_size=44, min_syllable_count=4, num_threads=1)
    tokens = vocab.tokens
    assert tuple(tokens[:len(BASE_TOKENS)]) == BASE_TOKENS
    assert len(set(tokens)) == len(tokens)
    assert {"사과", "##를", "마시##", "##었", "##다", "."} <= set(tokens)  # rewritten by POS
    assert not any(0xE000 <= ord(c) < 0xE100 for t in tokens for c in t)  # no tag chars
    assert not {"20", "Seed", "漢字"} & set(tokens)   # character rules stay in charge
    assert vocab.encode_morpheme("20", "SN") == ["2##", "0##"]
    # @ tokens: the characters seen >= 4 times in *all* morphemes (counting only
    # morphemes that are not one token would leave a vocabulary with a large BPE
    # without any syllable fallback), plus the fallback tokens.
    counts = collections.Counter()
    for sent in corpus:
        for form, tag in sent:
            if form not in ("20", "Seed"):
                counts.update(c for c in form if is_syllable_char(c))
    expected = {"@" + c for c, n in counts.items() if n >= 4}
    assert {t for t in tokens if t.startswith("@") and t not in JAMO_TOKENS} == expected
    assert set(FALLBACK_TOKENS) <= set(tokens)     # jamo, [SYM:*], 하## 되##
    assert "소크라테스" not in tokens                # the budget went to frequent units
    assert "시" in tokens and "시##" not in tokens   # the tail of 마시/VV is no predicate
    assert "@소" in expected and "@신" not in expected  # 소크라테스 x5, 신기루 x3
    assert "@사" in expected and "@." in expected   # whole-token morphemes count too
    assert vocab.settings["syllable_tokens"] == len(expected)
    assert vocab.settings["syllable_threshold"] == 4
    vocab.save(str(tmp_path / "v.txt"))
    assert MultihotVocab.load(str(tmp_path / "v.txt")).tokens == tokens


def test_train_on_real_text(tmp_path):
    import glob
    import os

    import konlpy  # its wheel ships the constitution: offline Korean text
    path = glob.glob(os.path.join(os.path.dirname(konlpy.__file__), "data", "corpus",
                                  "kolaw", "constitution.txt"))[0]
    lines = [line.strip() for line in open(path, encoding="utf-8") if line.strip()][:80]
    tok = train_tokenizer(lines, str(tmp_path / "vocab.txt"), bpe_vocab_size=600,
                          min_syllable_count=2, num_threads=1)
    assert MultihotVocab.load(str(tmp_path / "vocab.txt")).tokens == tok.vocab.tokens
    outs = list(tok.encode_many(lines))
    ids = np.concatenate([o["ids"] for o in outs])
    # A built vocabulary always has the jamo / [SYM:*] fallbacks, so real text
    # has no [UNK] at all (without them: up to 3 % here).
    assert (ids == 1).sum() == 0
    held_out = "뷁! 쀍뛟 😎 ½ ①"                      # syllables and signs it never saw
    assert (tok.encode(held_out)["ids"] != 1).all()
    n_morphemes = sum(len(set(o["morph"].tolist())) for o in outs)
    assert len(ids) > n_morphemes            # and some morphemes became token sets
    for o, line in zip(outs[:10], lines):
        check_arrays(tok, line, o)


def test_tokenizer_pickles_for_worker_processes(tokenizer):
    import pickle
    clone = pickle.loads(pickle.dumps(tokenizer))
    text = "나는 너를 학교에서 보았다"
    a, b = tokenizer.encode(text), clone.encode(text)
    assert all(np.array_equal(a[k], b[k]) for k in TOKEN_ARRAYS)
