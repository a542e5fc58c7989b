"""RoBERTa-shaped imports (type_vocab_size 1): a sentence pair's second
sentence has token type 1 in kjax's rows, but the table has one row. The
model gives every token segment 0, as RoBERTa's tokenizer does (its pair
type ids are all 0), and the imported tokenizer's pairs are segment 0 too, so
the exported model (a one-row table in PyTorch) reads what its tokenizer
gives. A tiny random RobertaModel built by transformers, offline."""
import json
import os

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer, RobertaConfig, RobertaModel

from conftest import DEMO_CONFIG
from kjax.config import load_config, platform_defaults
from kjax.checkpoint.restore import restore_params
from kjax.export import hf_export as hx
from kjax.export.checkpoint_export import export_checkpoint
from kjax.export import hf_import as hi
from kjax.finetune.features import Encoder
from kjax.finetune.readers import Example
from kjax.finetune.registry import finetune_task
from kjax.model.config import EncoderConfig
from kjax.tokens.factory import load_tokenizer
from test_import_tokenizer import KOREAN, wordpiece_folder


def roberta_folder(path) -> RobertaModel:
    """A bare RobertaModel (no `roberta.` prefix, a pooler) with one
    token-type row, beside a vocabulary whose [PAD] is id 0 (so positions
    start at 1, RoBERTa's padding_idx + 1)."""
    n = wordpiece_folder(path, with_json=True)
    torch.manual_seed(3)
    model = RobertaModel(RobertaConfig(
        vocab_size=n, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=41, type_vocab_size=1, pad_token_id=0,
        layer_norm_eps=1e-5))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(path)
    return model.eval()


def test_roberta_pairs_match_transformers_and_export_keeps_one_type_row(tmp_path):
    model = roberta_folder(tmp_path / "hf")
    report = hi.import_hf(str(tmp_path / "hf"), str(tmp_path / "w"), load_config(DEMO_CONFIG))
    config = platform_defaults.resolved(load_config(report["config"]))  # as a verb loads it
    assert config.model.type_vocab_size == 1 and report["position_offset"] == 1
    params, _ = restore_params(config, str(tmp_path / "w"))
    enc = EncoderConfig.from_config(config.model)
    feats = Encoder(load_tokenizer(config), finetune_task("pair"), ["x"], 32).encode(
        [Example("a", KOREAN[0], KOREAN[1], "x"), Example("b", KOREAN[3], KOREAN[8], "x")])
    assert feats.token_type_ids.max() == 1          # kjax's rows mark sentence b ...
    inputs = {"input_ids": feats.input_ids, "token_type_ids": feats.token_type_ids,
              "attention_mask": feats.attention_mask}
    got = hx.jax_outputs(params, enc, inputs)
    with torch.no_grad():                            # ... RoBERTa's tokenizer gives them 0
        out = model(input_ids=torch.as_tensor(feats.input_ids).long(),
                    attention_mask=torch.as_tensor(feats.attention_mask).long(),
                    token_type_ids=torch.zeros(feats.input_ids.shape, dtype=torch.long))
    want = {"hidden": out.last_hidden_state.numpy(), "pooled": out.pooler_output.numpy()}
    diffs = hx.max_abs_diffs({k: got[k] for k in want}, want, inputs["attention_mask"])
    assert max(diffs.values()) <= 1e-5, diffs
    # exported back: one token-type row, the same encoder
    export_checkpoint(config, str(tmp_path / "w"), str(tmp_path / "out"))
    with open(os.path.join(tmp_path / "out", "config.json"), encoding="utf-8") as f:
        assert json.load(f)["type_vocab_size"] == 1
    # the exported tokenizer's pairs (BERT's template from vocab.txt gave
    # sentence b type 1: an IndexError in the one-row table) feed the export
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    row = tokenizer([KOREAN[0], KOREAN[3]], [KOREAN[1], KOREAN[8]], padding="max_length",
                    max_length=32, truncation="longest_first", return_token_type_ids=True,
                    return_tensors="pt")
    assert row["input_ids"].tolist() == feats.input_ids.tolist()
    assert row["token_type_ids"].max() == 0
    back = AutoModel.from_pretrained(tmp_path / "out").eval()
    with torch.no_grad():
        again = back(**row)
    real = feats.attention_mask > 0
    np.testing.assert_allclose(again.last_hidden_state.numpy()[real],
                               want["hidden"][real], atol=1e-5)


