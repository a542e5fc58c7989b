"""One text normalisation (kjax/text/normalize.py) for every path a text
takes: inspect, the corpus reader (tokenizer training, prepare), fine-tuning
and the exported tokenizer.json give the same ids; `kjax inspect --file`
inspects a file of texts in one process, as JSON Lines."""
import json

from transformers import AutoTokenizer

from conftest import DEMO_CONFIG, tiny_config, tiny_overrides
from kjax.cli import main
from kjax.cli.inspect import inspect_text
from kjax.export import tokenizer_export as tx
from kjax.finetune.features import Encoder
from kjax.finetune.readers import Example
from kjax.finetune.registry import finetune_task
from kjax.text.corpus import CorpusStats, clean_line
from kjax.text.normalize import normalize_text
from kjax.tokens.factory import open_tokenizer

WIDE = "ＡＢＣ\u3000전각 문자와\u00a0공백\t끝"   # full-width letters and odd spaces


def test_normalize_text_is_one_for_one():
    text, replaced = normalize_text(WIDE)
    assert text == "ＡＢＣ 전각 문자와 공백 끝" and replaced == 2   # tab is not news
    nfd = "\u1112\u1161\u11ab"   # 한 in jamo
    assert normalize_text(nfd + "\ud800x") == ("한\ufffdx", 1)
    assert normalize_text("Ａ") == ("Ａ", 0)   # full-width letters are kept (not NFKC)


def test_every_path_gives_the_same_ids(prepared, tmp_path):
    config = tiny_config(prepared)
    tok = open_tokenizer(config)
    inspected = [r["id"] for r in inspect_text(WIDE, config, tok)["tokens"]]
    read = clean_line(WIDE.encode("utf-8"), CorpusStats(), "t:1")     # prepare's corpus reader
    assert tok.encode(read)["ids"].tolist() == inspected
    assert tok.encode(WIDE)["ids"].tolist() == inspected               # any caller of encode
    classify = finetune_task("classify")
    features = Encoder(tok, classify, ["a"], 64).encode([Example("0", WIDE, label="a")])
    n = int(features.lengths[0])
    assert features.input_ids[0, 1:n - 1].tolist() == inspected        # fine-tuning
    tx.export_sentencepiece(str(prepared / "tok" / "sp.model"), str(tmp_path), 64)
    hf = AutoTokenizer.from_pretrained(tmp_path)
    assert hf(WIDE, add_special_tokens=False)["input_ids"] == inspected
    assert tok.encode("ＡＢＣ 전각 문자와 공백 끝")["ids"].tolist() == inspected   # plain spaces


def test_inspect_a_file_writes_json_lines(prepared, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("나는 학교에 갔다\n\n" + WIDE + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    code = main(["inspect", "--file", str(texts), "--out", str(out), "--config", DEMO_CONFIG,
                 *tiny_overrides(str(prepared))])
    assert code == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["line"] for r in rows] == [1, 3]
    assert rows[1]["analysed_text"] == normalize_text(WIDE)[0]
    assert {"morphemes", "tokens", "shaking"} <= set(rows[0]["sections"])
    assert "inspected 2 texts" in capsys.readouterr().out
    assert main(["inspect", "가", "--file", str(texts), "--config", DEMO_CONFIG]) == 2
