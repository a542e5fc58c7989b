"""`data.corpus = "tfds:NAME/CONFIG:SPLIT"`: wiki40b marker parsing, the
adapter against a stub `tensorflow_datasets` module (always runs), the
install hint when TF is missing, and a real tiny TFDS dataset written with
tfds itself when tensorflow-datasets is installed."""
import sys
from types import SimpleNamespace

import pytest

from kjax.errors import KjaxError
from kjax.text.corpus import CorpusStats, iter_documents, resolve_corpus
from kjax.text.tfds_source import TfdsSource, document_lines, parse_spec

ARTICLE = ("\n_START_ARTICLE_\n대한민국\n_START_SECTION_\n역사\n_START_PARAGRAPH_\n"
           "고조선이 세워졌다._NEWLINE_삼국 시대가 이어졌다.\n_START_SECTION_\n지리\n"
           "_START_PARAGRAPH_\n한반도에 있다.\n")


def test_wiki40b_markers_become_lines_without_titles():
    assert document_lines(ARTICLE.encode()) == [
        "고조선이 세워졌다.".encode(), "삼국 시대가 이어졌다.".encode(), "한반도에 있다.".encode()]
    assert document_lines(b"\n_START_ARTICLE_\nOnly a title\n") == []
    assert document_lines("plain\n\ntext\n".encode()) == [b"plain", b"text"]   # no markers
    assert document_lines("_START_PARAGRAPH_\nA_NEWLINE__NEWLINE_B") == [b"A", b"B"]


def test_spec_parsing_and_errors():
    assert parse_spec("tfds:wiki40b/ko") == TfdsSource("wiki40b/ko", "train", None)
    assert parse_spec("tfds:wiki40b/ko:validation", "/d") == TfdsSource("wiki40b/ko",
                                                                       "validation", "/d")
    assert str(parse_spec("tfds:wiki40b/ko:train[:10%]")) == "tfds:wiki40b/ko:train[:10%]"
    for bad in ("tfds:", "tfds:a/b/c", "tfds:wiki40b/ko:train:x"):
        with pytest.raises(KjaxError, match="is not tfds:NAME"):
            parse_spec(bad)
    # a tfds part mixes with files; nothing is imported until the corpus is read
    assert resolve_corpus("tfds:wiki40b/ko:test", "/data") == [
        TfdsSource("wiki40b/ko", "test", "/data")]


def test_missing_tensorflow_datasets_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)   # import fails
    with pytest.raises(KjaxError, match=r"pip install 'kjax\[tfds\]'"):
        list(iter_documents(resolve_corpus("tfds:wiki40b/ko")))


def stub_tfds(texts, prepared=True, calls=None):
    """A stand-in for the tensorflow_datasets module: one builder of `texts`."""
    calls = calls if calls is not None else {}

    class Builder:
        info = SimpleNamespace(splits={"train": 3, "validation": 1},
                               features={"text": "Text", "wikidata_id": "Text"})

        def is_prepared(self):
            return prepared

        def as_dataset(self, split, shuffle_files, read_config):
            calls.update(split=split, shuffle_files=shuffle_files, read_config=read_config)
            return [{"text": t, "wikidata_id": b"Q"} for t in texts]

    def builder(name, data_dir=None):
        calls.update(name=name, data_dir=data_dir)
        return Builder()

    return SimpleNamespace(builder=builder, as_numpy=lambda ds: iter(ds),
                           ReadConfig=lambda **kw: kw)


