"""The input-mode registry (kjax/inputs): every mode keeps the same contract
(loader arrays → model inputs → objectives), and the consumers that used to
forget modes now ask them: fine-tuning runs a shared-position model with its
shared positions, export refuses what transformers cannot run instead of
writing a plain BERT, and analysis runs a merged model on merged positions."""
import jax
import flax.linen as nn
import numpy as np
import pytest

from conftest import DEMO_CONFIG, tiny_config, tiny_overrides
from kjax import objectives
from kjax.cli import main
from kjax.errors import KjaxError
from kjax.examples.pairs import assemble
from kjax.inputs import MODES, input_mode
from kjax.train.state import dummy_inputs, make_model

TEXT = "나는 학교에서 밥을 먹었다"
SEGMENT_LOSS = {"train.mlm_loss": "eq9"}


@pytest.fixture(scope="module")
def morph_sp(tmp_path_factory):
    """A trained morph-sp vocabulary (POS tags: every mode but multihot runs on it)."""
    from kjax.tokens.factory import load_tokenizer, train_tokenizer
    tmp = tmp_path_factory.mktemp("inputs")
    config = tiny_config(tmp, **{"tokenizer.scheme": "morph-sp"})
    train_tokenizer(config)
    return tmp, load_tokenizer(config)


def mode_config(tmp, mode: str, **extra):
    losses = SEGMENT_LOSS if "ce" not in MODES[mode].mlm_losses else {}
    return tiny_config(tmp, **{"tokenizer.scheme": "morph-sp", "model.input_mode": mode,
                               "data.mask_unit": "morpheme", **losses, **extra})


def example(tokenizer) -> dict:
    """TEXT / "밥을 먹었다" as a prepared record (A [SEP] B), unmasked."""
    a, b = tokenizer.encode(TEXT), tokenizer.encode("밥을 먹었다")
    return {**assemble(a, b, 0, (0, 0)), "nsp_label": np.int32(0)}


@pytest.mark.parametrize("name", [m for m in MODES if "morph-sp" in MODES[m].schemes])
def test_every_mode_feeds_the_model_and_the_objectives(morph_sp, name):
    """What a new mode gets checked for free: its loader arrays, its model
    inputs and its init inputs fit together and give a finite loss."""
    tmp, tokenizer = morph_sp
    config = mode_config(tmp, name)
    mode = input_mode(config)
    rows = [mode.to_model_inputs(example(tokenizer), config, np.random.default_rng(seed), True,
                                 {}, False) for seed in (0, 1)]
    batch = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    kwargs = {**mode.model_inputs(batch), **objectives.model_inputs(batch)}
    args, init_kwargs = dummy_inputs(config, 2)
    assert set(init_kwargs) - {"knowledge_positions"} <= set(kwargs)   # init sees what runs
    model = make_model(config, deterministic=True)
    params = nn.meta.unbox(jax.jit(model.init)(jax.random.key(0), *args,
                                               **init_kwargs)["params"])
    out = model.apply({"params": params}, **kwargs)
    loss, metrics = objectives.pretraining_loss(out, batch, config)
    assert np.isfinite(float(loss)) and {"mlm_loss", "nsp_loss"} <= set(metrics)
    positions, groups = mode.positions(example(tokenizer))
    assert len(groups) == len(positions["input_ids"]) <= len(example(tokenizer)["input_ids"])


def pair_files(tmp):
    import json
    rows = [{"text": f"철수가 {i}번 학교에서 밥을 먹었다", "text_b": "영희는 집에 갔다",
             "label": "ab"[i % 2]} for i in range(16)]
    path = tmp / "pairs.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                    encoding="utf-8")
    return str(path)


