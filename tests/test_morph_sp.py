"""morph-sp: sentencepiece over Kiwi morphemes. Pieces never cross a
morpheme boundary, `▁` marks only eojeol starts and is never a token alone,
ids 0..4 are kjax's special tokens, and the per-token arrays line up on
hostile input."""
import glob
import os

import numpy as np
import pytest
import sentencepiece as spm

from kjax.errors import KjaxError
from kjax.morph import KoreanAnalyzer
from kjax.morph.tags import tag_id
from kjax.tokens.morph_sp import UNIT_DELIMITER, MorphSPTokenizer, morpheme_units
from kjax.tokens.sentencepiece import SPECIAL_TOKENS, TOKEN_ARRAYS, UNK, WORD_START

HOSTILE = ["", "\r\n", "a\x00b", "😀👍 ok", "漢字語 한자", "ㅋㅋㅋ ᄀᄀ", "Москва café ２０",
           "한\ud800글", "그는 일을 했다\r\n간 사람", "x" * 500]


def corpus_lines(n=120):
    """The Korean constitution shipped inside KoNLPy's wheel: offline, real."""
    import konlpy
    path = os.path.join(os.path.dirname(konlpy.__file__), "data", "corpus", "kolaw")
    (constitution,) = glob.glob(os.path.join(path, "constitution.txt"))
    with open(constitution, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()][:n]


@pytest.fixture(scope="module")
def lines():
    return corpus_lines()


@pytest.fixture(scope="module", params=["unigram", "bpe"])
def tok(request, lines, tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("msp") / request.param)
    return MorphSPTokenizer.train(lines, 400, prefix, model_type=request.param,
                                  analyzer=KoreanAnalyzer(), num_threads=1)


