"""The knowledge heads (METHODS §2.5, Eq. 10–12) and their losses against a
numpy reference, which parameters each loss trains, and `kjax eval`'s
metrics: every head's, as weighted sums, with the training loss's weights."""
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_config
from kjax.losses.knowledge import hypernym_loss, sense_loss, verb_loss
from loss_oracle import knowledge_losses
from kjax.model.config import EncoderConfig
from kjax.model.encoder import BertForPreTraining
from kjax.model.knowledge_heads import KnowledgeHeads

H, V, S, B = 8, 13, 6, 2


def enc_config(**extra) -> EncoderConfig:
    return EncoderConfig(vocab_size=V, hidden_size=H, num_layers=1, num_heads=2,
                         intermediate_size=16, max_position_embeddings=S, dtype="float32",
                         dropout_rate=0.0, attention_dropout_rate=0.0, hypernym_head=True,
                         sense_dim=3, verb_head=True, scan_layers=False, **extra)


# ---- numpy reference --------------------------------------------------------------
def gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def layer_norm(x, p, eps=1e-12):
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def ffn(x, p):
    h = layer_norm(gelu(x @ p["hidden"]["kernel"] + p["hidden"]["bias"]), p["layer_norm"])
    return h @ p["out"]["kernel"] + p["out"]["bias"] if "out" in p else h


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def eq9(logits, ids, mask, weights):
    """METHODS Eq. 7–9 per slot, weighted mean over slots."""
    per = []
    for lp, row_ids, row_mask in zip(log_softmax(logits), ids, mask):
        targets = sorted({int(i) for i, m in zip(row_ids, row_mask) if m})
        n = len(targets)
        l = [lp[t] - math.log(1 / n) for t in targets]          # Eq. 7
        kept = [x for x in l if x < 0]                           # Eq. 8
        per.append(-sum(kept) / len(kept) if kept else 0.0)      # Eq. 9
    per = np.asarray(per)
    return (per * weights).sum() / weights.sum()


@pytest.fixture(scope="module")
def heads():
    cfg = enc_config()
    rng = np.random.default_rng(0)
    inputs = rng.normal(size=(B, S, H)).astype(np.float32)
    hidden = rng.normal(size=(B, S, H)).astype(np.float32)
    table = rng.normal(size=(V, H)).astype(np.float32)
    mask = np.asarray([[1] * S, [1] * 4 + [0] * 2], np.int32)
    hyp_pos, sense_pos = np.asarray([[1, 3], [0, 2]]), np.asarray([[2, 5], [1, 1]])
    module = KnowledgeHeads(cfg)
    attend = lambda h: jnp.einsum("...d,vd->...v", h, table)  # noqa: E731
    args = (inputs, hidden, mask, attend, hyp_pos, sense_pos)
    params = nn.meta.unbox(module.init(jax.random.key(1), *args)["params"])
    params = jax.tree.map(lambda x: x + 0.1 * rng.normal(size=x.shape).astype(np.float32), params)
    out = module.apply({"params": params}, *args)
    return dict(params=jax.tree.map(np.asarray, params), out=out, inputs=inputs, hidden=hidden,
                table=table, mask=mask, hyp_pos=hyp_pos, sense_pos=sense_pos)


def test_hypernym_head_is_eq10_on_the_input_vector(heads):
    p, x = heads["params"], heads["inputs"][np.arange(B)[:, None], heads["hyp_pos"]]
    want = ffn(x, p["hypernym"]) @ heads["table"].T + p["hypernym_bias"]
    np.testing.assert_allclose(heads["out"]["hyp_logits"], want, rtol=1e-5, atol=1e-5)


def test_sense_head_is_eq11_ffn_on_the_input_vector(heads):
    p, x = heads["params"], heads["inputs"][np.arange(B)[:, None], heads["sense_pos"]]
    np.testing.assert_allclose(heads["out"]["sense_pred"], ffn(x, p["sense"]), rtol=1e-5,
                               atol=1e-5)


def test_verb_head_is_eq12_pointer_over_positions(heads):
    p, h = heads["params"], heads["hidden"]
    q = h @ p["verb_query"]["kernel"] + p["verb_query"]["bias"]
    k = h @ p["verb_key"]["kernel"] + p["verb_key"]["bias"]
    want = np.einsum("bpd,bjd->bpj", q, k) / math.sqrt(H)
    want = np.where(heads["mask"][:, None, :] > 0, want, -1e9)
    np.testing.assert_allclose(heads["out"]["verb_logits"], want, rtol=1e-5, atol=1e-4)


