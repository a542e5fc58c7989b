"""Eq. 1 (METHODS §1.2) and the B matrix built from POS pairs (§1.3)."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ml_collections import ConfigDict

from kjax.examples.pairs import assemble
from kjax.model.attention import shake_scores
from kjax.model.config import EncoderConfig
from kjax.model.encoder import BertForPreTraining
from kjax.morph.tags import tag_id
from kjax.shake.matrix import build_shake_matrix, random_pairs
from kjax.shake.variants import shared_position_ids


def shake_cfg(**kw):
    base = dict(variant="pos", boost_prem=1.0, group3=True, tag_weights={}, p=0.08,
                position_variant="none")
    return ConfigDict({**base, **kw})


def test_eq1_matches_numpy_for_both_signs():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(2, 3, 5, 5)).astype(np.float32)  # negative and positive logits
    b = np.zeros((2, 5, 5), np.float32)
    b[0, 1, 2], b[1, 4, 0], b[1, 3, 3] = 1.0, 2.0, 0.5
    for bf in (0.3, -0.3):
        want = s + np.abs(s * b[:, None]) * bf
        got = shake_scores(jnp.asarray(s), jnp.asarray(b), jnp.float32(bf))
        np.testing.assert_allclose(got, want, rtol=1e-6)
        # Direction follows bf, whatever the sign of the score.
        moved = np.asarray(got) - s
        assert (np.sign(moved[b[:, None].repeat(3, 1) > 0]) == np.sign(bf)).all()
        assert (moved[b[:, None].repeat(3, 1) == 0] == 0).all()


def test_eq1_gradient_is_ds_times_one_plus_bf_abs_b_sign_s():
    rng = np.random.default_rng(1)
    s = jnp.asarray(rng.normal(size=(1, 2, 4, 4)), jnp.float32)
    b = jnp.asarray(rng.integers(0, 2, (1, 4, 4)) * 1.5, jnp.float32)
    up = jnp.asarray(rng.normal(size=(1, 2, 4, 4)), jnp.float32)
    bf = 0.4
    grad = jax.grad(lambda x: (shake_scores(x, b, bf) * up).sum())(s)
    want = up * (1 + bf * jnp.abs(b[:, None]) * jnp.sign(s))
    np.testing.assert_allclose(grad, want, rtol=1e-6)


def test_model_attention_with_shake_matches_reference():
    """Per-layer bf inside the model, padded keys untouched."""
    cfg = EncoderConfig(vocab_size=30, hidden_size=8, num_layers=2, num_heads=2,
                        intermediate_size=16, max_position_embeddings=8, dtype="float32",
                        scan_layers=False, shake_factor=(0.5, -0.25))
    ids = jnp.asarray([[2, 7, 8, 9, 3, 0]], jnp.int32)
    mask = jnp.asarray([[1, 1, 1, 1, 1, 0]], jnp.int32)
    b = np.zeros((1, 6, 6), np.float32)
    b[0, 2, 1] = 1.0
    b[0, 3, 5] = 1.0  # a pair onto a padded key: the padding mask must still win
    model = BertForPreTraining(cfg, return_analysis=True)
    params = nn.meta.unbox(model.init(jax.random.key(0), ids, jnp.zeros_like(ids), mask)["params"])
    out = model.apply({"params": params}, ids, jnp.zeros_like(ids), mask, shake=b)
    plain = BertForPreTraining(cfg.__class__(**{**cfg.__dict__, "shake_factor": (0.0, 0.0)}),
                               return_analysis=True).apply(
        {"params": params}, ids, jnp.zeros_like(ids), mask, shake=b)
    alpha, alpha0 = np.asarray(out["analysis"]["alpha"]), np.asarray(plain["analysis"]["alpha"])
    assert alpha[:, 0, :, :, 5].max() < 1e-6              # padded key stays at zero weight
    # Layer 0 boosts (bf > 0) the (2 → 1) weight; nothing else in row 2 gains.
    assert (alpha[0, 0, :, 2, 1] > alpha0[0, 0, :, 2, 1]).all()
    np.testing.assert_allclose(alpha[0, 0, :, 0], alpha0[0, 0, :, 0], atol=1e-7)  # row 0 untouched


def example_from(analyzer, text_a, text_b):
    """A [CLS] A [SEP] B [SEP] example whose positions are morphemes."""
    def seg(text):
        ms = analyzer.analyze(text)
        n = np.arange(len(ms), dtype=np.int32)
        return {"ids": n + 10, "morph": n, "inpos": 0 * n, "eojeol": np.asarray(
            [m.eojeol for m in ms], np.int32), "tag": np.asarray([tag_id(m.tag) for m in ms],
                                                                 np.int32)}, ms
    (a, ma), (b, mb) = seg(text_a), seg(text_b)
    return assemble(a, b, 0, (0, 0)), ["[CLS]"] + [m.form for m in ma] + ["[SEP]"] + \
        [m.form for m in mb] + ["[SEP]"]


def test_pos_pairs_of_the_methods_example(analyzer):
    ex, forms = example_from(analyzer, "나는 너를 학교에서 보았다", "학생들이 새 책을 샀다")
    b = np.asarray(build_shake_matrix(ex, 32, shake_cfg(boost_prem=2.0)), np.float32)
    pairs = {(forms[q], forms[k]): float(b[q, k]) for q, k in zip(*np.nonzero(b))}
    assert pairs == {("는", "나"): 2.0, ("를", "너"): 2.0, ("에서", "학교"): 1.0,
                     ("이", "학생"): 2.0, ("새", "책"): 1.0, ("을", "책"): 2.0}
    no_group3 = build_shake_matrix(ex, 32, shake_cfg(group3=False, tag_weights={"JKB": 0.5}))
    pairs = {(forms[q], forms[k]): float(no_group3[q, k]) for q, k in zip(*np.nonzero(no_group3))}
    assert ("새", "책") not in pairs and pairs[("에서", "학교")] == 0.5
    assert b.dtype == np.float32 and build_shake_matrix(ex, 32, shake_cfg()).dtype.itemsize == 1


def pair_forms(ex, forms, cfg=None):
    b = np.asarray(build_shake_matrix(ex, 48, cfg or shake_cfg()), np.float32)
    return {(forms[q], forms[k]) for q, k in zip(*np.nonzero(b))}


def test_adnominal_pairs_stop_at_sep(analyzer):
    """'모든' ending segment A is not paired with B's first noun across [SEP]."""
    ex, forms = example_from(analyzer, "그는 모든", "책을 샀다")   # Kiwi: 모든/MM, 책/NNG
    assert pair_forms(ex, forms) == {("는", "그"), ("을", "책")}
    ex, forms = example_from(analyzer, "그는 모든 책을 샀다", "좋다")  # inside a segment: paired
    assert ("모든", "책") in pair_forms(ex, forms)


