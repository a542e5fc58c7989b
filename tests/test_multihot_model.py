"""The multi-hot input generator (METHODS §2.3, Eq. 3–4) and its batches."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from kjax.inputs.segments import position_arrays, position_of_tokens, to_multihot
from kjax.model.config import EncoderConfig
from kjax.model.encoder import BertForPreTraining
from kjax.tokens.sentencepiece import CLS, MASK, SEP

CFG = EncoderConfig(vocab_size=40, hidden_size=8, num_layers=1, num_heads=2,
                    intermediate_size=16, max_position_embeddings=10, dtype="float32",
                    input_mode="multihot", num_pos_tags=6, max_tokens_per_morpheme=4)


def init_params():
    ids = jnp.zeros((1, 10), jnp.int32)
    mh = {k: ids for k in ("token_ids", "token_position", "token_inpos", "position_tags")}
    model = BertForPreTraining(CFG)
    return nn.meta.unbox(model.init(jax.random.key(0), ids, ids, ids + 1, multihot=mh)["params"])


def embed(params, token_ids, token_position, token_inpos, position_tags, types):
    model = BertForPreTraining(CFG)
    mh = {"token_ids": jnp.asarray([token_ids]), "token_position": jnp.asarray([token_position]),
          "token_inpos": jnp.asarray([token_inpos]), "position_tags": jnp.asarray([position_tags])}
    types = jnp.asarray([types])
    _, _, inputs = model.apply({"params": params}, None, types, jnp.ones_like(types),
                               multihot=mh, return_inputs=True, method=model.encode)
    return np.asarray(inputs[0])


def test_segment_sum_equals_explicit_per_morpheme_loop():
    params = init_params()
    e = jax.tree.map(np.asarray, params["embeddings"])
    # [CLS] 학교(학,교) 에 [SEP] + padding: tokens → positions 0,1,1,2,3
    token_ids = [CLS, 11, 12, 13, SEP, 0, 0, 0, 0, 0]
    owner = [0, 1, 1, 2, 3, -1, -1, -1, -1, -1]
    inpos = [0, 0, 1, 0, 0, 0, 0, 0, 0, 0]
    tags = [0, 2, 3, 0, 0, 0, 0, 0, 0, 0]
    got = embed(params, token_ids, owner, inpos, tags, [0] * 10)
    for k in range(10):
        want = sum((e["word_embeddings"]["embedding"][t] * e["inpos_embeddings"]["embedding"][i]
                    for t, o, i in zip(token_ids, owner, inpos) if o == k), np.zeros(8))
        want = want + e["position_embeddings"]["embedding"][k] + \
            e["postag_embeddings"]["embedding"][tags[k]] + e["token_type_embeddings"]["embedding"][0]
        np.testing.assert_allclose(got[k], want, atol=1e-6)


def test_token_order_inside_a_morpheme_matters():
    params = init_params()
    coconut = embed(params, [20, 20, 21], [0, 0, 0], [0, 1, 2], [1], [0])  # 코 코 넛
    nutcoco = embed(params, [21, 20, 20], [0, 0, 0], [0, 1, 2], [1], [0])  # 넛 코 코
    assert not np.allclose(coconut[0], nutcoco[0])


def example():
    # [CLS] 학교(2 tokens) 에 [SEP] 소크라테스(3 tokens) [SEP]
    ids = np.asarray([CLS, 11, 12, 13, SEP, 21, 22, 23, SEP], np.int32)
    morph = np.asarray([-1, 0, 0, 1, -1, 2, 2, 2, -1], np.int32)
    return {"input_ids": ids, "morph_ids": morph, "word_ids": np.asarray(
        [-1, 0, 0, 0, -1, 1, 1, 1, -1], np.int32), "inpos": np.asarray(
        [0, 0, 1, 0, 0, 0, 1, 2, 0], np.int32), "tags": np.asarray(
        [0, 5, 5, 3, 0, 4, 4, 4, 0], np.int32), "token_type_ids": np.asarray(
        [0, 0, 0, 0, 0, 1, 1, 1, 1], np.int32), "nsp_label": np.int32(1)}


def test_masked_morpheme_becomes_one_mask_token_with_all_targets():
    ex = example()
    original = ex["input_ids"].copy()
    assert position_of_tokens(ex["morph_ids"]).tolist() == [0, 1, 1, 2, 3, 4, 4, 4, 5]
    masked = {**ex, "input_ids": original.copy()}
    masked["input_ids"][[5, 6, 7]] = MASK  # 소크라테스 masked whole
    out = to_multihot(masked, original, np.asarray([5, 6, 7]), 12, 3, 4)
    # 소크라테스 is fed as a single [MASK] at position 4; the other positions are intact.
    assert out["token_ids"][:7].tolist() == [CLS, 11, 12, 13, SEP, MASK, SEP]
    assert out["token_position"][:7].tolist() == [0, 1, 1, 2, 3, 4, 5]
    assert (out["token_position"][7:] == -1).all()
    assert out["attention_mask"].tolist() == [1] * 6 + [0] * 6
    assert out["position_tags"][:6].tolist() == [0, 5, 3, 0, 4, 0]
    assert out["token_type_ids"][:6].tolist() == [0, 0, 0, 0, 1, 1]
    assert out["mlm_positions"].tolist() == [4, 0, 0]
    assert out["mlm_target_ids"][0, :3].tolist() == [21, 22, 23]
    assert out["mlm_target_mask"][0].tolist() == [True, True, True, False]
    assert out["mlm_weights"].tolist() == [1.0, 0.0, 0.0]


def test_randomly_replaced_morpheme_keeps_its_token_count():
    ex = example()
    original = ex["input_ids"].copy()
    masked = {**ex, "input_ids": original.copy()}
    masked["input_ids"][[1, 2]] = [30, 31]  # the 10 % random replacement of 학교
    out = to_multihot(masked, original, np.asarray([1, 2]), 12, 2, 4)
    assert out["token_ids"][:4].tolist() == [CLS, 30, 31, 13]
    assert out["mlm_target_ids"][0, :2].tolist() == [11, 12]


def test_position_arrays_for_shaking_over_morphemes():
    pos = position_arrays(example())
    assert pos["morph_ids"].tolist() == [-1, 1, 2, -1, 4, -1]
    assert pos["word_ids"].tolist() == [-1, 0, 0, -1, 1, -1]
    assert pos["tags"].tolist() == [0, 5, 3, 0, 4, 0]


def test_no_weight_decay_pulls_the_inpos_gate_towards_zero():
    """E_inpos multiplies E_tok (Eq. 3) and starts at 1; AdamW's decay would
    pull it towards 0. Chosen by name (it is a [tokens, hidden]
    table like the embeddings, which do decay)."""
    import optax
    from ml_collections import ConfigDict
    from kjax.train.state import decay_mask, make_optimizer
    params = init_params()
    mask = decay_mask(params)
    assert mask["embeddings"]["inpos_embeddings"]["embedding"] is False
    assert mask["embeddings"]["word_embeddings"]["embedding"] is True
    assert mask["embeddings"]["postag_embeddings"]["embedding"] is True
    assert mask["embeddings"]["layer_norm"]["scale"] is False
    tx = make_optimizer(ConfigDict(dict(learning_rate=0.1, warmup_steps=0, num_steps=10, b1=0.9,
                                        b2=0.999, eps=1e-6, weight_decay=0.5,
                                        grad_clip_norm=1.0)))
    zero = jax.tree.map(jnp.zeros_like, params)

    @jax.jit
    def step(p, state):                      # no gradient: only decay could move a weight
        updates, state = tx.update(zero, state, p)
        return optax.apply_updates(p, updates), state
    moved, state = params, tx.init(params)
    for _ in range(3):
        moved, state = step(moved, state)
    e0, e1 = params["embeddings"], moved["embeddings"]
    np.testing.assert_array_equal(e1["inpos_embeddings"]["embedding"],
                                  e0["inpos_embeddings"]["embedding"])
    assert np.abs(e1["word_embeddings"]["embedding"]).sum() < \
        np.abs(e0["word_embeddings"]["embedding"]).sum()
