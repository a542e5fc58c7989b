"""SHAKE's variant 6 (METHODS §1.5): a substantive and its postposition as one
position whose input is the sum of their token embeddings."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kjax.inputs.segments import to_multihot
from kjax.config import apply_override
from kjax.errors import KjaxError
from kjax.model.config import EncoderConfig
from kjax.model.encoder import BertForPreTraining
from kjax.shake.variants import merged_units
from kjax.tokens.sentencepiece import MASK
from test_shake import example_from  # (the analyzer fixture is conftest's)


def test_merged_units_join_each_postposition_to_its_substantive(analyzer):
    ex, forms = example_from(analyzer, "나는 너를 학교에서 보았다", "학생들이 책을 샀다")
    merged = merged_units(ex)
    units = merged["morph_ids"]
    unit_of = lambda f: units[forms.index(f)]  # noqa: E731
    assert unit_of("는") == unit_of("나") and unit_of("를") == unit_of("너")
    assert unit_of("에서") == unit_of("학교") and unit_of("을") == unit_of("책")
    # 학생/들/이: a suffix stands between, so 이 keeps its own position.
    assert len({unit_of("학생"), unit_of("들"), unit_of("이")}) == 3
    assert unit_of("보") != unit_of("었") and (merged["inpos"] == 0).all()
    assert (units[np.asarray(ex["morph_ids"]) < 0] == -1).all()   # specials stay apart
    ids = np.asarray(ex["input_ids"])
    out = to_multihot(merged, ids, np.zeros(0, int), 32, 4, 4)
    n_pos = int(out["attention_mask"].sum())
    assert n_pos == len(forms) - 4                 # 는 를 에서 을 joined their nouns
    token_pos = out["token_position"][:len(ids)]
    assert token_pos[forms.index("는")] == token_pos[forms.index("나")]


def merged_config(tmp_path, **extra):
    from conftest import tiny_config
    return tiny_config(tmp_path, **{"tokenizer.scheme": "morph-sp", "model.input_mode": "merged",
                                    "train.mlm_loss": "eq9", "data.mask_unit": "morpheme",
                                    "data.masked_lm_prob": 0.4, **extra})


def check_no_masked_token_visible(out, ids_before=None):
    """Every prediction position of the model input is masked whole: one
    [MASK] token, or none of its tokens is [MASK] (random / kept, BERT's 20 %)."""
    for slot in np.flatnonzero(out["mlm_weights"] > 0):
        p = out["mlm_positions"][slot]
        tokens = out["token_ids"][out["token_position"] == p]
        assert (tokens == MASK).all() and len(tokens) == 1 or (tokens != MASK).all(), tokens


def test_merged_masking_chooses_whole_merged_positions(analyzer, tmp_path):
    """Masking runs after the merge: masked before it, a masked 학교 merged with
    its visible 에서 would leak 에서 (in the input and among the targets)."""
    from kjax.batches.loader import ToModelInputs
    from kjax.inputs import mask_example
    ex, forms = example_from(analyzer, "나는 너를 학교에서 보았다", "학생들이 새 책을 샀다")
    config = merged_config(tmp_path)
    positions = merged_units(ex)["morph_ids"]
    to_inputs = ToModelInputs(config, dynamic_masking=True)
    seen_merged = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        static = mask_example(ex, config, rng)            # what `prepare` stores
        chosen = set(static["mlm_positions"].tolist())
        for p in np.unique(positions[static["mlm_positions"]]):
            assert set(np.flatnonzero(positions == p).tolist()) <= chosen
        seen_merged += chosen >= {forms.index("학교"), forms.index("에서")}
        out = to_inputs.random_map(ex, np.random.default_rng(seed))   # dynamic, in the loader
        check_no_masked_token_visible(out, ex["input_ids"])
        n_masked = len(np.unique(out["token_position"][np.isin(
            out["token_position"], out["mlm_positions"][out["mlm_weights"] > 0])]))
        assert n_masked == int((out["mlm_weights"] > 0).sum())   # one slot per masked position
    assert seen_merged > 10


def test_masks_stored_for_another_input_mode_are_completed(analyzer, tmp_path):
    """One data folder serves all six SHAKE variants: eval masks drawn per
    morpheme (one-hot) are extended to whole merged positions in the loader."""
    from kjax.batches.loader import ToModelInputs
    from kjax.inputs import mask_example
    ex, forms = example_from(analyzer, "나는 너를 학교에서 보았다", "학생들이 새 책을 샀다")
    onehot = merged_config(tmp_path, **{"model.input_mode": "onehot", "train.mlm_loss": "ce"})
    to_inputs = ToModelInputs(merged_config(tmp_path), dynamic_masking=False)
    completed = 0
    for seed in range(100):
        stored = mask_example(ex, onehot, np.random.default_rng(seed))   # token = position
        out = to_inputs.random_map(stored, np.random.default_rng(seed))
        check_no_masked_token_visible(out, ex["input_ids"])
        slots = out["mlm_target_mask"][out["mlm_weights"] > 0].sum()
        completed += slots > len(stored["mlm_positions"])
    assert completed > 0


def test_merged_embedding_is_the_sum_of_the_token_embeddings():
    cfg = EncoderConfig(vocab_size=40, hidden_size=16, num_layers=1, num_heads=2,
                        intermediate_size=32, max_position_embeddings=16, input_mode="merged",
                        dtype="float32", dropout_rate=0.0, attention_dropout_rate=0.0)
    model = BertForPreTraining(cfg, deterministic=True)
    # Positions: [CLS]=0, (5+6)=1, 7=2, [SEP]=3; tokens in a flat stream.
    token_ids = jnp.asarray([[2, 5, 6, 7, 3, 0, 0, 0]])
    token_position = jnp.asarray([[0, 1, 1, 2, 3, -1, -1, -1]])
    zeros = jnp.zeros((1, 8), jnp.int32)
    multihot = {"token_ids": token_ids, "token_position": token_position,
                "token_inpos": zeros, "position_tags": zeros}
    args = (zeros, zeros, (jnp.arange(8) < 4)[None].astype(jnp.int32), jnp.zeros((1, 2), jnp.int32))
    params = nn.meta.unbox(model.init(jax.random.key(0), *args, multihot=multihot)["params"])
    e = params["embeddings"]
    assert "inpos_embeddings" not in e and "postag_embeddings" not in e
    _, _, inputs = model.apply({"params": params}, *args[:3], multihot=multihot,
                               return_inputs=True, method=model.encode)
    word, pos, typ = (np.asarray(e[k]["embedding"]) for k in
                      ("word_embeddings", "position_embeddings", "token_type_embeddings"))
    np.testing.assert_allclose(inputs[0, 1], word[5] + word[6] + pos[1] + typ[0], rtol=1e-6)
    np.testing.assert_allclose(inputs[0, 2], word[7] + pos[2] + typ[0], rtol=1e-6)


def test_merged_mode_needs_morph_sp_and_a_multi_target_loss(tmp_path):
    from conftest import tiny_config
    config = tiny_config(tmp_path, **{"tokenizer.scheme": "morph-sp"})
    with pytest.raises(KjaxError, match="mlm_loss"):
        apply_override(config, "--config.model.input_mode=merged")
        from kjax.objectives import check_config as validate
        validate(config)
    config = tiny_config(tmp_path)
    with pytest.raises(KjaxError, match="morph-sp"):
        apply_override(config, "--config.model.input_mode=merged")
        apply_override(config, "--config.train.mlm_loss=eq9")
        from kjax.objectives import check_config as validate
        validate(config)


@pytest.mark.slow
def test_merged_pretraining_end_to_end(tmp_path):
    from conftest import tiny_config
    from kjax.batches.loader import train_dataset
    from kjax.pretrain.prepare import prepare
    from kjax.tokens.factory import train_tokenizer
    from kjax.train.metrics import read_metrics
    from kjax.pretrain.trainer import train
    config = tiny_config(tmp_path, **{"tokenizer.scheme": "morph-sp",
                                      "model.input_mode": "merged", "train.mlm_loss": "eq9",
                                      "train.num_steps": 8})
    train_tokenizer(config)
    prepare(config, progress=False)
    batch = next(iter(train_dataset(config)))
    real = batch["token_position"] >= 0
    positions = batch["attention_mask"].sum(1)
    assert (positions < real.sum(1)).mean() >= 0.75  # most examples merged something
    assert (batch["mlm_target_mask"].sum(-1) > 1).any()   # merged positions: several targets
    from kjax.batches.loader import eval_batches
    for rows in [batch, *eval_batches(config, 4, 2)]:      # dynamic, and static (prepare)
        for r in range(len(rows["mlm_weights"])):
            check_no_masked_token_visible({k: v[r] for k, v in rows.items()}, None)
    train(config, str(tmp_path / "run"), progress=False)
    rows = [r for r in read_metrics(str(tmp_path / "run")) if r["split"] == "train"]
    assert rows[-1]["step"] == 8 and rows[-1]["mlm_loss"] < rows[0]["mlm_loss"]


@pytest.mark.parametrize("variant, bf, source, mode", [
    ("baseline", 0.0, "none", "onehot"), ("pos_plus", 0.3, "pos", "onehot"),
    ("pos_minus", -0.3, "pos", "onehot"), ("random", 0.2, "random", "onehot"),
    ("shared_position", 0.0, "none", "shared_position"),
    ("merged", 0.0, "none", "merged")])
def test_six_shake_reproduction_configs(variant, bf, source, mode):
    """METHODS §1.5: RoBERTa-small (6 layers, 12 heads), one shared vocabulary."""
    import os
    from conftest import ROOT
    from kjax.config import load_config
    path = os.path.join(ROOT, "tpu_configs", f"shake_{variant}.py")
    c = load_config(path)
    assert (c.model.num_layers, c.model.num_heads, c.train.nsp_weight) == (6, 12, 0.0)
    assert (c.model.shake_factor, c.shake.variant, c.model.input_mode) == (bf, source, mode)
    assert c.tokenizer.path == "runs/shake_data/tokenizer/sp"
    assert variant != "random" or c.shake.p == 0.08
    header = open(path, encoding="utf-8").read(1500)
    assert f"--config tpu_configs/shake_{variant}.py" in header and "Expected" in header