def test_losses_match_the_numpy_reference():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(B, 2, V)).astype(np.float32)
    logits[0, 0, 4] = 9.0            # one target far above its share 1/n: Eq. 8 drops it
    batch = {"hyp_targets": np.asarray([[[4, 5, 0], [7, 7, 2]], [[1, 0, 0], [3, 0, 0]]]),
             "hyp_target_mask": np.asarray([[[1, 1, 0], [1, 1, 1]], [[1, 0, 0], [0, 0, 0]]], bool),
             "hyp_mask": np.asarray([[1, 1], [1, 0]], bool)}
    loss, m = hypernym_loss(jnp.asarray(logits), batch)
    flat = lambda a: a.reshape(-1, *a.shape[2:])  # noqa: E731
    want = eq9(flat(logits), flat(batch["hyp_targets"]), flat(batch["hyp_target_mask"]),
               flat(batch["hyp_mask"]).astype(float))
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    top5 = np.argsort(-logits, -1)[..., :5]
    hits1, hits5 = [], []
    for b, s in zip(*np.nonzero(batch["hyp_mask"])):
        targets = set(batch["hyp_targets"][b, s][batch["hyp_target_mask"][b, s]].tolist())
        hits1.append(int(top5[b, s, 0]) in targets)
        hits5.append(bool(targets & set(top5[b, s].tolist())))
    assert float(m["hypernym_top1"]) == pytest.approx(np.mean(hits1))
    assert float(m["hypernym_top5"]) == pytest.approx(np.mean(hits5))

    pred = rng.normal(size=(B, 2, 3)).astype(np.float32)
    sense = {"sense_vectors": rng.normal(size=(B, 2, 3)).astype(np.float32),
             "sense_mask": np.asarray([[1, 0], [1, 1]], bool)}
    loss, m = sense_loss(jnp.asarray(pred), sense)
    sel = sense["sense_mask"]
    np.testing.assert_allclose(loss, ((pred - sense["sense_vectors"]) ** 2).mean(-1)[sel].mean(),
                               rtol=1e-5)
    cos = (pred * sense["sense_vectors"]).sum(-1) / (
        np.linalg.norm(pred, axis=-1) * np.linalg.norm(sense["sense_vectors"], axis=-1))
    assert float(m["sense_cosine"]) == pytest.approx(cos[sel].mean(), rel=1e-5)

    verb_logits = rng.normal(size=(B, S, S)).astype(np.float32)
    targets = np.full((B, S), -1)
    targets[0, 3], targets[0, 5], targets[1, 2] = 1, 5, 0
    verb_logits[0, 5, 5] = 20.0      # one right pointer
    loss, m = verb_loss(jnp.asarray(verb_logits), {"verb_targets": targets})
    lp = log_softmax(verb_logits)
    rows = np.argwhere(targets >= 0)
    np.testing.assert_allclose(loss, -np.mean([lp[b, p, targets[b, p]] for b, p in rows]),
                               rtol=1e-5)
    assert float(m["verb_accuracy"]) == pytest.approx(np.mean(
        [np.argmax(verb_logits[b, p]) == targets[b, p] for b, p in rows]))

    outputs = {"hyp_logits": jnp.asarray(logits), "sense_pred": jnp.asarray(pred),
               "verb_logits": jnp.asarray(verb_logits)}
    weights = {"hypernym": 0.5, "sense": 2.0, "verb": 0.25}
    total, m = knowledge_losses(outputs, {**batch, **sense, "verb_targets": targets}, weights)
    m = {k: float(v) for k, v in m.items()}
    assert float(total) == pytest.approx(0.5 * m["hypernym_loss"] + 2 * m["sense_loss"]
                                         + 0.25 * m["verb_loss"], rel=1e-6)


def multihot_batch(rng, rows=B):
    """A multi-hot batch with every knowledge target (positions = morphemes)."""
    ids = rng.integers(5, V, size=(rows, S))
    return {
        "token_ids": ids, "token_position": np.tile(np.arange(S), (rows, 1)),
        "token_inpos": np.zeros((rows, S), np.int64),
        "position_tags": rng.integers(1, 5, size=(rows, S)),
        "token_type_ids": np.zeros((rows, S), np.int64),
        "attention_mask": np.ones((rows, S), np.int64),
        "mlm_positions": np.tile([1, 2], (rows, 1)),
        "mlm_target_ids": rng.integers(5, V, size=(rows, 2, 2)),
        "mlm_target_mask": np.ones((rows, 2, 2), bool),
        "mlm_weights": np.ones((rows, 2), np.float32),
        "nsp_labels": rng.integers(0, 2, size=rows), "nsp_weights": np.ones(rows, np.float32),
        "hyp_positions": np.tile([3, 4], (rows, 1)),
        "hyp_targets": rng.integers(5, V, size=(rows, 2, 2)),
        "hyp_target_mask": np.ones((rows, 2, 2), bool),
        "hyp_mask": rng.random((rows, 2)) < 0.7,
        "sense_positions": np.tile([2, 5], (rows, 1)),
        "sense_vectors": rng.normal(size=(rows, 2, 3)).astype(np.float32),
        "sense_mask": rng.random((rows, 2)) < 0.7,
        "verb_targets": np.where(rng.random((rows, S)) < 0.4, rng.integers(0, S, (rows, S)), -1),
    }