def test_adapter_reads_documents_and_counts_bad_parts(monkeypatch):
    calls = {}
    texts = [ARTICLE.encode(), b"\n_START_ARTICLE_\nNo paragraphs\n",
             b"_START_PARAGRAPH_\n\xff\xfe broken_NEWLINE_" + "남는 줄.".encode()]
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", stub_tfds(texts, calls=calls))
    stats = CorpusStats()
    docs = list(iter_documents(resolve_corpus("tfds:wiki40b/ko:validation", "/prepared"), stats))
    assert docs == [["고조선이 세워졌다.", "삼국 시대가 이어졌다.", "한반도에 있다."], ["남는 줄."]]
    assert calls["name"] == "wiki40b/ko" and calls["data_dir"] == "/prepared"
    assert calls["split"] == "validation" and calls["shuffle_files"] is False
    assert calls["read_config"]["interleave_cycle_length"] == 1   # file order: reproducible
    assert (stats.documents, stats.empty_documents, stats.sentences) == (2, 1, 4)
    assert stats.skipped == {"undecodable UTF-8": 1} and "tfds:wiki40b/ko:validation#2" in \
        stats.summary()


@pytest.mark.parametrize("prepared, spec, message", [
    (False, "tfds:wiki40b/ko", "is not prepared in /d.*tfds build wiki40b/ko"),
    (True, "tfds:wiki40b/ko:test", "no split 'test'; wiki40b/ko has train, validation")])
def test_adapter_errors_say_what_to_do(monkeypatch, prepared, spec, message):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", stub_tfds([], prepared))
    with pytest.raises(KjaxError, match=message):
        list(iter_documents(resolve_corpus(spec, "/d")))


@pytest.fixture(scope="module")
def tiny_tfds(tmp_path_factory):
    """A 12-article wiki40b look-alike, written with tfds itself (no download)."""
    import tensorflow_datasets as tfds
    from pipeline_helpers import constitution_lines
    lines = constitution_lines()

    class KjaxTinyWiki(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        VERSION = tfds.core.Version("1.0.0")
        BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="ko")]

        def _info(self):
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
                {"text": tfds.features.Text(), "wikidata_id": tfds.features.Text()}))

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples(0, 12), "test": self._generate_examples(12, 2)}

        def _generate_examples(self, first, n):
            for i in range(first, first + n):
                body = "_NEWLINE_".join(lines[4 * i:4 * i + 3])
                yield str(i), {"wikidata_id": f"Q{i}", "text": (
                    f"\n_START_ARTICLE_\n제목 {i}\n_START_PARAGRAPH_\n{body}\n"
                    f"_START_SECTION_\n절\n_START_PARAGRAPH_\n{lines[4 * i + 3]}\n")}

    data_dir = tmp_path_factory.mktemp("tfds")
    KjaxTinyWiki(data_dir=str(data_dir)).download_and_prepare()
    return str(data_dir), lines


def test_prepare_reads_a_real_tfds_dataset(tiny_tfds, prepared, tmp_path):
    from conftest import tiny_config
    from kjax.pretrain.prepare import prepare
    data_dir, lines = tiny_tfds
    docs = list(iter_documents(resolve_corpus("tfds:kjax_tiny_wiki/ko:train", data_dir)))
    # titles and headings gone; tfds stores examples in its own (hashed, fixed) order
    assert sorted(docs) == sorted(lines[4 * i:4 * i + 4] for i in range(12))
    assert docs == list(iter_documents(resolve_corpus("tfds:kjax_tiny_wiki/ko", data_dir)))
    config = tiny_config(prepared, **{"data.corpus": "tfds:kjax_tiny_wiki/ko",
                                      "data.tfds_data_dir": f"{data_dir}",
                                      "data.dir": f"{tmp_path}/ex", "data.docs_per_chunk": 5})
    meta = prepare(config, progress=False)
    assert meta["documents"] == 12 and meta["chunks"] == 3 and meta["sentences"] == 48
    assert meta["train_examples"] > 0 and meta["documents_without_examples"] == 0
    with pytest.raises(KjaxError, match="cannot open 'kjax_tiny_wiki/ko'.*run `tfds build"):
        list(iter_documents(resolve_corpus("tfds:kjax_tiny_wiki/ko", str(tmp_path / "empty"))))
