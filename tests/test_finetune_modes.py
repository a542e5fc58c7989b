"""Fine-tuning asks the input mode (kjax/inputs) for its model
arrays and its positions, so every mode fine-tunes — multi-hot (UKnowBERT:
one position per morpheme), merged (SHAKE 6), shared positions (SHAKE 5)
and one-hot — with token labels moved to the mode's positions and
predictions brought back to characters."""
import json

import numpy as np
import pytest

from conftest import tiny_config
from kjax.finetune.bio import tags_to_spans, token_to_char_tags
from kjax.finetune.experiment import finetune_settings, make_tuner
from kjax.finetune.features import make_batch
from kjax.finetune.heads import model_inputs
from kjax.finetune.ner import token_predictions
from kjax.inputs import MODES

SEGMENT_LOSS = {"train.mlm_loss": "eq9"}
SCHEME = {"onehot": "morph-sp", "shared_position": "morph-sp", "merged": "morph-sp",
          "multihot": "multihot"}
# Entities are whole morphemes (names, cities), so they survive any mode's positions.
NER_ROWS = [{"text": "철수가 서울에서 밥을 먹었다", "entities": [[0, 2, "PS"], [4, 6, "LC"]]},
            {"text": "영희는 부산에 갔다", "entities": [[0, 2, "PS"], [4, 6, "LC"]]},
            {"text": "나는 학교에서 철수를 만났다", "entities": [[8, 10, "PS"]]},
            {"text": "부산의 영희가 웃었다", "entities": [[0, 2, "LC"], [4, 6, "PS"]]}] * 4


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    return train_tokenizers(tmp_path_factory)


def train_tokenizers(tmp_path_factory):
    """A morph-sp and a multi-hot vocabulary trained on the demo corpus."""
    from kjax.tokens.factory import open_tokenizer, train_tokenizer
    out = {}
    for scheme in ("morph-sp", "multihot"):
        tmp = tmp_path_factory.mktemp(scheme)
        config = tiny_config(tmp, **{"tokenizer.scheme": scheme})
        train_tokenizer(config)
        out[scheme] = tmp, open_tokenizer(config)   # multihot: its own vocabulary size
    return out


def mode_config(tokenizers, mode: str, **extra):
    tmp, tokenizer = tokenizers[SCHEME[mode]]
    losses = SEGMENT_LOSS if "ce" not in MODES[mode].mlm_losses else {}
    config = tiny_config(tmp, **{"tokenizer.scheme": SCHEME[mode], "model.input_mode": mode,
                                 "data.mask_unit": "morpheme", **losses,
                                 "model.vocab_size": tokenizer.vocab_size, **extra})
    return config, tokenizer


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                    encoding="utf-8")
    return str(path)


FT = ["finetune.max_seq_len=32", "finetune.batch_size=16", "finetune.epochs=1",
      "finetune.split=(0.5,0.5)"]


