"""Synthetic batches of the exact keys, shapes and dtypes the loader yields
for a config (every position real, every prediction slot used): what the
benchmarks time and what `kjax compile` lowers the steps against, with no
corpus, tokenizer or prepared shards.

The keys follow the data's path: the input mode's arrays (one-hot tokens or
a multi-hot position's tokens), the objectives' targets (MLM, NSP, the
knowledge heads), SHAKE's B (dense [seq, seq] or its pairs layout), position
ids where the mode sets them, and a packed row's segment ids.
"""
from __future__ import annotations

import numpy as np

from kjax.config import knowledge_enabled, shaking_enabled
from kjax.inputs import input_mode
from kjax.inputs.base import InputMode
from kjax.shake.matrix import B_DTYPE


def synthetic_batch(config, rng: np.random.Generator, batch_size: int | None = None) -> dict:
    """A full host batch for `config` (`batch_size` rows; default train.batch_size)."""
    d, m, g = config.data, config.model, config.knowledge
    b = config.train.batch_size if batch_size is None else batch_size
    s, p, v = d.max_seq_len, d.max_predictions_per_seq, m.vocab_size
    ids = lambda *shape: rng.integers(5, v, shape).astype(np.int32)  # noqa: E731
    rows = lambda x: np.asarray(x)[None].repeat(b, 0)  # noqa: E731
    out = {"input_ids": ids(b, s),
           "token_type_ids": rows((np.arange(s) >= s // 2).astype(np.int32)),
           "attention_mask": np.ones((b, s), np.int32),
           "mlm_positions": np.sort(rng.choice(s, (b, p)), -1).astype(np.int32),
           "mlm_ids": ids(b, p), "mlm_weights": np.ones((b, p), np.float32),
           "nsp_labels": rng.integers(0, 2, b).astype(np.int32),
           "nsp_weights": np.ones(b, np.float32)}
    mode = input_mode(config)
    if not mode.positions_are_tokens:  # one token per position: the widest B
        t = d.max_targets_per_position
        out.pop("mlm_ids")
        out.update(token_ids=ids(b, s), token_position=rows(np.arange(s, dtype=np.int32)),
                   token_inpos=np.zeros((b, s), np.int32),
                   position_tags=rng.integers(0, m.num_pos_tags, (b, s)).astype(np.int32),
                   mlm_target_ids=ids(b, p, t), mlm_target_mask=np.ones((b, p, t), bool))
    if type(mode).position_ids is not InputMode.position_ids:   # the mode sets its own
        out["position_ids"] = rows(np.arange(s, dtype=np.int32))
    if config.train.packing:   # kjax/batches/packing.py repack: two examples per row
        out.update(segment_ids=rows(1 + (np.arange(s) >= s // 2).astype(np.int32)),
                   position_ids=rows((np.arange(s) % (s - s // 2)).astype(np.int32)),
                   mlm_dropped=np.zeros(b, np.int32))
    if shaking_enabled(config):  # B: a few boosted (q, k) pairs per row, as the pos variant
        q = rng.integers(0, s, (b, s // 8))
        k = rng.integers(0, s, q.shape)
        if config.shake.layout == "pairs":   # the same pairs, per query (kjax/shake/matrix.py)
            start, weight = np.zeros((b, s), np.int32), np.zeros((b, s), np.float32)
            start[np.arange(b)[:, None], q], weight[np.arange(b)[:, None], q] = k, 1.0
            out.update(shake_key_start=start, shake_key_end=start + 1,
                       shake_weight=weight.astype(B_DTYPE))
        else:
            shake = np.zeros((b, s, s), np.float32)
            shake[np.arange(b)[:, None], q, k] = 1.0
            out["shake"] = shake.astype(B_DTYPE)
    if knowledge_enabled(config):
        n, k = g.max_hypernym, g.max_hypernyms_per_noun
        pos = lambda: np.sort(rng.choice(s, (b, n)), -1).astype(np.int32)  # noqa: E731
        out.update(hyp_positions=pos(), hyp_targets=ids(b, n, k),
                   hyp_target_mask=np.ones((b, n, k), bool), hyp_mask=np.ones((b, n), bool),
                   sense_positions=pos(),
                   sense_vectors=rng.normal(size=(b, g.max_sense, g.sense_dim)).astype(np.float32),
                   sense_mask=np.ones((b, g.max_sense), bool),
                   verb_targets=np.where(rng.random((b, s)) < 0.05,
                                         rng.integers(0, s, (b, s)), -1).astype(np.int32))
    return out


def batch_shapes(config, batch_size: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """(shape, dtype) of every key of a `batch_size`-row batch, nothing allocated
    beyond one row."""
    one = synthetic_batch(config, np.random.default_rng(0), batch_size=1)
    return {k: ((batch_size, *a.shape[1:]), a.dtype) for k, a in one.items()}