def test_special_ids(tok):
    assert [tok.id_to_token(i) for i in range(5)] == list(SPECIAL_TOKENS)
    assert [tok.token_to_id(s) for s in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert (tok.PAD, tok.UNK, tok.CLS, tok.SEP, tok.MASK) == (0, 1, 2, 3, 4)
    assert tok.vocab_size == 400


def test_units_mark_eojeol_starts_once(tok):
    ms = tok.analyzer.analyze("그는 일을 했다")
    assert morpheme_units(ms) == ["▁그", "는", "▁일", "을", "▁하", "었", "다"]


def test_no_piece_crosses_a_morpheme(tok, lines):
    pieces = [tok.id_to_token(i) for i in range(tok.vocab_size)]
    assert not any(UNIT_DELIMITER in p for p in pieces)
    assert not any(WORD_START in p[1:] for p in pieces)   # ▁ only ever opens a piece
    checked = 0
    for line in lines[:40]:
        ms = tok.analyzer.analyze(line)
        out = tok.encode(line)
        units = morpheme_units(ms)
        for k, unit in enumerate(units):
            ids = out["ids"][out["morph"] == k]
            if UNK in ids:
                continue
            # the pieces of morpheme k spell exactly that morpheme, ▁ included unless
            # it would have been a bare ▁ token (dropped)
            spelled = "".join(tok.id_to_token(i) for i in ids)
            assert spelled == unit or WORD_START + spelled == unit
            checked += 1
    assert checked > 500


def test_vocabulary_learned_no_cross_morpheme_piece(tok, lines):
    """Without the training delimiter both models learn e.g. '하고', '▁법률로'."""
    units, pairs = set(), set()
    for ms in tok.analyzer.analyze_many(lines):
        u = morpheme_units(ms)
        units.update(u)
        pairs.update(a + b for a, b in zip(u, u[1:]))
    vocab = {tok.id_to_token(i) for i in range(tok.vocab_size)}
    assert not vocab & (pairs - units)


def test_word_start_marks_only_eojeol_starts_and_is_never_a_bare_token(tok, lines):
    """A bare ▁ would take a position (and a row of B) to say only "a word
    starts", so it is dropped; `bare_word_starts=True` keeps it, and there ▁
    marks exactly the eojeol starts."""
    old = MorphSPTokenizer(tok.model_file, tok.analyzer, bare_word_starts=True)
    dropped = 0
    for line in lines[:20]:
        out, before = tok.encode(line), old.encode(line)
        first_of_eojeol = np.r_[True, np.diff(out["eojeol"]) != 0]
        opens = np.array([tok.id_to_token(i).startswith(WORD_START) for i in out["ids"]])
        assert not (opens & ~first_of_eojeol).any(), line
        assert WORD_START not in [tok.id_to_token(i) for i in out["ids"]]
        first_before = np.r_[True, np.diff(before["eojeol"]) != 0]
        assert np.array_equal([old.id_to_token(i).startswith(WORD_START) for i in before["ids"]],
                              first_before), line
        dropped += len(before["ids"]) - len(out["ids"])
        bare = before["ids"] == old.token_to_id(WORD_START)
        assert np.array_equal(before["ids"][~bare], out["ids"]), line
    assert dropped > 0


def check_arrays(tok, text, out):
    assert list(out) == list(TOKEN_ARRAYS)
    n = len(out["ids"])
    assert all(a.dtype == np.int32 and a.shape == (n,) for a in out.values())
    ms = tok.analyzer.analyze(text)
    assert sorted(set(out["morph"].tolist())) == list(range(len(ms)))
    assert out["morph"].tolist() == sorted(out["morph"].tolist())
    for k, m in enumerate(ms):
        sel = out["morph"] == k
        assert out["inpos"][sel].tolist() == list(range(int(sel.sum())))
        assert set(out["tag"][sel].tolist()) == {tag_id(m.tag)}
        assert set(out["eojeol"][sel].tolist()) == {m.eojeol}
    assert ((out["ids"] >= 0) & (out["ids"] < tok.vocab_size)).all()


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_inputs_keep_arrays_aligned(tok, text):
    check_arrays(tok, text, tok.encode(text))


def test_encode_many_matches_encode(tok, lines):
    texts = lines[:5] + ["", "😀"]
    for a, text in zip(tok.encode_many(texts), texts):
        b = tok.encode(text)
        assert all(np.array_equal(a[k], b[k]) for k in TOKEN_ARRAYS)


def test_decode_gives_the_morpheme_text(tok):
    text = "대한민국은 민주공화국이다."
    old = MorphSPTokenizer(tok.model_file, tok.analyzer, bare_word_starts=True)
    assert old.decode(old.encode(text)["ids"]) == text
    # Without bare ▁ tokens a space survives where a piece shows the
    # word start; the characters always do.
    decoded = tok.decode(tok.encode(text)["ids"])
    assert decoded.replace(" ", "") == text.replace(" ", "") and decoded.startswith("대한")


def test_wrong_models_are_refused(tmp_path, lines):
    prefix = str(tmp_path / "plain")
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=prefix,
                                   vocab_size=500, model_type="bpe", minloglevel=2,
                                   num_threads=1)
    with pytest.raises(KjaxError, match=r"id 0 is '<unk>', not \[PAD\]"):
        MorphSPTokenizer(prefix + ".model")
    with pytest.raises(KjaxError, match="not found"):
        MorphSPTokenizer(str(tmp_path / "missing.model"))
    with pytest.raises(KjaxError, match="vocab_size=5000 does not fit"):
        MorphSPTokenizer.train(lines[:3], 5000, str(tmp_path / "big"), num_threads=1)
    with pytest.raises(KjaxError, match="model_type='word'"):
        MorphSPTokenizer.train(lines[:3], 100, str(tmp_path / "w"), model_type="word")


def test_tokenizer_pickles_for_worker_processes(tok, lines):
    import pickle
    clone = pickle.loads(pickle.dumps(tok))
    a, b = tok.encode(lines[3]), clone.encode(lines[3])
    assert all(np.array_equal(a[k], b[k]) for k in TOKEN_ARRAYS)
