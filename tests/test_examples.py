"""Corpus reading, masking statistics and NSP pair construction."""
import gzip

import numpy as np
import pytest

from kjax.errors import KjaxError
from kjax.examples.masking import choose_masks
from kjax.examples.pairs import IS_NEXT, IS_RANDOM, pairs_from_document
from kjax.text.corpus import CorpusStats, iter_documents, resolve_corpus
from kjax.tokens.sentencepiece import CLS, MASK, SEP


def test_corpus_reader_skips_and_counts_bad_lines(tmp_path):
    good = "첫 문장입니다.\r\n둘째 문장.\n\n다른 문서.\n".encode()
    bad = b"\xff\xfe broken\n" + "NUL\x00here\n".encode()
    path = tmp_path / "c.txt.gz"
    with gzip.open(path, "wb") as f:
        f.write("\ufeff".encode() + good + bad + "끝.\n".encode())
    stats = CorpusStats()
    docs = list(iter_documents([str(path)], stats))
    assert docs == [["첫 문장입니다.", "둘째 문장."], ["다른 문서.", "끝."]]
    assert stats.skipped == {"undecodable UTF-8": 1, "NUL bytes": 1}
    assert f"{path}:5" in stats.summary()  # names where the bad line is


def test_document_per_file_ignores_blank_lines(tmp_path):
    (tmp_path / "a.txt").write_text("하나\n\n둘\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("셋\n", encoding="utf-8")
    docs = list(iter_documents(resolve_corpus(str(tmp_path / "*.txt")), None, True))
    assert docs == [["하나", "둘"], ["셋"]]


@pytest.mark.parametrize("spec, message", [("", "data.corpus is empty"),
                                           ("/nonexistent/*.txt", "no file matches")])
def test_missing_corpus_is_a_clear_error(spec, message):
    with pytest.raises(KjaxError, match=message):
        resolve_corpus(spec)


def test_empty_corpus_files_are_an_error(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(KjaxError, match="every file is empty"):
        resolve_corpus(str(tmp_path / "empty.txt"))


def test_masking_rate_replacements_and_whole_words():
    rng = np.random.default_rng(0)
    vocab, n = 1000, 128
    words = np.repeat(np.arange(n // 2), 2)  # every word has two tokens
    ids = rng.integers(5, vocab, n).astype(np.int32)
    maskable = np.ones(n, bool)
    maskable[0] = False  # [CLS]
    kinds, counts = {"mask": 0, "random": 0, "same": 0}, []
    for _ in range(2000):
        out, pos, orig = choose_masks(ids, words, maskable, rng, 0.15, 40, vocab)
        counts.append(len(pos))
        assert 0 not in pos
        np.testing.assert_array_equal(orig, ids[pos])
        # Whole words: if one token of a word is predicted, so is the other.
        for w in set(words[pos].tolist()):
            assert set(np.flatnonzero(words == w)) <= set(pos.tolist()) | {0}
        for p in pos:
            kinds["mask" if out[p] == MASK else "same" if out[p] == ids[p] else "random"] += 1
        untouched = np.setdiff1d(np.arange(n), pos)
        np.testing.assert_array_equal(out[untouched], ids[untouched])
    total = sum(kinds.values())
    assert abs(kinds["mask"] / total - 0.8) < 0.02
    assert abs(kinds["random"] / total - 0.1) < 0.02  # (a random id may equal the original)
    assert abs(kinds["same"] / total - 0.1) < 0.02
    assert abs(np.mean(counts) - round(127 * 0.15)) <= 1


def test_masking_respects_max_predictions():
    rng = np.random.default_rng(1)
    ids = np.arange(5, 205, dtype=np.int32)
    _, pos, _ = choose_masks(ids, None, np.ones(200, bool), rng, 0.5, 7, 300)
    assert len(pos) == 7


def sentence(ids, words=None):
    ids = np.asarray(ids, np.int32)
    words = np.arange(len(ids), dtype=np.int32) if words is None else np.asarray(words, np.int32)
    return {"ids": ids, "morph": words, "inpos": np.zeros_like(ids), "tag": np.zeros_like(ids),
            "eojeol": words}


def test_nsp_negatives_never_come_from_the_same_document():
    rng = np.random.default_rng(0)
    docs = [(d, [sentence(rng.integers(5, 100, rng.integers(3, 12))) for _ in range(8)])
            for d in range(6)]
    labels = []
    for doc_id, doc in docs:
        for ex in pairs_from_document(doc_id, doc, docs, rng, 48, 0.1, 0.5):
            a_doc, b_doc = ex["source_docs"]
            labels.append(int(ex["nsp_label"]))
            assert (a_doc != b_doc) == (ex["nsp_label"] == IS_RANDOM)
            ids = ex["input_ids"]
            assert len(ids) <= 48 and ids[0] == CLS and ids[-1] == SEP
            assert (ids == SEP).sum() == 2
            sep = int(np.flatnonzero(ids == SEP)[0])
            np.testing.assert_array_equal(ex["token_type_ids"][: sep + 1], 0)
            np.testing.assert_array_equal(ex["token_type_ids"][sep + 1:], 1)
            for key in ("word_ids", "morph_ids", "inpos", "tags"):
                assert len(ex[key]) == len(ids)
            assert (ex["word_ids"][[0, sep, -1]] == -1).all()
    assert IS_NEXT in labels and IS_RANDOM in labels
    assert 0.3 < np.mean(labels) < 0.7


def test_word_ids_stay_unique_across_sentences():
    doc = [sentence([5, 6, 7], [0, 0, 1]), sentence([8, 9], [0, 1]),
           sentence([10, 11], [0, 0]), sentence([12], [0])]
    rng = np.random.default_rng(3)
    exs = pairs_from_document(0, doc, [(0, doc)], rng, 64, 0.0, 0.0)
    assert exs
    for ex in exs:
        body = ex["word_ids"][ex["word_ids"] >= 0]
        # Ids only grow and the four sentences' 2+2+1+1 words stay 6 distinct words.
        assert (np.diff(body) >= 0).all()
        assert len(np.unique(body)) == 6


def test_static_masks_draw_from_one_stream_per_example(tmp_path, monkeypatch):
    """Seeded by (seed, index in the chunk, copy) alone, example n of every
    chunk — and of the eval split — would reuse one stream of static masks.
    Every masked example gets its own."""
    from conftest import tiny_config
    from kjax.pretrain import prepare as prep
    from kjax.tokens.factory import train_tokenizer
    config = tiny_config(tmp_path, **{"data.masking": "static", "data.dupe_factor": 2,
                                      "data.docs_per_chunk": 3, "data.eval_every_nth_doc": 2})
    train_tokenizer(config)
    streams, original = [], prep.mask_example

    def spy(example, cfg, rng):
        streams.append(str(rng.bit_generator.state["state"]))
        return original(example, cfg, rng)
    monkeypatch.setattr(prep, "mask_example", spy)
    meta = prep.prepare(config, progress=False)
    assert meta["chunks"] >= 3 and meta["eval_examples"] > 0
    assert len(streams) == meta["train_examples"] + meta["eval_examples"]   # 2 copies in train
    assert len(set(streams)) == len(streams)


def test_a_short_example_of_long_units_still_gets_a_prediction():
    """Budget round(6 · 0.15) = 1 token, every eojeol 3 tokens: the smallest
    unit is masked whole rather than none at all."""
    ids = np.arange(10, 16)
    words = np.asarray([0, 0, 0, 1, 1, 1])
    for seed in range(20):
        _, pos, orig = choose_masks(ids, words, np.ones(6, bool), np.random.default_rng(seed),
                                    0.15, 20, 100)
        assert pos.tolist() in ([0, 1, 2], [3, 4, 5]) and (orig == ids[pos]).all()
    _, pos, _ = choose_masks(ids, words, np.ones(6, bool), np.random.default_rng(0), 0.15, 2, 100)
    assert len(pos) == 0          # never more than max_predictions
