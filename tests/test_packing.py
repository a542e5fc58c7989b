"""train.packing (kjax/batches/packing.py): several examples per row, attention
never crossing an example, positions restarting; the token fill reported."""
import dataclasses
from types import SimpleNamespace

import flax.linen as nn
import grain
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import tiny_config

from kjax.batches.loader import train_dataset
from kjax.batches.packing import pack, packed_rows
from kjax.errors import KjaxError
from kjax.examples import records
from kjax.model.arch import architecture
from kjax.model.config import EncoderConfig
from kjax.model.encoder import BertForPreTraining
from kjax.model.modern import ModernBertForPreTraining
from kjax.objectives import check_config

SEQ, PRED = 16, 6


def padded_example(rng, n, p):
    ids = np.zeros(SEQ, np.int32)
    ids[:n] = rng.integers(5, 60, n)
    positions = np.zeros(PRED, np.int32)
    positions[:p] = rng.choice(n, p, replace=False)
    weights = (np.arange(PRED) < p).astype(np.float32)
    return {"input_ids": ids, "token_type_ids": np.zeros(SEQ, np.int32),
            "attention_mask": (np.arange(SEQ) < n).astype(np.int32),
            "mlm_positions": positions, "mlm_ids": np.where(weights > 0, ids[positions], 0),
            "mlm_weights": weights, "nsp_labels": np.int32(0), "nsp_weights": np.float32(1)}


def packed(examples, bins=1):
    config = SimpleNamespace(data=SimpleNamespace(max_seq_len=SEQ, max_predictions_per_seq=PRED,
                                                  seed=0))
    ds = grain.MapDataset.source(examples).to_iter_dataset()
    return list(pack(ds, config, bins=bins))


@pytest.mark.parametrize("arch", ["bert", "modern"])
def test_a_packed_row_computes_each_example_as_alone_with_zero_leakage(arch):
    rng = np.random.default_rng(0)
    examples = [padded_example(rng, n, p) for n, p in ((5, 2), (7, 3), (3, 1))]
    (row,) = packed(examples)
    assert row["segment_ids"].tolist() == [1] * 5 + [2] * 7 + [3] * 3 + [0]
    assert row["position_ids"].tolist()[:15] == [*range(5), *range(7), *range(3)]
    assert row["mlm_weights"].sum() == 6
    assert sorted(row["mlm_positions"][:6].tolist()) == sorted(
        [*examples[0]["mlm_positions"][:2], *(examples[1]["mlm_positions"][:3] + 5),
         examples[2]["mlm_positions"][0] + 12])
    assert np.array_equal(row["input_ids"][row["mlm_positions"][:6]], row["mlm_ids"][:6])
    enc = EncoderConfig(arch=arch, vocab_size=64, hidden_size=32, num_layers=2, num_heads=4,
                        intermediate_size=48, max_position_embeddings=SEQ, dtype="float32",
                        dropout_rate=0.0, attention_dropout_rate=0.0, local_attention=4,
                        scan_layers=arch == "bert")
    model = (BertForPreTraining if arch == "bert" else ModernBertForPreTraining)(enc)
    b = {k: jnp.asarray(v)[None] for k, v in row.items()}
    params = nn.meta.unbox(model.init(jax.random.key(0), b["input_ids"], b["token_type_ids"],
                                      b["attention_mask"])["params"])
    run = jax.jit(lambda r: model.apply(
        {"params": params}, r["input_ids"], r["token_type_ids"], r["attention_mask"],
        position_ids=r.get("position_ids"), segment_ids=r.get("segment_ids"))["hidden"][0])
    hidden = run(b)
    start = 0
    for ex in examples:
        n = int(ex["attention_mask"].sum())
        alone = run({k: jnp.asarray(v)[None] for k, v in ex.items()
                     if k in ("input_ids", "token_type_ids", "attention_mask")})
        np.testing.assert_allclose(hidden[start:start + n], alone[:n], atol=1e-5)
        start += n
    # zero leakage: other examples' tokens change nothing in the first one, bit for bit
    other = dict(b, input_ids=b["input_ids"].at[0, 5:15].set(7))
    assert np.array_equal(run(other)[:5], hidden[:5])
    assert not np.array_equal(run(other)[5:15], hidden[5:15])


def test_loader_packs_rows_and_prepare_reports_the_fill(prepared, tmp_path):
    from kjax.pretrain.prepare import prepare
    # paragraphs as documents: many examples shorter than a row
    config = tiny_config(prepared, **{"train.packing": True, "train.nsp_weight": 0.0,
                                      "data.nsp_prob": 0.0, "data.document_per_file": False,
                                      "data.dir": str(tmp_path / "examples")})
    check_config(config)
    prepare(config, progress=False)
    batch = next(iter(train_dataset(config)))
    seq = config.data.max_seq_len
    assert batch["input_ids"].shape == (config.train.batch_size, seq)
    seg, pos = batch["segment_ids"], batch["position_ids"]
    starts = (seg > 0) & np.concatenate([np.ones_like(seg[:, :1], bool),
                                         seg[:, 1:] != seg[:, :-1]], axis=1)
    assert (pos[starts] == 0).all() and (seg.max(axis=1) >= 2).any()
    inside = (seg > 0) & ~starts
    assert (pos[inside] == np.roll(pos, 1, axis=1)[inside] + 1).all()
    assert np.array_equal(batch["attention_mask"], (seg > 0).astype(np.int32))
    fill = batch["attention_mask"].mean()
    meta = records.read_meta(config.data.dir)
    assert meta["token_fill"]["packed"] > meta["token_fill"]["padded"] > 0
    assert fill > meta["token_fill"]["padded"]
    # prepare's estimate counts the rows grain's first-fit packer makes
    lengths = [10, 10, 5, 16, 1, 3, 12, 4]
    rng = np.random.default_rng(1)
    rows = packed([padded_example(rng, n, 1) for n in lengths], bins=2)
    assert packed_rows(lengths, SEQ, bins=2) == len(rows) == 5


def test_packing_refuses_nsp_and_what_it_cannot_carry(tmp_path):
    with pytest.raises(KjaxError, match="nsp_weight=1 with train.packing=True"):
        check_config(tiny_config(tmp_path, **{"train.packing": True}))
    with pytest.raises(KjaxError, match="cannot pack rows with model.input_mode='multihot'"):
        check_config(tiny_config(tmp_path, **{
            "train.packing": True, "train.nsp_weight": 0.0, "model.input_mode": "multihot",
            "tokenizer.scheme": "multihot", "train.mlm_loss": "eq9"}))
    with pytest.raises(KjaxError, match="cannot pack rows with shaking"):
        check_config(tiny_config(tmp_path, **{
            "train.packing": True, "train.nsp_weight": 0.0, "model.shake_factor": 0.3,
            "shake.variant": "random"}))
    assert architecture("modern").encoder_config(EncoderConfig()).use_bias is False


def test_loader_workers_yield_the_same_batches_and_resume(prepared):
    """train.loader_workers: grain's worker processes build the very batches the
    in-process loader does, and their checkpointed state resumes exactly."""
    def batches(workers, state=None, n=3):
        it = iter(train_dataset(tiny_config(prepared, **{"train.loader_workers": workers})))
        if state is not None:
            it.set_state(state)
        out = [next(it) for _ in range(n)]
        return out, it.get_state()

    plain, _ = batches(0, n=3)
    first, state = batches(2, n=2)
    (resumed,), _ = batches(2, state, n=1)
    for a, b in zip(plain, [*first, resumed]):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
