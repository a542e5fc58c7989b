"""Norm-based attention analysis (METHODS §3): the norms against an explicit
loop over the weighted vectors, Spearman against scipy, the postposition →
substantive share on hand-built α, and `kjax analyze` on a trained checkpoint."""
import dataclasses
import json
from types import SimpleNamespace

import flax.linen as nn
import jax
import numpy as np
import pytest
import scipy.stats

from kjax.analysis.inputs import CLASSES, encode_text, token_class
from kjax.analysis.norms import (cv_per_head, key_share, spearman, spearman_per_head)
from kjax.analysis.report import analysis_step, postposition_shares
from kjax.model.config import EncoderConfig
from kjax.model.encoder import BertForPreTraining
from kjax.morph.tags import tag_id
from kjax.tokens.sentencepiece import CLS, SEP


def test_norms_equal_explicit_weighted_vectors_per_head_and_summed(tmp_path):
    """analysis_step (jit, Gram trick) vs the 5-D vectors α^h_ij f^h(x_j) built
    one by one; their sum over heads and keys plus b_O is the attention output."""
    from conftest import tiny_config
    from kjax.train.state import dummy_inputs, make_model
    config = tiny_config(tmp_path, **{"model.scan_layers": False,
                                      "model.initializer_range": 0.5})   # peaked α, varied ‖f‖
    params = nn.meta.unbox(jax.jit(make_model(config, False).init)(
        jax.random.key(1), *dummy_inputs(config)[0])["params"])
    bf = (0.7, -0.4)
    rng = np.random.default_rng(0)
    b, s = 2, 12
    mask = np.ones((b, s), np.int32)
    mask[1, 9:] = 0
    shake = (rng.random((b, s, s)) < 0.2).astype(np.float32)
    batch = {"input_ids": rng.integers(5, 600, (b, s)).astype(np.int32),
             "token_type_ids": np.zeros((b, s), np.int32), "attention_mask": mask,
             "position_ids": np.tile(np.arange(s, dtype=np.int32), (b, 1)), "shake": shake}
    got = jax.device_get(analysis_step(config, bf)(params, batch))

    reference = BertForPreTraining(dataclasses.replace(
        EncoderConfig.from_config(config.model), dtype="float32", shake_factor=bf),
        return_analysis=True)
    out, captured = jax.jit(lambda p, ids, types, m, b: reference.apply(
        {"params": p}, ids, types, m, shake=b, capture_intermediates=True,
        mutable=["intermediates"]))(params, batch["input_ids"], batch["token_type_ids"], mask,
                                    shake)
    alpha, fx = (np.asarray(out["analysis"][k], np.float64) for k in ("alpha", "fx"))
    layers, _, heads = alpha.shape[:3]
    assert heads == 4 and layers == 2
    np.testing.assert_allclose(got["alpha"], alpha, rtol=1e-5, atol=1e-7)
    for layer in range(layers):
        attention = captured["intermediates"]["encoder"][f"layer_{layer}"]["attention"]
        y = np.asarray(attention["__call__"][0][0], np.float64)
        b_out = np.asarray(params["encoder"][f"layer_{layer}"]["attention"]["out"]["bias"])
        for e in range(b):
            for i in range(s):
                total = np.zeros(fx.shape[-1])
                for j in range(s):
                    vectors = alpha[layer, e, :, i, j, None] * fx[layer, e, :, j]  # [h, H]
                    np.testing.assert_allclose(
                        got["alpha"][layer, e, :, i, j] * got["fx_norm"][layer, e, :, j],
                        np.linalg.norm(vectors, axis=-1), rtol=1e-4, atol=1e-7)
                    np.testing.assert_allclose(got["layer_weighted_norm"][layer, e, i, j],
                                               np.linalg.norm(vectors.sum(0)),
                                               rtol=1e-4, atol=1e-6)
                    total += vectors.sum(0)
                np.testing.assert_allclose(total + b_out, y[e, i], rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(got["layer_fx_norm"][layer, e],
                                       np.linalg.norm(fx[layer, e].sum(0), axis=-1), rtol=1e-4)
    # The summed norm is not the sum of the per-head norms (heads point apart)...
    per_head_sum = (got["alpha"] * got["fx_norm"][..., None, :]).sum(2)
    real_keys = np.broadcast_to(mask[None, :, None, :] > 0, per_head_sum.shape)
    assert (got["layer_weighted_norm"] < per_head_sum - 1e-6)[real_keys].all()
    # ...and shaking changed the weights (bf reached the model).
    unshaken = jax.device_get(analysis_step(config, (0.0, 0.0))(params, batch))
    assert np.abs(unshaken["alpha"] - got["alpha"]).max() > 1e-3


def test_spearman_matches_scipy_including_ties_and_pooling():
    rng = np.random.default_rng(3)
    x = rng.normal(size=80)
    cases = [(x, rng.normal(size=80)), (x, x ** 3), (x, -x),
             (rng.integers(0, 4, 90), rng.integers(0, 3, 90)),           # many ties
             (rng.random(30), np.repeat(rng.random(6), 5))]
    for a, b in cases:
        assert spearman(a, b) == pytest.approx(scipy.stats.spearmanr(a, b).statistic, abs=1e-12)
    assert np.isnan(spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))      # constant side
    assert np.isnan(spearman([1.0], [2.0]))

    # Pooled per (layer, head) over texts of different lengths, keys of one class.
    lengths = (5, 7)
    alphas = [rng.random((2, 3, n, n)) for n in lengths]
    norms = [rng.random((2, 3, n)) for n in lengths]
    masks = [rng.random(n) < 0.5 for n in lengths]
    rho = spearman_per_head(alphas, norms, masks)
    assert rho.shape == (2, 3)
    for layer in range(2):
        for head in range(3):
            xs, ys = [], []
            for alpha, norm, mask in zip(alphas, norms, masks):
                for i in range(alpha.shape[-1]):
                    for j in np.flatnonzero(mask):
                        xs.append(alpha[layer, head, i, j])
                        ys.append(norm[layer, head, j])
            assert rho[layer, head] == pytest.approx(scipy.stats.spearmanr(xs, ys).statistic)
    cv = cv_per_head(norms)
    pooled = np.concatenate([norms[0][1, 2], norms[1][1, 2]])
    assert cv[1, 2] == pytest.approx(pooled.std() / pooled.mean())