@pytest.mark.parametrize("mode", list(SCHEME))
def test_ner_labels_follow_the_modes_positions_and_come_back(tokenizers, tmp_path, mode):
    """Gold tags → tokens → the mode's positions → back to characters is the
    identity; the model's output has one row per position of the mode."""
    config, tokenizer = mode_config(tokenizers, mode)
    tuner = make_tuner(config, finetune_settings(FT), "ner",
                       write_jsonl(tmp_path / "ner.jsonl", NER_ROWS), init="none",
                       tokenizer=tokenizer)
    feats, names = tuner.data.features["train"], tuner.data.label_names
    for row, ex in enumerate(tuner.data.examples["train"]):
        tokens = token_predictions(feats, row, np.maximum(feats.labels[row], 0), names)
        spans = feats.token_spans[row]
        back = token_to_char_tags(feats.texts[row], [names[t] for t in tokens][1:1 + len(spans)],
                                  spans)
        gold, got = tags_to_spans(ex.char_tags), tags_to_spans(back)
        assert len(got) == len(gold), (mode, ex.text_a, got)
        for (s, e, kind), (s2, e2, kind2) in zip(gold, got):
            # merged: 철수+를 is one position, so the entity widens to its
            # postposition (never past the eojeol); other modes keep it exactly
            assert (s2, kind2) == (s, kind) and e <= e2, (mode, ex.text_a, got)
            assert e2 == e or (mode == "merged" and " " not in ex.text_a[e:e2])
    n_tokens, n_positions = feats.lengths, feats.inputs["attention_mask"].sum(1)
    if MODES[mode].positions_are_tokens:
        assert (n_positions == n_tokens).all()
    else:                                            # a position sums several tokens
        assert (n_positions < n_tokens).all(), (mode, n_positions, n_tokens)
    batch = make_batch(feats, np.arange(4))
    params = tuner.init_state(0)["params"]
    logits = np.asarray(tuner.model(0.0, True).apply({"params": params},
                                                     **model_inputs(batch, tuner.mode)))
    assert logits.shape == (4, 32, len(names)) and np.isfinite(logits).all()
    shaken = make_batch(feats, np.arange(4), tuner.shake_cfg, (0, 0))   # POS B, bf ≠ 0
    b = np.asarray(shaken["shake"], np.float32)
    # merged (SHAKE 6) holds each postposition with its substantive in one
    # position, so the pairs B would boost lie inside positions: B is empty
    assert b.any() != (mode == "merged"), mode
    for row in range(4):                             # B lies over the mode's positions
        live = np.flatnonzero(b[row].any(axis=1) | b[row].any(axis=0))
        assert not len(live) or live.max() < n_positions[row], (mode, live, n_positions[row])
    if b.any():   # a large bf: at random init the scores are tiny, and so is |score ⊙ B| · bf
        out = tuner.model(50.0, True).apply({"params": params},
                                            **model_inputs(shaken, tuner.mode))
        assert np.abs(np.asarray(out) - logits).max() > 1e-5      # B reaches the model


def ner_rows(n, seed):
    """Names (PS) and cities (LC), each a whole morpheme, among filler words."""
    rng, rows = np.random.default_rng(seed), []
    filler = ["그리고", "법", "제", "조", "항", "및", "등", "수", "있다", "국민", "정부"]
    names = {"PS": ["철수", "영희", "민수"], "LC": ["서울", "부산", "대구"]}
    for _ in range(n):
        words, spans, text = list(rng.choice(filler, 6)), [], ""
        for kind in ("PS", "LC"):
            words.insert(int(rng.integers(len(words) + 1)), "@" + kind)
        for w in words:
            text += " " if text else ""
            if w.startswith("@"):
                name = str(rng.choice(names[w[1:]]))
                spans.append([len(text), len(text) + len(name), w[1:]])
                w = name + "가"
            text += w
        rows.append({"text": text, "entities": spans})
    return rows


@pytest.mark.slow
def test_a_tiny_multihot_model_learns_ner(tokenizers, tmp_path):
    """A multi-hot model learns NER (labels on morphemes)."""
    from kjax.finetune.run import run_one
    config, tokenizer = mode_config(tokenizers, "multihot")
    ft = finetune_settings(["finetune.max_seq_len=32", "finetune.batch_size=16",
                            "finetune.epochs=6", "finetune.learning_rate=1e-2",
                            "finetune.patience=0", "finetune.classifier_dropout=0.0",
                            "finetune.checkpoint_every=1000"])
    tuner = make_tuner(config, ft, "ner", write_jsonl(tmp_path / "train.jsonl", ner_rows(64, 0)),
                       write_jsonl(tmp_path / "dev.jsonl", ner_rows(32, 1)), init="none",
                       tokenizer=tokenizer)
    result = run_one(tuner, 0, 0.0, [0.0], str(tmp_path / "run"), progress=False)
    dev, baseline = result["results"]["+0"]["dev"], result["baseline"]["dev"]
    assert baseline["entity_f1"] == 0.0 and dev["entity_f1"] >= 0.8, dev
