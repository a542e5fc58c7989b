"""UKnowBERT end to end: the METHODS Table 22 small variants train on the CPU
mesh with a falling loss and report their per-head metrics."""
import os

import pytest

from conftest import ROOT, tiny_overrides
from kjax.config import load_config, platform_defaults
from kjax.pretrain.prepare import prepare
from kjax.tokens.factory import open_tokenizer, train_tokenizer
from kjax.train.metrics import read_metrics
from kjax.pretrain.trainer import train

VARIANTS = {  # file → metrics its objectives must log
    "bert_s": {"nsp_loss"},
    "mbert_m": set(),
    "mbert_s": {"nsp_loss"},
    "uknowbert_r": {"verb_accuracy"},
    "uknowbert_w": {"hypernym_top1", "hypernym_top5", "sense_cosine"},
    "uknowbert_s": {"hypernym_top1", "sense_cosine", "verb_accuracy"},
}


def variant_config(name, tmp, vocab=None):
    extra = {"data.max_predictions_per_seq": 10, "train.num_steps": 6,
             "train.learning_rate": 3e-3, "train.log_every": 5}
    if vocab:
        extra["model.vocab_size"] = vocab
    scheme = "multihot" if name not in ("bert_s",) else "morphsp"
    overrides = tiny_overrides(f"{tmp}/{scheme}", **extra)
    # resolved for this platform, as a verb loads it: steps are built from it directly
    return platform_defaults.resolved(load_config(
        os.path.join(ROOT, "tpu_configs", f"{name}.py"),
        overrides + ["--config.data.corpus=konlpy", "--config.data.document_per_file=True"]))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("uknow")
    vocab = {}
    for name in ("bert_s", "mbert_s"):  # one morph-sp and one multi-hot data set
        config = variant_config(name, tmp)
        train_tokenizer(config)
        vocab[name] = open_tokenizer(config).vocab_size
        prepare(variant_config(name, tmp, vocab[name]), progress=False)
    return tmp, vocab


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_table22_variant_trains(name, data, tmp_path):
    tmp, vocab = data
    config = variant_config(name, tmp, vocab["bert_s" if name == "bert_s" else "mbert_s"])
    train(config, str(tmp_path / "run"), progress=False)
    rows = [r for r in read_metrics(str(tmp_path / "run")) if r["split"] == "train"]
    assert rows[-1]["loss"] < rows[0]["loss"]
    assert VARIANTS[name] <= set(rows[-1])
    heads = {"hypernym_top1", "sense_cosine", "verb_accuracy"} - VARIANTS[name]
    assert not heads & set(rows[-1])  # objectives a variant lacks are really off
    assert ("nsp_loss" in rows[-1]) == (config.train.nsp_weight > 0)   # NSP too