# Which parameter groups each loss trains: the first two read the input vector
# Input_k (Eq. 4, before the embedding LayerNorm), the pointer the encoder output.
TRAINS = {
    "hypernym_loss": {"knowledge/hypernym", "knowledge/hypernym_bias", "embeddings/word",
                      "embeddings/position", "embeddings/token_type", "embeddings/inpos",
                      "embeddings/postag"},
    "sense_loss": {"knowledge/sense", "embeddings/word", "embeddings/position",
                   "embeddings/token_type", "embeddings/inpos", "embeddings/postag"},
    "verb_loss": {"knowledge/verb_query", "knowledge/verb_key", "encoder", "embeddings/word",
                  "embeddings/position", "embeddings/token_type", "embeddings/inpos",
                  "embeddings/postag", "embeddings/layer_norm"},
}


def group(path) -> str:
    names = [getattr(p, "key", "") for p in path]
    if names[0] == "embeddings":
        return "embeddings/" + names[1].removesuffix("_embeddings")
    if names[0] == "knowledge":
        return "knowledge/" + names[1]
    return names[0]


@pytest.mark.parametrize("loss_name", sorted(TRAINS))
def test_each_knowledge_loss_trains_only_its_own_parameters(loss_name):
    from loss_oracle import pretraining_loss
    cfg = enc_config(input_mode="multihot", num_pos_tags=8, max_tokens_per_morpheme=2)
    model = BertForPreTraining(cfg, deterministic=True)
    batch = jax.tree.map(jnp.asarray, multihot_batch(np.random.default_rng(0)))
    batch["hyp_mask"] = batch["sense_mask"] = jnp.ones((B, 2), bool)
    kwargs = dict(multihot={k: batch[k] for k in ("token_ids", "token_position", "token_inpos",
                                                   "position_tags")},
                  knowledge_positions={k: batch[k] for k in ("hyp_positions", "sense_positions")})
    args = (None, batch["token_type_ids"], batch["attention_mask"], batch["mlm_positions"])
    params = nn.meta.unbox(model.init(jax.random.key(0), *args, **kwargs)["params"])

    def loss(p):
        out = model.apply({"params": p}, *args, **kwargs)
        _, m = pretraining_loss(out, batch, 1.0, "eq9", {"hypernym": 1, "sense": 1, "verb": 1})
        return m[loss_name]
    grads = jax.grad(loss)(params)
    moved = {}
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        moved[group(path)] = moved.get(group(path), False) | bool(np.abs(g).max() > 0)
    assert {k for k, v in moved.items() if v} == TRAINS[loss_name]


def test_eval_reports_every_head_as_weighted_sums_with_the_training_weights(tmp_path):
    """`kjax eval` reports the hypernym/sense/verb metrics, and its "loss"
    weighs every objective as training does, train.nsp_weight included."""
    from kjax.batches.loader import empty_row
    from loss_oracle import pretraining_loss
    from kjax.parallel.mesh import make_mesh, put_batch
    from kjax.train.state import init_state, make_model, make_optimizer
    from kjax.train.step import _forward, make_eval_step, objective_weights, summarize_eval
    config = tiny_config(tmp_path, **{
        "tokenizer.scheme": "multihot", "model.input_mode": "multihot",
        "train.mlm_loss": "eq9", "data.mask_unit": "morpheme", "model.vocab_size": V,
        "model.max_position_embeddings": S, "data.max_seq_len": S,
        "data.max_predictions_per_seq": 2, "knowledge.max_hypernym": 2,
        "knowledge.max_sense": 2, "knowledge.max_hypernyms_per_noun": 2,
        "knowledge.sense_dim": 3, "knowledge.hypernym_weight": 0.5,
        "knowledge.sense_weight": 2.0, "knowledge.verb_weight": 0.25, "train.nsp_weight": 0.3,
        "model.num_pos_tags": 8})
    mesh = make_mesh(config)
    model = make_model(config, deterministic=True)
    state, shardings = init_state(config, mesh, model, make_optimizer(config.train))
    rng = np.random.default_rng(5)
    full, part = multihot_batch(rng, 8), multihot_batch(rng, 8)
    for r in range(5, 8):                                  # a last batch, 3 rows of filler
        filler = empty_row({k: v[r] for k, v in part.items()})
        for k in part:
            part[k][r] = filler[k]
    eval_step = make_eval_step(config, mesh, model, shardings["params"])
    sums = [eval_step(state["params"], put_batch(b, mesh)) for b in (full, part)]
    got = summarize_eval(jax.device_get(sums), objective_weights(config))
    union = {k: np.concatenate([full[k], part[k]]) for k in full}
    out = _forward(model, state["params"], jax.tree.map(jnp.asarray, union))
    _, want = pretraining_loss(out, union, 0.3, "eq9", {"hypernym": 0.5, "sense": 2.0,
                                                        "verb": 0.25})
    for key in ("mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy", "hypernym_loss",
                "hypernym_top1", "hypernym_top5", "sense_loss", "sense_cosine", "verb_loss",
                "verb_accuracy"):
        assert got[key] == pytest.approx(float(want[key]), rel=1e-4, abs=1e-6), key
    assert got["loss"] == pytest.approx(float(want["loss"]), rel=1e-4)
    assert got["loss"] == pytest.approx(got["mlm_loss"] + 0.3 * got["nsp_loss"]
                                        + 0.5 * got["hypernym_loss"] + 2 * got["sense_loss"]
                                        + 0.25 * got["verb_loss"], rel=1e-6)
    assert got["examples"] == 13
