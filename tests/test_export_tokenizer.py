"""The exported tokenizers reproduce kjax's token ids in transformers, for
every scheme, on Korean text including hostile input (docs/EXPORT.md)."""
import pytest
from transformers import AutoTokenizer

from conftest import tiny_config
from kjax.errors import KjaxError
from kjax.export import tokenizer_export as tx
from kjax.text.corpus import demo_corpus_files
from kjax.tokens.sentencepiece import SentencePieceTokenizer
from test_export import HOSTILE

def korean_lines(n: int = 150) -> list[str]:
    with open(demo_corpus_files()[0], encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()][:n]


@pytest.fixture(scope="module", params=["unigram", "bpe"])
def sp_model(request, prepared, tmp_path_factory):
    if request.param == "unigram":
        return str(prepared / "tok" / "sp.model")
    from kjax.tokens.factory import train_tokenizer
    config = tiny_config(tmp_path_factory.mktemp("bpe"), **{"tokenizer.model_type": "bpe"})
    return train_tokenizer(config)[0]


def test_fast_tokenizer_reproduces_kjax_ids(sp_model, tmp_path):
    tx.export_sentencepiece(sp_model, str(tmp_path), 64)
    hf = AutoTokenizer.from_pretrained(tmp_path)
    kjax_tok = SentencePieceTokenizer(sp_model)
    texts = korean_lines() + HOSTILE + ["서울은 한국의 [MASK]이다.", "가 [SEP] 나"]
    for text in texts:
        assert hf(text, add_special_tokens=False)["input_ids"] == \
            tx.kjax_reference_ids(kjax_tok, text), repr(text)
    a, b = korean_lines(2)
    pair = hf(a, b)
    ids_a, ids_b = (tx.kjax_reference_ids(kjax_tok, t) for t in (a, b))
    assert pair["input_ids"] == [2, *ids_a, 3, *ids_b, 3]
    assert pair["token_type_ids"] == [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)
    assert hf.decode(hf(a)["input_ids"], skip_special_tokens=True) == a
    # The documented divergences (docs/EXPORT.md): a leading special token gets no ▁,
    # and a literal [PAD] is the pad token.
    assert hf("[MASK]", add_special_tokens=False)["input_ids"] == [4]
    assert kjax_tok.encode("[MASK]")["ids"].tolist() == [kjax_tok.token_to_id("▁"), 4]
    assert hf("[PAD]", add_special_tokens=False)["input_ids"] == [0]


def test_unsupported_sentencepiece_model_is_refused(tmp_path):
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(sentence_iterator=iter(korean_lines(300)),
                                   model_prefix=str(tmp_path / "nfkc"), vocab_size=600,
                                   character_coverage=0.98, hard_vocab_limit=False,
                                   minloglevel=2)
    with pytest.raises(KjaxError, match="nmt_nfkc"):
        tx.build_fast_tokenizer(str(tmp_path / "nfkc.model"))


def test_morph_sp_tokenizer_class(tmp_path):
    from kjax.tokens.factory import train_tokenizer
    from kjax.tokens.morph_sp import MorphSPTokenizer
    config = tiny_config(tmp_path, **{"tokenizer.scheme": "morph-sp"})
    path = train_tokenizer(config)[0]
    tx.export_tokenizer(config, str(tmp_path / "hf"))
    hf = tx.KjaxMorphSPTokenizer.from_pretrained(tmp_path / "hf")
    kjax_tok = MorphSPTokenizer(path)
    for text in korean_lines(40) + HOSTILE:
        assert hf(text, add_special_tokens=False)["input_ids"] == \
            tx.kjax_reference_ids(kjax_tok, text), repr(text)
    pair = hf("나는 학교에서", "보았다")
    assert pair["input_ids"][0] == 2 and pair["input_ids"].count(3) == 2
    assert pair["token_type_ids"][-1] == 1 and pair["token_type_ids"][0] == 0
    remote = AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=True)
    assert remote("나는 학교에서")["input_ids"] == hf("나는 학교에서")["input_ids"]


def test_multihot_tokenizer_class(tmp_path):
    from kjax.tokens.multihot import BASE_TOKENS, MultihotTokenizer, MultihotVocab
    vocab_file = str(tmp_path / "vocab.multihot.txt")
    MultihotVocab([*BASE_TOKENS, "나", "##는", "학교", "##에서", "보##", "##었", "##다",
                   "@😀"]).save(vocab_file)
    tx.export_kiwi(tx.KjaxMultihotTokenizer, vocab_file, str(tmp_path / "hf"), 64)
    hf = tx.KjaxMultihotTokenizer.from_pretrained(tmp_path / "hf")
    kjax_tok = MultihotTokenizer(vocab_file)
    for text in ["나는 학교에서 보았다", "나는 😀 漢字 Seed 20", *HOSTILE]:
        assert hf(text, add_special_tokens=False)["input_ids"] == \
            tx.kjax_reference_ids(kjax_tok, text), repr(text)
    arrays = hf.encode_arrays("나는 학교에서")
    assert arrays["morph"].tolist() == [0, 1, 2, 3]