def test_pairs_stop_at_a_sentence_boundary(analyzer):
    """Two sentences joined into one segment (kjax.examples.pairs): an
    adnominal ending the first never modifies the second's first noun."""
    from kjax.examples.pairs import _concat

    def sentence(text):
        ms = analyzer.analyze(text)
        n = np.arange(len(ms), dtype=np.int32)
        return {"ids": n + 10, "morph": n, "inpos": 0 * n, "tag": np.asarray(
            [tag_id(m.tag) for m in ms], np.int32), "eojeol": np.asarray(
            [m.eojeol for m in ms], np.int32)}, [m.form for m in ms]
    (s1, f1), (s2, f2), (s3, f3) = sentence("그는 모든"), sentence("책을 샀다"), sentence("좋다")
    ex = assemble(_concat([s1, s2]), s3, 0, (0, 0))
    forms = ["[CLS]", *f1, *f2, "[SEP]", *f3, "[SEP]"]
    assert pair_forms(ex, forms) == {("는", "그"), ("을", "책")}
    a_words = ex["word_ids"][1:len(f1) + len(f2) + 1]
    assert np.diff(np.unique(a_words)).tolist() == [1, 2, 1]   # the gap between sentences


def test_postposition_pairs_stop_at_a_special_token():
    """Segments numbered independently (eojeol 0 on both sides of [SEP], as a
    caller may build them): 에서 opening segment B is not 학교's."""
    tags = [0, tag_id("NNG"), 0, tag_id("JKB"), tag_id("NNG"), tag_id("JKO"), 0]
    ex = {"input_ids": np.arange(7), "morph_ids": np.asarray([-1, 0, -1, 0, 1, 2, -1]),
          "word_ids": np.asarray([-1, 0, -1, 0, 1, 1, -1]), "tags": np.asarray(tags)}
    forms = ["[CLS]", "학교", "[SEP]", "에서", "책", "을", "[SEP]"]
    assert pair_forms(ex, forms) == {("을", "책")}