def test_shared_position_fine_tuning_uses_the_shared_positions(morph_sp, tmp_path):
    """Fine-tuning runs a shared-position model on its shared positions, not 0..s-1."""
    from kjax.finetune.experiment import finetune_settings, make_tuner
    from kjax.finetune.features import make_batch
    from kjax.finetune.heads import model_inputs
    from kjax.finetune.run import run_one
    tmp, tokenizer = morph_sp
    config = mode_config(tmp, "shared_position")
    ft = finetune_settings(["finetune.max_seq_len=32", "finetune.batch_size=16",
                            "finetune.epochs=1", "finetune.split=(0.5,0.5)"])
    tuner = make_tuner(config, ft, "pair", pair_files(tmp_path), init="none",
                       tokenizer=tokenizer)
    feats = tuner.data.features["train"]
    batch = make_batch(feats, np.arange(len(feats)))
    ids, plain = batch["position_ids"], np.arange(32)
    assert (ids != plain).any(axis=1).all()            # every row has a postposition
    row = feats.input_ids[0].tolist()
    ga = row.index(tokenizer.token_to_id("가"))         # 철수/가: 가 takes 철수's position
    assert ids[0, ga] == ga - 1 and (ids[0, :ga] == plain[:ga]).all()
    model = tuner.model(0.0, True)
    params = tuner.init_state(0)["params"]
    shared = model.apply({"params": params}, **model_inputs(batch))
    unshared = model.apply({"params": params}, **model_inputs(
        {k: v for k, v in batch.items() if k != "position_ids"}))
    change = np.abs(np.asarray(shared) - np.asarray(unshared)).max() / np.abs(shared).max()
    assert change > 1e-3, change                       # the ids reach the model
    result = run_one(tuner, 0, 0.0, [0.0], str(tmp_path / "run"), progress=False)
    assert result["steps"] == 1 and "dev" in result["results"]["+0"]


def test_fine_tuning_refuses_a_mode_that_says_so_in_one_line(morph_sp, tmp_path, monkeypatch):
    """Every registered mode fine-tunes (tests/test_finetune_modes.py);
    a new mode that sets finetune_supported = False is refused before any data is read."""
    from kjax.finetune.experiment import finetune_settings, make_tuner
    from kjax.inputs import onehot
    tmp, _ = morph_sp
    refused = type("Refused", (type(onehot.MODE),), {"finetune_supported": False})()
    monkeypatch.setattr(refused, "name", "onehot")
    monkeypatch.setitem(MODES, "onehot", refused)
    config = mode_config(tmp, "onehot")
    with pytest.raises(KjaxError, match=r"model.input_mode='onehot': `kjax finetune` cannot "
                                        r"run this input mode yet") as error:
        make_tuner(config, finetune_settings(), "pair", str(tmp_path / "not-read.jsonl"))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("name", ["merged", "shared_position"])
