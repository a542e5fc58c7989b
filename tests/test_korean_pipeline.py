"""The Korean text pipeline end to end: tokenizer stats against hand counts,
`kjax inspect`, whole-unit masking through prepare → loader, bad input
through `kjax prepare` for every scheme, and byte-exact resume."""
import json
import os
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordReader

from conftest import DEMO_CONFIG
from kjax.cli import main
from kjax.examples import records
from kjax.pretrain.prepare import prepare
from kjax.morph import KoreanAnalyzer
from kjax.tokens.sentencepiece import UNK
from kjax.tokens.stats import measure
from pipeline_helpers import SCHEMES, scheme_config, with_overrides, write_corpus

SENTENCE = "나는 너를 학교에서 보았다"
# Bad input, one document each (blank lines between): what a web crawl holds.
HOSTILE_DOCS = [
    b"\xff\xfe not UTF-8\n" + "그래도 이 문장은 남는다.\n".encode(),  # 1 skipped line, doc kept
    "NUL\x00만 있는 문서\n".encode(),                       # every line skipped: empty document
    ("가" * 3_500_000).encode() + "\n짧은 줄.\n".encode(),   # a 10 MB line (skipped), doc kept
    "!!! ... ??? ~~~ ---\n".encode(),
    "😀👍🎉🙏\n".encode(),
    "漢字語 大韓民國 憲法\n".encode(),
    "ㅋㅋㅋ ㅎㅎ ᄀᄀ ㅏㅓ\n".encode(),
    "첫 줄입니다.\r\n둘째 줄입니다.\r\n".encode(),            # CRLF
    "Москва café 서울 ２０２４ αβγ 東京 ﷺ\n".encode(),         # mixed scripts
    "\u200b\u200b\n".encode(),                              # zero-width spaces
    b"\x01\x02\x03\x7f\n",                                    # control characters only
]
HOSTILE = b"\n\n".join(HOSTILE_DOCS) + b"\n   \t \n\n\n"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A config per scheme, its tokenizer trained on the constitution, whose
    corpus is the constitution followed by the hostile documents."""
    out = {}
    for scheme in SCHEMES:
        tmp = tmp_path_factory.mktemp(scheme.replace("-", ""))
        clean = write_corpus(tmp / "clean.txt")
        config = scheme_config(tmp, scheme, clean)
        hostile = write_corpus(tmp / "hostile.txt", extra=HOSTILE)
        out[scheme] = with_overrides(config, **{"data.corpus": hostile})
    return out


def read_examples(directory, split="train"):
    out = []
    for path in records.list_shards(str(directory), split):
        reader = ArrayRecordReader(path)
        out += [records.decode_example(r) for r in reader.read_all()]
        reader.close()
    return out


# ---- tokenizer stats -----------------------------------------------------
class OneTokenPerCharacter:
    """A morpheme scheme with a known answer: every character is a token,
    and a morpheme holding 서 is [UNK]."""
    scheme = "multihot"

    def __init__(self):
        self.analyzer = KoreanAnalyzer()

    def encode_morphemes(self, morphemes):
        ids, morph = [], []
        for k, m in enumerate(morphemes):
            ids += [UNK] if "서" in m.form else [10] * len(m.form)
            morph += [k] * (1 if "서" in m.form else len(m.form))
        return {"ids": np.asarray(ids), "morph": np.asarray(morph)}


def test_stats_of_a_morpheme_scheme_match_hand_counts():
    # 나/NP 는/JX | 학교/NNG 에서/JKB | 보/VV 었/EP 다/EF   (Kiwi, see test_morph.py)
    s = measure(OneTokenPerCharacter(), ["나는 학교에서 보았다"] * 3).summary()
    assert s["sentences"] == 3 and s["morphemes"] == 21
    assert s["counts"]["noun"] == {"morphemes": 6, "split": 3, "with_unk": 0}       # 학교
    assert s["counts"]["predicate"] == {"morphemes": 3, "split": 0, "with_unk": 0}
    assert s["counts"]["other"] == {"morphemes": 12, "split": 0, "with_unk": 3}     # 에서 → [UNK]
    assert s["tokens"] == 3 * 8 and s["unk_tokens"] == 3      # 1+1+2+1+1+1+1 per sentence
    assert s["unk_token_rate"] == pytest.approx(1 / 8)
    assert s["split_share"]["noun"] == 0.5 and s["token_set_share"] == pytest.approx(3 / 21)
    assert s["crossing_share"] == 0.0


class FixedPieces:
    """Plain sentencepiece stand-in: fixed pieces, given as character spans."""
    scheme = "sentencepiece"
    PIECES = [(0, 2, 7), (3, 4, 8), (4, 6, 9), (6, 7, UNK), (7, 10, 10), (10, 11, 11)]

    def __init__(self, pieces=None):
        self.sp = self
        self.pieces = pieces or self.PIECES

    def token_to_id(self, piece):
        return 5 if piece == "\u2581" else UNK

    def encode(self, texts, return_type):
        assert return_type == "proto"

        def piece(text, b, e, i):
            byte = lambda c: len(text[:c].encode("utf-8"))  # noqa: E731
            return SimpleNamespace(begin=byte(b), end=byte(e), id=i,
                                   piece="\u2581" if i == 5 else text[b:e])
        return [SimpleNamespace(pieces=[piece(t, *p) for p in self.pieces]) for t in texts]


class BareSpaceMorphSP:
    """morph-sp stand-in: every eojeol-initial morpheme is a bare ▁ (id 5) + one piece."""
    scheme = "morph-sp"

    def __init__(self):
        self.analyzer = KoreanAnalyzer()

    def token_to_id(self, piece):
        return 5 if piece == "\u2581" else UNK

    def encode_morphemes(self, morphemes):
        ids, morph, last = [], [], None
        for k, m in enumerate(morphemes):
            pieces = [5, 10] if m.eojeol != last else [10]
            ids += pieces
            morph += [k] * len(pieces)
            last = m.eojeol
        return {"ids": np.asarray(ids), "morph": np.asarray(morph)}


def test_bare_space_pieces_count_alike_in_both_sentencepiece_schemes():
    """A bare ▁ is a token (a position) in both schemes and never makes a
    morpheme "split": ▁+학교 is one morpheme, not a split one."""
    text = "나는 학교에서 보았다"   # 나 는 | 학교 에서 | 보 었 다
    msp = measure(BareSpaceMorphSP(), [text]).summary()
    assert msp["tokens"] == 10 and msp["bare_space_tokens"] == 3
    assert msp["bare_space_share"] == pytest.approx(0.3) and msp["counts"]["all"]["split"] == 0
    #  ▁ covers the space before 학교 and 보: pieces ▁나 | 는 | ▁ | 학교 | 에서 | ▁ | 보 | 았다
    pieces = [(0, 1, 7), (1, 2, 8), (2, 3, 5), (3, 5, 9), (5, 7, 10), (7, 8, 5), (8, 9, 11),
              (9, 11, 12)]
    sp = measure(FixedPieces(pieces), [text], KoreanAnalyzer()).summary()
    assert sp["tokens"] == 8 and sp["bare_space_tokens"] == 2
    assert sp["counts"]["all"]["split"] == 0 and sp["counts"]["noun"]["split"] == 0


def test_stats_align_sentencepiece_pieces_to_morphemes_by_characters():
    # "나는 학교에서 보았다": pieces 나는 | 학 | 교에 | 서 | ␣보았 | 다
    #  나 1 piece, 는 1, 학교 2 (split), 에서 2 (split, holds [UNK]), 보 1, 었 1, 다 1
    #  crossing: 나는 (나+는), 교에 (학교+에서), ␣보았 (보+었)
    s = measure(FixedPieces(), ["나는 학교에서 보았다"], KoreanAnalyzer()).summary()
    assert s["tokens"] == 6 and s["unk_tokens"] == 1 and s["crossing_tokens"] == 3
    assert s["counts"]["noun"] == {"morphemes": 2, "split": 1, "with_unk": 0}
    assert s["counts"]["predicate"] == {"morphemes": 1, "split": 0, "with_unk": 0}
    assert s["counts"]["other"] == {"morphemes": 4, "split": 1, "with_unk": 1}
    assert s["crossing_share"] == 0.5 and s["token_set_share"] is None


@pytest.mark.parametrize("scheme", SCHEMES)
def test_stats_cli_agrees_with_direct_encoding(trained, scheme, tmp_path, capsys):
    config = trained[scheme]
    clean = config.data.corpus.replace("hostile.txt", "clean.txt")
    out = tmp_path / "stats.json"
    args = ["tokenizer", "stats", "--config", DEMO_CONFIG, "--corpus", clean, "--json", str(out),
            "--max-sentences", "40", *overrides_of(config)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "split into >= 2 tokens" in printed and "[UNK] tokens" in printed
    s = json.loads(out.read_text(encoding="utf-8"))
    assert s["scheme"] == scheme and s["sentences"] == 40
    from kjax.tokens.factory import open_tokenizer
    tok = open_tokenizer(config)
    lines = [line for line in open(clean, encoding="utf-8").read().splitlines() if line][:40]
    encoded = [tok.encode(line) for line in lines]
    assert s["tokens"] == sum(len(e["ids"]) for e in encoded)
    assert s["unk_tokens"] == sum(int((e["ids"] == UNK).sum()) for e in encoded)
    if scheme != "sentencepiece":   # tokens per morpheme are read off `morph`, bare ▁ aside
        bare = tok.token_to_id("\u2581") if scheme == "morph-sp" else -1
        split = sum(int((np.bincount(e["morph"], weights=e["ids"] != bare) > 1).sum())
                    for e in encoded)
        assert s["counts"]["all"]["split"] == split and s["crossing_tokens"] == 0
    else:                           # plain pieces do cross morphemes on real text
        assert s["crossing_tokens"] > 0 and s["counts"]["all"]["split"] > 0


def overrides_of(config) -> list[str]:
    keys = ("tokenizer.scheme", "tokenizer.path", "tokenizer.vocab_size", "model.vocab_size",
            "data.corpus", "data.dir", "data.mask_unit", "data.docs_per_chunk",
            "data.eval_every_nth_doc", "data.document_per_file", "data.max_seq_len",
            "data.max_predictions_per_seq", "model.max_position_embeddings")
    out = []
    for key in keys:
        section, name = key.split(".")
        value = config[section][name]
        out.append(f"--config.{key}={value}" if isinstance(value, str) else
                   f"--config.{key}={value}")
    return out


# ---- kjax inspect --------------------------------------------------------
def test_inspect_json_lists_morphemes_and_aligned_tokens(trained, capsys):
    config = trained["morph-sp"]
    assert main(["inspect", SENTENCE, "--config", DEMO_CONFIG, "--json",
                 *overrides_of(config)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["text"] == SENTENCE and out["scheme"] == "morph-sp"
    assert [(m["form"], m["tag"]) for m in out["morphemes"]] == [
        ("나", "NP"), ("는", "JX"), ("너", "NP"), ("를", "JKO"), ("학교", "NNG"),
        ("에서", "JKB"), ("보", "VV"), ("었", "EP"), ("다", "EF")]
    assert [m["eojeol"] for m in out["morphemes"]] == [0, 0, 1, 1, 2, 2, 3, 3, 3]
    assert out["morphemes"][4]["span"] == "6:8" and out["morphemes"][4]["surface"] == "학교"
    for k, m in enumerate(out["morphemes"]):   # the token list of a morpheme points back to it
        mine = [t for t in out["tokens"] if t["morph"] == k]
        assert [t["#"] for t in mine] == [int(i) for i in m["tokens"].split(",")]
        assert [t["inpos"] for t in mine] == list(range(len(mine)))
        assert {t["tag"] for t in mine} == {m["tag"]} and {t["eojeol"] for t in mine} == {m["eojeol"]}


def test_inspect_prints_tables_for_plain_sentencepiece(trained, capsys):
    config = trained["sentencepiece"]
    assert main(["inspect", SENTENCE, "--config", DEMO_CONFIG, *overrides_of(config)]) == 0
    text = capsys.readouterr().out
    assert "morphemes (9)" in text and "| JKO |" in text.replace("  ", " ")
    assert "| # " in text and "tokens (" in text
    assert "plain sentencepiece has no morphemes" in text


# ---- prepare: bad input, alignment, whole-unit masking, resume -------------
def check_aligned(example):
    n = len(example["input_ids"])
    for key in ("token_type_ids", "word_ids", "morph_ids", "inpos", "tags"):
        assert len(example[key]) == n, key
    for segment in np.split(np.arange(n), np.flatnonzero(example["morph_ids"] < 0)):
        segment = segment[example["morph_ids"][segment] >= 0]
        morph, words = example["morph_ids"][segment], example["word_ids"][segment]
        inpos, tags = example["inpos"][segment], example["tags"][segment]
        assert (np.diff(morph) >= 0).all() and (np.diff(words) >= 0).all()
        same = np.diff(morph) == 0
        # inside a morpheme: one eojeol, one tag, inpos counting up; a new one starts at 0
        assert (np.diff(words)[same] == 0).all() and (np.diff(tags)[same] == 0).all()
        assert (np.diff(inpos)[same] == 1).all() and (inpos[1:][~same] == 0).all()


@pytest.mark.parametrize("scheme", SCHEMES)
def test_bad_input_is_processed_or_counted_never_dropped(trained, scheme, tmp_path):
    config = with_overrides(trained[scheme], **{"data.dir": str(tmp_path / "ex")})
    meta = prepare(config, progress=False)
    assert meta["skipped_lines"] == {"undecodable UTF-8": 1, "NUL bytes": 1,
                                     "longer than 100000 chars": 1}
    assert meta["empty_documents"] == 1                         # the NUL-only document
    assert meta["documents"] == 58 + len(HOSTILE_DOCS) - 1
    examples = read_examples(tmp_path / "ex") + read_examples(tmp_path / "ex", "eval")
    for ex in examples:
        check_aligned(ex)
    # Every document either gave examples (as segment A) or is counted.
    with_examples = {int(ex["source_docs"][0]) for ex in examples}
    assert len(with_examples) + meta["documents_without_examples"] == meta["documents"]
    if scheme != "sentencepiece":   # Kiwi finds no morpheme in control characters
        assert meta["sentences_without_tokens"] >= 1 and meta["documents_without_examples"] >= 1


@pytest.mark.parametrize("scheme", ["morph-sp", "multihot"])
@pytest.mark.parametrize("unit", ["morpheme", "eojeol"])
def test_masking_never_splits_a_unit(trained, scheme, unit, tmp_path):
    from kjax.batches.loader import train_dataset
    config = with_overrides(trained[scheme], **{
        "data.dir": str(tmp_path / "ex"), "data.mask_unit": unit, "data.masking": "static",
        "data.dupe_factor": 2})
    prepare(config, progress=False)
    key = {"morpheme": "morph_ids", "eojeol": "word_ids"}[unit]

    def check(example, positions):
        assert len(positions) > 0
        for ids in (example[key], example["morph_ids"]):   # an eojeol holds whole morphemes
            for u in set(ids[positions].tolist()):
                assert set(np.flatnonzero(ids == u)) <= set(positions.tolist()), (unit, u)

    stored = read_examples(tmp_path / "ex")                # static: masks made by prepare
    for ex in stored:
        check(ex, ex["mlm_positions"])
    # dynamic: masks drawn by the loader; rows are matched to records by their original ids
    config = with_overrides(config, **{"data.masking": "dynamic", "data.dir": str(tmp_path / "d")})
    prepare(config, progress=False)
    by_ids = {tuple(ex["input_ids"]): ex for ex in read_examples(tmp_path / "d")}
    batches = iter(train_dataset(config))
    for _ in range(3):
        batch = next(batches)
        for row in range(len(batch["input_ids"])):
            n = int(batch["attention_mask"][row].sum())
            keep = batch["mlm_weights"][row] > 0
            positions, targets = batch["mlm_positions"][row][keep], batch["mlm_ids"][row][keep]
            original = batch["input_ids"][row][:n].copy()
            original[positions] = targets
            check(by_ids[tuple(original)], positions)


def test_resumed_prepare_equals_uninterrupted_byte_for_byte(trained, tmp_path):
    config = trained["morph-sp"]
    full = with_overrides(config, **{"data.dir": str(tmp_path / "full")})
    killed = with_overrides(config, **{"data.dir": str(tmp_path / "killed")})
    meta = prepare(full, progress=False)
    assert meta["chunks"] >= 4
    shutil.copytree(tmp_path / "full", tmp_path / "killed")
    # A job killed while writing its last chunk: no marker, a half-written shard
    # under a temporary name, the eval shard not written yet.
    last = meta["chunks"] - 1
    os.remove(records.chunk_marker(str(tmp_path / "killed"), last))
    train_shard = records.shard_path(str(tmp_path / "killed"), "train", last)
    os.replace(train_shard, train_shard + ".tmp")
    with open(train_shard + ".tmp", "r+b") as f:
        f.truncate(100)
    os.remove(records.shard_path(str(tmp_path / "killed"), "eval", last))
    os.remove(os.path.join(tmp_path / "killed", records.META_FILE))
    resumed = prepare(killed, num_workers=2, progress=False)
    assert resumed["chunks_reused"] == meta["chunks"] - 1
    names = sorted(f for f in os.listdir(tmp_path / "full") if f != records.META_FILE)
    assert names == sorted(f for f in os.listdir(tmp_path / "killed")
                           if f != records.META_FILE and not f.endswith(".tmp"))
    for name in names:
        assert (tmp_path / "full" / name).read_bytes() == (tmp_path / "killed" / name).read_bytes()
    assert {**resumed, "chunks_reused": 0} == {**meta, "chunks_reused": 0}