def test_postposition_share_by_weight_and_norm_on_hand_built_alpha():
    # One layer, two heads, five positions: [CLS] 나 는 학교 에.
    alpha = np.zeros((1, 2, 5, 5))
    alpha[0, 0, 2] = [0.1, 0.5, 0.2, 0.1, 0.1]    # head 0: 는 → 나 by weight 0.5
    alpha[0, 1, 2] = [0.6, 0.1, 0.1, 0.1, 0.1]    # head 1: 는 → 나 by weight 0.1
    alpha[0, 0, 4] = [0.2, 0.2, 0.2, 0.2, 0.2]
    alpha[0, 1, 4] = [0.0, 0.0, 0.0, 1.0, 0.0]
    fx_norm = np.asarray([[[1.0, 2.0, 1.0, 1.0, 1.0], [4.0, 1.0, 1.0, 1.0, 1.0]]])
    layer_weighted = np.zeros((1, 5, 5))
    layer_weighted[0, 2] = [3.0, 1.0, 0.0, 0.0, 0.0]
    layer_weighted[0, 4] = [1.0, 1.0, 1.0, 1.0, 0.0]
    result = {"alpha": alpha, "fx_norm": fx_norm, "layer_alpha": alpha.mean(1),
              "layer_weighted_norm": layer_weighted}
    item = SimpleNamespace(length=5, postpositions=[(np.asarray([2]), np.asarray([1])),
                                                    (np.asarray([4]), np.asarray([3]))])
    shares = postposition_shares([result], [item])
    # 는→나: weight (0.5, 0.1); norm head 0 = 1.0/(0.1+1.0+0.2+0.1+0.1), head 1 = 0.1/(2.4+0.4)
    # 에→학교: weight (0.2, 1.0); norm head 0 = 0.2/1.2, head 1 = 1.0/1.0
    np.testing.assert_allclose(shares["by_weight"]["per_head"],
                               [[(0.5 + 0.2) / 2, (0.1 + 1.0) / 2]])
    np.testing.assert_allclose(shares["by_norm"]["per_head"],
                               [[(1.0 / 1.5 + 0.2 / 1.2) / 2, (0.1 / 2.8 + 1.0) / 2]])
    np.testing.assert_allclose(shares["by_weight"]["per_layer"], [(0.3 + 0.6) / 2])
    np.testing.assert_allclose(shares["by_norm"]["per_layer"], [(0.25 + 0.25) / 2])
    assert shares["count"] == 2 and shares["uniform_baseline"] == pytest.approx(0.2)
    # A two-token postposition: its query rows are averaged.
    assert key_share(alpha[0, 0], [2, 4], [1]) == pytest.approx((0.5 + 0.2) / 2)
    assert postposition_shares([result], [SimpleNamespace(length=5, postpositions=[])]) \
        ["count"] == 0