def test_shared_position_variant(analyzer):
    ex, forms = example_from(analyzer, "나는 너를 학교에서 보았다", "밥을 먹었다")
    pos = shared_position_ids(ex, 24, shake_cfg())
    by_form = dict(zip(forms, pos))
    assert by_form["는"] == forms.index("나") and by_form["를"] == forms.index("너")
    assert by_form["에서"] == forms.index("학교") and by_form["을"] == forms.index("밥")
    assert by_form["보"] == forms.index("보") and pos[len(forms):].tolist() == list(
        range(len(forms), 24))


def test_random_variant_rate_and_keys():
    rng = np.random.default_rng(0)
    maskable = np.ones(100, bool)
    maskable[[0, 50, 99]] = False
    chosen = 0
    for _ in range(300):
        pairs = random_pairs(maskable, 0.1, rng)
        chosen += len(pairs)
        for q, k, w in pairs:
            assert q[0] != k[0] and maskable[q[0]] and maskable[k[0]] and w == 1.0
    assert abs(chosen / (300 * 97) - 0.1) < 0.01


def test_shaking_pretraining_end_to_end(tmp_path):
    """morph-sp vocabulary, POS B with bf = +0.3 and shared positions: batches carry
    B and position ids, and a short run trains."""
    from conftest import tiny_config
    from kjax.batches.loader import train_dataset
    from kjax.pretrain.prepare import prepare
    from kjax.tokens.factory import train_tokenizer
    from kjax.train.metrics import read_metrics
    from kjax.pretrain.trainer import train
    config = tiny_config(tmp_path, **{"tokenizer.scheme": "morph-sp", "model.shake_factor": 0.3,
                                      "shake.variant": "pos", "shake.boost_prem": 2.0,
                                      "model.input_mode": "shared_position",
                                      "data.mask_unit": "morpheme", "train.num_steps": 8})
    train_tokenizer(config)
    prepare(config, progress=False)
    batch = next(iter(train_dataset(config)))
    b = np.asarray(batch["shake"], np.float32)
    assert b.shape == (16, 64, 64) and set(np.unique(b)) >= {0.0, 1.0, 2.0}
    assert (batch["position_ids"] != np.arange(64)).any()
    train(config, str(tmp_path / "run"), progress=False)
    rows = [r for r in read_metrics(str(tmp_path / "run")) if r["split"] == "train"]
    assert rows[-1]["step"] == 8 and rows[-1]["mlm_loss"] < rows[0]["mlm_loss"]


def test_b_weights_float8_cannot_hold_are_refused(tmp_path):
    """B is one byte per (q, k): 1.5 and 2 are exact, 0.3 would silently become
    0.3125, so the config is refused with the nearest usable values."""
    from conftest import tiny_config
    from kjax.config import apply_override
    from kjax.objectives import check_config as validate
    from kjax.errors import KjaxError
    from kjax.shake.matrix import check_weights
    check_weights(shake_cfg(boost_prem=1.5, tag_weights={"JKB": 0.375}))
    config = tiny_config(tmp_path, **{"tokenizer.scheme": "morph-sp"})
    apply_override(config, "--config.shake.boost_prem=0.3")
    with pytest.raises(KjaxError, match=r"0\.3.*0\.28125 or 0\.3125"):
        validate(config)