def test_finetune_pairs_from_an_imported_roberta(tmp_path):
    """`kjax import` → `kjax finetune --task pair` (the reported failure): the
    run trains on pairs with finite losses and scores dev."""
    from kjax.cli import main
    from kjax.train.metrics import read_metrics
    from test_finetune import FT, synthetic, write_jsonl
    roberta_folder(tmp_path / "hf")
    w = str(tmp_path / "w")
    assert main(["import", "--hf", str(tmp_path / "hf"), "--out", w]) == 0
    train = write_jsonl(tmp_path / "train.jsonl", synthetic("pair", 32, 0))
    dev = write_jsonl(tmp_path / "dev.jsonl", synthetic("pair", 16, 1))
    out = str(tmp_path / "ft")
    settings = [x for x in FT if not x.startswith("finetune.epochs")] + ["finetune.epochs=1"]
    assert main(["finetune", "--config", os.path.join(w, "kjax_config.py"), "--init", w,
                 "--task", "pair", "--train", train, "--dev", dev, "--out", out,
                 *[f"--config.{x}" for x in settings]]) == 0
    losses = [r["loss"] for r in read_metrics(out) if r["split"] == "train" and "loss" in r]
    assert losses and np.isfinite(losses).all()
    with open(os.path.join(out, "metrics.json"), encoding="utf-8") as f:
        result = json.load(f)
    assert result["results"]["+0"]["dev"]["accuracy"] is not None


def test_analyze_reads_an_imported_vocabulary(tmp_path, capsys):
    """`kjax analyze` on an imported model: rows in the folder's
    own ids ([CLS]/[SEP] are not kjax's 2/3 here), the norm-based report, and
    --bf refused in one line (an imported vocabulary has no POS pairs)."""
    from kjax.analysis.inputs import encode_text
    from kjax.cli import main
    roberta_folder(tmp_path / "hf")
    w = str(tmp_path / "w")
    assert main(["import", "--hf", str(tmp_path / "hf"), "--out", w]) == 0
    config = load_config(os.path.join(w, "kjax_config.py"))
    tok = load_tokenizer(config)
    assert (tok.special_ids["cls"], tok.special_ids["sep"]) != (2, 3)
    item = encode_text(tok, f"{KOREAN[0]}\t{KOREAN[1]}", 32)
    want = AutoTokenizer.from_pretrained(tmp_path / "hf")(KOREAN[0], KOREAN[1])["input_ids"]
    assert item.example["input_ids"].tolist() == want
    classes = [item.labels[i] for i in np.flatnonzero(item.classes <= 1)]
    assert classes == ["[CLS]", "[SEP]", "[SEP]"]
    texts = tmp_path / "texts.txt"
    texts.write_text(f"{KOREAN[0]}\n{KOREAN[3]}\t{KOREAN[1]}\n", encoding="utf-8")
    out = tmp_path / "analysis"
    args = ["analyze", "--config", os.path.join(w, "kjax_config.py"), "--workdir", w,
            "--texts", str(texts), "--out", str(out)]
    assert main(args) == 0
    capsys.readouterr()
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["texts"]["class_counts"]["[CLS]"] == 2
    assert report["texts"]["class_counts"]["[SEP]"] == 3
    cv = np.asarray(report["runs"]["unshaken"]["fx_norm_cv"]["per_head"], float)
    assert cv.shape == (2, 4) and (cv > 0).all()
    assert main(args + ["--bf", "2", "--out", str(tmp_path / "shaken")]) == 2
    err = capsys.readouterr().err
    assert "tokenizer.scheme='imported' has no POS tags" in err and len(err.splitlines()) == 1
