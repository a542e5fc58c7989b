"""The multi-hot vocabulary on unseen text: the syllable fallback that always
exists (jamo for unseen Hangul, Unicode classes for unseen symbols and emoji),
X+하/되 as one predicate (METHODS §2.2 rule 3) on Kiwi's real split, and the
composition `kjax tokenizer train` prints."""
import numpy as np
import pytest

from conftest import DEMO_CONFIG
from kjax.morph import KoreanAnalyzer
from kjax.morph.predicates import join_derived_predicates
from kjax.tokens.characters import JAMO_TOKENS, SYMBOL_TOKENS
from kjax.tokens.multihot import (BASE_TOKENS, FALLBACK_TOKENS, MultihotTokenizer, MultihotVocab)
from kjax.tokens.multihot_build import composition, vocab_warnings
from kjax.tokens.sentencepiece import TOKEN_ARRAYS
from test_multihot_vocab import FIXTURE_TOKENS


@pytest.fixture(scope="module")
def vocab():
    """The Table 7 fixture plus the fallback tokens every built vocabulary has."""
    return MultihotVocab(list(dict.fromkeys([*BASE_TOKENS, *FIXTURE_TOKENS, *FALLBACK_TOKENS])))


def test_unseen_hangul_is_spelled_by_its_jamo(vocab):
    enc = vocab.encode_morpheme
    assert enc("삭감하", "VV") == ["@삭", "@ᄀ", "@ᅡ", "@ᆷ", "하##"]   # 감 never seen
    assert enc("신기한", "NNG") == ["@신", "@기", "@ᄒ", "@ᅡ", "@ᆫ"]
    assert enc("ㅋㅋ", "SW") == ["@ᄏ", "@ᄏ"]           # compatibility jamo → conjoining
    assert enc("ꥠ", "UN") == ["[UNK]"]                 # archaic jamo: no modern spelling
    tok = MultihotTokenizer(vocab, KoreanAnalyzer())
    out = tok.encode_morphemes(join_derived_predicates(KoreanAnalyzer().analyze("삭감했다")))
    assert ("삭감하", "VV") in tok.decode_morphemes(out)   # jamo come back as the syllable


def test_unseen_symbols_and_emoji_get_their_unicode_class(vocab):
    enc = vocab.encode_morpheme
    assert enc("😀", "W_EMOJI") == ["@😀"]              # seen: its own token
    assert enc("👍", "W_EMOJI") == ["[SYM:So]"]
    assert enc("👍🏻", "W_EMOJI") == ["[SYM:So]", "[SYM:Sk]"]   # skin tone: a modifier
    assert enc("❤️", "W_EMOJI") == ["[SYM:So]"]         # variation selector dropped
    assert enc("👨\u200d👩\u200d👧", "W_EMOJI") == ["[SYM:So]"]   # ZWJ dropped, one run
    assert enc("★☆", "SW") == ["[SYM:So]"] and enc("≥", "SW") == ["[SYM:Sm]"]
    assert enc("「", "SS") == ["[SYM:Ps]"] and enc("」", "SS") == ["[SYM:Pe]"]
    assert enc("½", "SL") == ["[SYM:No]"] and enc("€", "SW") == ["[SYM:Sc]"]
    assert enc("\ue123", "SW") == ["[SYM:C]"]
    assert set(SYMBOL_TOKENS) <= set(vocab.tokens) and len(JAMO_TOKENS) == 67


def test_without_fallback_tokens_the_thesis_rule_holds():
    """A vocabulary lacking the fallbacks (hand-made, older kjax) still loads
    and keeps §2.1's rule: an unknown character → the morpheme is [UNK]."""
    old = MultihotVocab([*BASE_TOKENS, *FIXTURE_TOKENS])
    assert old.encode_morpheme("삭감하", "VV") == ["[UNK]"]
    assert old.encode_morpheme("👍", "W_EMOJI") == ["[UNK]"]
    assert any("no jamo" in w for w in vocab_warnings(old))