def test_export_refuses_a_mode_transformers_would_run_wrongly(morph_sp, tmp_path, capsys,
                                                             name):
    """A merged model is not written as a plain BERT, whose self-check would
    pass by comparing BERT with BERT."""
    tmp, _ = morph_sp
    extra = {"tokenizer.scheme": "morph-sp", "model.input_mode": name,
             "data.mask_unit": "morpheme",
             **(SEGMENT_LOSS if "ce" not in MODES[name].mlm_losses else {})}
    out = tmp_path / "hf"
    assert main(["export", "--config", DEMO_CONFIG, "--workdir", str(tmp_path / "w"), "--out",
                 str(out), *tiny_overrides(str(tmp), **extra)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"model.input_mode='{name}': `kjax export` cannot write" in err
    assert not out.exists()


def test_analysis_runs_a_merged_model_on_merged_positions(morph_sp):
    """`kjax analyze` feeds a merged model its merged positions, not one token each."""
    from kjax.analysis.inputs import encode_text, model_batch
    from kjax.analysis.report import analysis_step
    tmp, tokenizer = morph_sp
    config = mode_config(tmp, "merged")
    item = encode_text(tokenizer, TEXT, 64, input_mode(config))
    tokens = encode_text(tokenizer, TEXT, 64)
    assert item.length == tokens.length - 3 and "학교에서" in item.labels   # 는 에서 을 joined
    batch = model_batch([item], 0, 16, config, shaken=False)
    owner = batch["multihot"]["token_position"][0]
    assert owner.max() == item.length - 1 and (np.bincount(owner[owner >= 0]) > 1).sum() == 3
    model = make_model(config, deterministic=True)
    args, kwargs = dummy_inputs(config)
    params = nn.meta.unbox(jax.jit(model.init)(jax.random.key(0), *args, **kwargs)["params"])
    out = jax.device_get(analysis_step(config, (0.0, 0.0))(params, batch))
    alpha = out["alpha"][:, 0]                        # [layers, heads, q, k]
    np.testing.assert_allclose(alpha[..., :item.length, :item.length].sum(-1), 1, rtol=1e-5)
    shared = mode_config(tmp, "shared_position")
    item = encode_text(tokenizer, TEXT, 64, input_mode(shared))
    ids = model_batch([item], 0, 16, shared, shaken=False)["position_ids"][0]
    assert (ids[:item.length] != np.arange(item.length)).sum() == 3   # 는 에서 을


def eojeol_mode():
    """docs/ARCHITECTURE.md's worked example of a new input mode (kept here so
    the page stays true): one position per eojeol, its input the sum of its
    tokens' embeddings."""
    from kjax.inputs.segments import SegmentMode

    class EojeolMode(SegmentMode):
        name = "eojeol"
        embedding = "segment_sum"               # a path the model already has
        schemes = ("sentencepiece", "morph-sp", "multihot")   # all give eojeol ids
        export_format = None                    # transformers cannot sum positions: refused
        finetune_supported = False              # refused until labels follow eojeol positions

        def units(self, example: dict) -> dict:
            n = len(example["input_ids"])
            return {**example, "morph_ids": np.asarray(example["word_ids"])[:n],
                    "inpos": np.zeros(n, np.int32)}
    return EojeolMode()


def test_the_worked_example_of_a_new_input_mode_runs(morph_sp, monkeypatch):
    tmp, tokenizer = morph_sp
    monkeypatch.setitem(MODES, "eojeol", eojeol_mode())     # its registration line
    config = mode_config(tmp, "eojeol", **{"data.mask_unit": "eojeol"})
    objectives.check_config(config)
    test_every_mode_feeds_the_model_and_the_objectives(morph_sp, "eojeol")
    ex = example(tokenizer)
    positions, groups = MODES["eojeol"].positions(ex)
    assert len(groups) == 9          # [CLS] 나는 학교에서 밥을 먹었다 [SEP] 밥을 먹었다 [SEP]
    with pytest.raises(KjaxError, match="cannot write this input mode"):
        MODES["eojeol"].export_check(config)


@pytest.mark.parametrize("mode", ["onehot", "multihot"])
def test_the_objective_registry_is_bit_identical_to_the_hand_composition(tmp_path, mode):
    """The steps sum kjax/objectives; the loss and every metric equal the
    explicit MLM + w·NSP + Σ w·knowledge of kjax.losses.pretraining, bit for bit."""
    import jax.numpy as jnp
    from kjax.config import defaults
    from loss_oracle import pretraining_loss
    rng = np.random.default_rng(3)
    b, p, v, k, s, n = 2, 3, 11, 4, 6, 2
    config = defaults()
    config.train.nsp_weight = 0.3
    outputs = {"mlm_logits": rng.normal(size=(b, p, v)), "nsp_logits": rng.normal(size=(b, 2))}
    batch = {"mlm_weights": np.asarray([[1, 1, 0], [1, 0, 0]], np.float32),
             "nsp_labels": np.asarray([0, 1]), "nsp_weights": np.ones(b, np.float32)}
    if mode == "onehot":
        batch["mlm_ids"] = rng.integers(0, v, (b, p))
        weights = {"hypernym": 0.0, "sense": 0.0, "verb": 0.0}
    else:
        config.model.input_mode, config.train.mlm_loss = "multihot", "eq9"
        weights = {"hypernym": 0.5, "sense": 2.0, "verb": 0.25}
        config.knowledge.update(hypernym_weight=0.5, sense_weight=2.0, verb_weight=0.25)
        outputs.update(hyp_logits=rng.normal(size=(b, n, v)), sense_pred=rng.normal(size=(b, n, 3)),
                       verb_logits=rng.normal(size=(b, s, s)))
        batch.update(mlm_target_ids=rng.integers(0, v, (b, p, k)),
                     mlm_target_mask=rng.random((b, p, k)) < 0.6,
                     hyp_targets=rng.integers(0, v, (b, n, k)), hyp_target_mask=np.ones((b, n, k), bool),
                     hyp_mask=np.ones((b, n), bool), sense_vectors=rng.normal(size=(b, n, 3)),
                     sense_mask=np.asarray([[1, 0], [1, 1]], bool),
                     verb_targets=np.where(rng.random((b, s)) < 0.5, rng.integers(0, s, (b, s)), -1))
    outputs = {key: jnp.asarray(x, jnp.float32) for key, x in outputs.items()}
    batch = {key: jnp.asarray(x) for key, x in batch.items()}
    loss, metrics = objectives.pretraining_loss(outputs, batch, config)
    want_loss, want = pretraining_loss(outputs, batch, 0.3, config.train.mlm_loss, weights)
    assert list(metrics) == list(want)
    for key in want:
        np.testing.assert_array_equal(np.asarray(metrics[key]), np.asarray(want[key]), key)
    np.testing.assert_array_equal(np.asarray(loss), np.asarray(want_loss))
