"""`kjax fill-mask` (kjax/analysis/fill_mask.py): how a text with [MASK]
becomes the model's input, how answers read, its probabilities against the
model run by hand, the check set's hit rule, and its one-line errors."""
import json
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from conftest import tiny_config
from kjax.analysis import fill_mask as fm
from kjax.cli import main
from kjax.errors import KjaxError
from kjax.tokens.sentencepiece import CLS, MASK, SEP, WORD_START


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Four steps of the tiny model on the fixture corpus: (config, workdir)."""
    from kjax.pretrain.prepare import prepare
    from kjax.pretrain.trainer import train
    from kjax.tokens.factory import train_tokenizer
    tmp = tmp_path_factory.mktemp("fill_mask")
    config = tiny_config(tmp, **{"train.num_steps": 4, "train.checkpoint_every": 4})
    train_tokenizer(config, progress=False)
    prepare(config, progress=False)
    train(config, str(tmp / "run"), progress=False)
    return tmp, str(tmp / "run")


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_masks_are_kept_whole_and_a_spaced_mask_takes_the_word_start(trained):
    from kjax.tokens.factory import open_tokenizer
    tmp, _ = trained
    tokenizer = open_tokenizer(tiny_config(tmp))
    ids, positions = fm.encode_masked(tokenizer, "국민은 [MASK] 평등하다.", 64)
    assert ids[0] == CLS and ids[-1] == SEP and [int(ids[p]) for p in positions] == [MASK]
    raw = [int(i) for i in tokenizer.encode("국민은 [MASK] 평등하다.")["ids"]]
    if tokenizer.id_to_token(raw[raw.index(MASK) - 1]) == WORD_START:
        assert len(ids) == len(raw) + 1   # [CLS] and [SEP] in, the bare ▁ before [MASK] out
    assert tokenizer.id_to_token(int(ids[positions[0] - 1])) != WORD_START
    ids, positions = fm.encode_masked(tokenizer, "국민[MASK] 법 앞에 [MASK][MASK]다", 64)
    assert len(positions) == 3 and positions[2] == positions[1] + 1
    assert fm.mask_starts_word("국민[MASK] 법 앞에 [MASK][MASK]다") == [False, True, False]
    assert fm.mask_starts_word("[MASK]은 평등하다") == [True]
    with pytest.raises(KjaxError, match=r"no \[MASK\] in '국민은 평등하다'"):
        fm.encode_masked(tokenizer, "국민은 평등하다", 64)
    with pytest.raises(KjaxError, match="the model takes 6"):
        fm.encode_masked(tokenizer, "대한민국은 민주공화국이다 [MASK] 모든 권력은", 8)


def test_answers_read_as_text():
    assert fm.readable(WORD_START + "학교") == ("학교", True)
    assert fm.readable(WORD_START) == ("", True)
    assert fm.readable("에") == ("에", False)
    assert fm.fill_text("학교[MASK] 갔다", 0, "에", False) == "학교에 갔다"
    assert fm.fill_text("나는 [MASK] 갔다", 0, "학교", True) == "나는 학교 갔다"
    assert fm.fill_text("학교[MASK] 갔다", 0, "집", True) == "학교 집 갔다"
    assert fm.fill_text("[MASK]는 [MASK] 갔다", 1, "", True) == "[MASK]는 ␣ 갔다"
    boundary = fm.Answer(WORD_START, "", True, 0.5, "")
    assert fm.shown(boundary) == fm.WORD_BOUNDARY
    accepted = ["에", "로"]
    assert fm.is_hit(fm.Answer("에", "에", False, 0.1, ""), accepted, starts_word=False)
    assert not fm.is_hit(fm.Answer("▁에", "에", True, 0.1, ""), accepted, starts_word=False)
    assert not fm.is_hit(boundary, accepted, starts_word=True)


def test_probabilities_are_the_mlm_head_run_by_hand(trained, capsys):
    """The verb's top-k against BertForPreTraining over the whole sequence
    (mlm_positions=None) with the restored parameters, softmax by numpy."""
    from kjax.checkpoint.restore import restore_params
    from kjax.train.state import make_model
    tmp, run = trained
    config = tiny_config(tmp)
    text = "모든 국민은 법 앞에 [MASK]하다. 국민[MASK] 권리"
    assert main(["fill-mask", "--workdir", run, text, "--top-k", "4", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["step"] == 4 and len(printed["masks"]) == 2

    filler = fm.FillMask(config, run)
    ids, positions = fm.encode_masked(filler.tokenizer, text, config.data.max_seq_len)
    params, _ = restore_params(config, run)
    model = make_model(config, deterministic=True)
    logits = model.apply({"params": params}, ids[None], np.zeros_like(ids)[None],
                         np.ones_like(ids)[None])["mlm_logits"][0]
    for p, found in zip(positions, printed["masks"]):
        row = np.asarray(jax.nn.softmax(np.asarray(logits[p], np.float64)))
        top = np.argsort(-row)[:4]
        assert [a["piece"] for a in found] == [filler.tokenizer.id_to_token(int(i)) for i in top]
        np.testing.assert_allclose([a["probability"] for a in found], row[top], rtol=1e-4)
    assert all(fm.MASK_TEXT not in a["filled"] or a is not None for a in printed["masks"][0])
    assert printed["masks"][1][0]["filled"].startswith("모든 국민은 법 앞에 [MASK]하다. 국민")

    assert main(["fill-mask", "--workdir", run, text]) == 0
    table = capsys.readouterr().out
    assert "[MASK] 2 of 2" in table and "(step 4;" in table and "word boundary" in table


def test_check_set_hit_rates(trained, tmp_path, capsys):
    rows = fm.read_check_set()   # the shipped everyday sentences
    assert len(rows) >= 30 and all(s.count("[MASK]") == 1 and a for s, a in rows)
    tmp, run = trained
    check = tmp_path / "check.tsv"
    check.write_text("# a comment\n국민[MASK] 권리\t의|은\n모든 [MASK] 평등하다\t국민\n",
                     encoding="utf-8")
    filler = fm.FillMask(tiny_config(tmp), run)
    result = fm.run_check(filler, fm.read_check_set(str(check)), top_k=600)
    assert result["sentences"] == 2 and result["top1"] <= result["topk"]
    # with k = the whole vocabulary every answer the vocabulary holds is found, at its rank
    for row in result["rows"]:
        ranks = [k + 1 for k, a in enumerate(row["answers"])
                 if fm.is_hit(fm.Answer(**a), row["accepted"],
                              fm.mask_starts_word(row["sentence"])[0])]
        assert row["hit_rank"] == (ranks[0] if ranks else None)
    assert main(["fill-mask", "--workdir", run, "--check", str(check), "--top-k", "3"]) == 0
    assert "top-3" in capsys.readouterr().out
    check.write_text("국민의 권리\t의\n", encoding="utf-8")
    with pytest.raises(KjaxError, match=r"check.tsv:1: a check line is a sentence with one"):
        fm.read_check_set(str(check))


def test_one_line_errors(trained, tmp_path, capsys):
    tmp, run = trained
    ov = []   # the run's recorded config
    assert main(["fill-mask", "--workdir", run, "국민은 평등하다", *ov]) == 2
    assert "no [MASK] in '국민은 평등하다'" in one_line_error(capsys)
    assert main(["fill-mask", "--workdir", run, *ov]) == 2
    assert "give one of a text, --file TEXTS or --check" in one_line_error(capsys)
    assert main(["fill-mask", "--workdir", run, "x[MASK]", "--top-k", "0", *ov]) == 2
    assert "--top-k 0" in one_line_error(capsys)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    assert main(["fill-mask", "--workdir", run, "--file", str(empty), *ov]) == 2
    assert "no texts" in one_line_error(capsys)
    empty.write_text("국민[MASK] 권리\n\n국민의 권리\n", encoding="utf-8")
    assert main(["fill-mask", "--workdir", run, "--file", str(empty), *ov]) == 2
    assert "empty.txt:3: no [MASK] in '국민의 권리'" in one_line_error(capsys)
    empty.write_text("국민[MASK] 권리\n\n모든 [MASK] 평등하다\n", encoding="utf-8")
    assert main(["fill-mask", "--workdir", run, "--file", str(empty), "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["text"] for x in lines] == ["국민[MASK] 권리", "모든 [MASK] 평등하다"]
    assert all(len(x["masks"]) == 1 and len(x["masks"][0]) == 5 for x in lines)
    assert main(["fill-mask", "--workdir", str(tmp_path / "none"), "x[MASK]", *ov]) == 2
    one_line_error(capsys)
    config = tiny_config(tmp, **{"model.input_mode": "merged"})
    with pytest.raises(KjaxError, match="input_mode='merged' puts several tokens"):
        fm.check_supported(config, SimpleNamespace(scheme="sentencepiece"))
    config = tiny_config(tmp, **{"model.input_mode": "shared_position"})
    with pytest.raises(KjaxError, match="input_mode='shared_position' numbers them from morph"):
        fm.check_supported(config, SimpleNamespace(scheme="sentencepiece"))
    with pytest.raises(KjaxError, match="tokenizer.scheme='sentencepiece' \\(this run's is "
                                        "'morph-sp'"):
        fm.check_supported(tiny_config(tmp), SimpleNamespace(scheme="morph-sp"))