SENTENCES = {   # real sentences; Kiwi splits each predicate into stem + XSV/XSA
    "나는 그의 의견에 동의했다.": ("동의하", "VV", ["동의", "하##"]),
    "새 장비가 현장에 투입되었다.": ("투입되", "VV", ["투입", "되##"]),
    "그녀는 매우 행복했다.": ("행복하", "VA", None),
    "방이 깨끗하다.": ("깨끗하", "VA", None),
}


@pytest.mark.parametrize("text", SENTENCES)
def test_x_ha_doe_is_one_predicate_from_kiwis_split(vocab, analyzer, text):
    form, tag, tokens = SENTENCES[text]
    kiwi = analyzer.analyze(text)
    stem = next(i for i, m in enumerate(kiwi) if form.startswith(m.form) and
                kiwi[i + 1].tag in ("XSV", "XSA"))
    assert kiwi[stem + 1].form == form[-1]                  # Kiwi's split is the input
    tok = MultihotTokenizer(vocab, analyzer)
    morphemes = tok.analyzer.analyze(text)
    assert len(morphemes) == len(kiwi) - 1 and (form, tag) in [(m.form, m.tag) for m in morphemes]
    out = tok.encode_morphemes(kiwi)                        # raw Kiwi output joins the same way
    own = tok.encode(text)
    assert all(np.array_equal(out[k], own[k]) for k in TOKEN_ARRAYS)
    k = next(i for i, m in enumerate(morphemes) if m.form == form)
    ids = out["ids"][out["morph"] == k]
    assert ids[-1] == vocab.token_to_id(form[-1] + "##")    # rule 3: X + 하## / 되##
    if tokens is not None:
        assert [vocab.id_to_token(i) for i in ids] == tokens
    assert out["inpos"][out["morph"] == k].tolist() == list(range(len(ids)))


def test_other_deriving_suffixes_and_separate_words_stay_apart(analyzer):
    joined = [(m.form, m.tag) for m in join_derived_predicates(
        analyzer.analyze("공장이 강물을 오염시켰다. 동의를 했다."))]
    assert ("오염", "NNG") in joined and ("시키", "XSV") in joined    # not rule 3's 하/되
    assert ("동의", "NNG") in joined and ("하", "VV") in joined       # 하 is its own word
    assert join_derived_predicates(join_derived_predicates(analyzer.analyze("인정했다"))) == \
        join_derived_predicates(analyzer.analyze("인정했다"))          # idempotent


def test_composition_and_thin_fallback_warning(tmp_path, capsys):
    from kjax.cli import main
    code = main(["tokenizer", "train", "--config", DEMO_CONFIG,
                 "--config.tokenizer.scheme=multihot", "--config.tokenizer.vocab_size=800",
                 "--config.tokenizer.corpus=", "--config.data.corpus=konlpy",   # the fixture text
                 "--config.data.mask_unit=eojeol",   # the demo masks pieces; multi-hot cannot
                 f"--config.tokenizer.path={tmp_path}/tok"])
    out = capsys.readouterr().out
    assert code == 0 and "multi-hot vocabulary:" in out and "BPE (rewritten by POS)" in out
    assert "@jamo" in out and "warning: only" in out       # KoNLPy's small corpus: thin
    vocab = MultihotVocab.load(f"{tmp_path}/tok.multihot.txt")
    c = composition(vocab.tokens)
    assert sum(v for k, v in c.items() if k != "total") == c["total"] == len(vocab)
    assert c["jamo"] >= 67 and c["digits"] == 22 and c["letters"] == 52 and c["specials"] == 5
    assert c["syllables"] == vocab.settings["hangul_syllables_seen"] > 300
    assert vocab.settings["syllable_threshold"] == 1 and vocab.settings["min_syllable_share"] == 1e-8