def test_token_classes_and_inputs_with_plain_sentencepiece(prepared):
    from conftest import tiny_config
    from kjax.tokens.factory import load_tokenizer
    assert CLASSES[token_class(CLS, 0, "[CLS]")] == "[CLS]"
    assert CLASSES[token_class(SEP, 0, "[SEP]")] == "[SEP]"
    assert CLASSES[token_class(50, tag_id("JKS"), "는")] == "postposition"
    assert CLASSES[token_class(50, tag_id("NNP"), "서울")] == "substantive"
    assert CLASSES[token_class(50, tag_id("SF"), ".")] == "punctuation"
    assert CLASSES[token_class(50, 0, "「,")] == "punctuation"    # no tag: by characters
    assert CLASSES[token_class(50, 0, "나,")] == "other"
    assert CLASSES[token_class(50, 0, "\u2581")] == "other"     # a bare word-start piece
    tokenizer = load_tokenizer(tiny_config(prepared))
    item = encode_text(tokenizer, "대한민국은 , 민주공화국이다 .\t모든 권력은 국민으로부터 나온다", 64)
    kinds = [CLASSES[c] for c in item.classes]
    assert kinds[0] == "[CLS]" and kinds[-1] == "[SEP]" and kinds.count("[SEP]") == 2
    assert kinds.count("punctuation") == 2 and "postposition" not in kinds
    assert item.postpositions == [] and not item.truncated
    types = item.positions["token_type_ids"]
    assert types[0] == 0 and types[-1] == 1 and (np.diff(types) >= 0).all()
    short = encode_text(tokenizer, "대한민국은 민주공화국이다 모든 권력은 국민으로부터 나온다", 8)
    assert short.truncated and short.length == 8 and short.labels[-1] == "[SEP]"


def test_analyze_cli_on_a_trained_morph_sp_checkpoint(tmp_path, capsys):
    """Two training steps of a morph-sp model, then `kjax analyze` with and
    without shaking: the report and the pictures, and what shaking does."""
    from conftest import DEMO_CONFIG, tiny_config, tiny_overrides
    from kjax.cli import main
    from kjax.pretrain.prepare import prepare
    from kjax.tokens.factory import train_tokenizer
    from kjax.pretrain.trainer import train
    extra = {"tokenizer.scheme": "morph-sp", "shake.variant": "pos",
             "data.mask_unit": "morpheme", "train.num_steps": 2, "train.checkpoint_every": 2}
    config = tiny_config(tmp_path, **extra)
    train_tokenizer(config)
    prepare(config, progress=False)
    train(config, str(tmp_path / "run"), progress=False)
    texts = tmp_path / "texts.txt"
    texts.write_text("나는 너를 학교에서 보았다.\n대한민국은 민주공화국이다.\n\n"
                     "모든 국민은 법 앞에 평등하다.\t국민의 권리는 존중된다.\n", encoding="utf-8")
    out = tmp_path / "analysis"
    args = ["analyze", "--config", DEMO_CONFIG, "--workdir", str(tmp_path / "run"),
            "--texts", str(texts), "--out", str(out), "--bf", "5",
            *tiny_overrides(str(tmp_path), **extra)]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["step"] == 2 and printed["texts"] == 3

    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert set(report["runs"]) == {"unshaken", "shaken"}
    assert report["runs"]["shaken"]["bf"] == [5.0, 5.0]
    counts = report["texts"]["class_counts"]
    assert counts["[CLS]"] == 3 and counts["[SEP]"] == 4
    assert min(counts["postposition"], counts["substantive"], counts["punctuation"]) > 0
    assert report["sentence"]["classes"][:1] == ["[CLS]"]
    for run in report["runs"].values():
        cv = np.asarray(run["fx_norm_cv"]["per_head"], float)
        assert cv.shape == (2, 4) and (cv > 0).all()
        for cls in ("postposition", "substantive", "all"):
            rho = np.asarray(run["spearman"][cls]["per_head"], float)
            assert rho.shape == (2, 4) and (np.abs(rho) <= 1).all()
        shares = run["postposition_to_substantive"]
        assert shares["count"] >= 5      # 는 를 에서 은 은 에 의 는 (as Kiwi splits them)
        for kind in ("by_weight", "by_norm"):
            assert np.asarray(shares[kind]["per_head"]).shape == (2, 4)
    # Layer 0 sees the same inputs in both runs; Eq. 1 with bf > 0 only raises the
    # logits of the substantive keys, so their share of the weight must grow.
    plain = report["runs"]["unshaken"]["postposition_to_substantive"]["by_weight"]
    boosted = report["runs"]["shaken"]["postposition_to_substantive"]["by_weight"]
    assert (np.asarray(boosted["per_head"])[0] > np.asarray(plain["per_head"])[0]).all()

    expected = {"unshaken_layer0.png", "unshaken_layer1.png", "shaken_layer0.png",
                "shaken_layer1.png", "correlation_by_class.png", "postposition_share.png",
                "received_by_class.png", "fx_norm_cv.png"}
    assert set(report["pictures"]) == expected
    for name in expected:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000

    # Bad requests fail in one line before anything runs.
    assert main([*args, "--sentence-index", "9"]) == 2
    assert "--sentence-index 9 is out of range" in capsys.readouterr().err
    assert main([*args, "--step", "1"]) == 2
    assert "no checkpoint for step 1" in capsys.readouterr().err
    assert main([*args, "--texts", str(tmp_path / "missing")]) == 2
    assert "missing' not found" in capsys.readouterr().err
