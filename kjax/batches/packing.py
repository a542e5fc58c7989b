"""Sequence packing (`data.packing`): several examples share one fixed-length
row instead of each being padded to it, for objectives without NSP.

    example rows (the mode's padded inputs) → unpad: per-token arrays
    → grain's FirstFitPackIterDataset: rows of max_seq_len with segment ids
      (1, 2, … per example, 0 on padding) and positions restarting at 0
    → repack: the model's inputs again (attention_mask, segment_ids,
      position_ids, MLM slots gathered from the packed per-token targets)

The model never lets a query attend a key of another segment
(kjax/model/attention_core.py `logits_mask`), and every example keeps
positions 0..n−1, so a packed example computes exactly what it would alone
(tests/test_packing.py). MLM positions are carried as per-token targets
through the packer (grain does not offset index arrays) and gathered back;
a row holds at most data.max_predictions_per_seq of them (prediction slots
beyond it are dropped and counted: `mlm_dropped`).

The share of real tokens among the slots (`token_fill`) is reported by
`kjax prepare` (unpacked vs a first-fit estimate) and logged in training.
"""
from __future__ import annotations

import grain
import numpy as np

PACKED = ("input_ids", "token_type_ids", "mlm_targets")
SOURCE = "source_token"   # a mixture's rows: each token's source id + 1, through the packer


def unpad(row: dict) -> dict:
    """A padded one-hot example → its n real tokens, MLM targets per token (id + 1,
    0: not predicted); a mixture's example its source per token (id + 1)."""
    n, p = int(row["attention_mask"].sum()), int(row["mlm_weights"].sum())
    targets = np.zeros(n, np.int32)
    targets[row["mlm_positions"][:p]] = row["mlm_ids"][:p] + 1
    out = {"input_ids": row["input_ids"][:n], "token_type_ids": row["token_type_ids"][:n],
           "mlm_targets": targets}
    if "source" in row:
        out[SOURCE] = np.full(n, row["source"] + 1, np.int32)
    return out


def repack(packed: dict, max_predictions: int) -> dict:
    """grain's packed row → the model's inputs (and the objectives' targets)."""
    segments = packed["input_ids_segment_ids"].astype(np.int32)
    predicted = np.flatnonzero(packed["mlm_targets"] * (segments > 0))
    kept = predicted[:max_predictions]
    pad = max_predictions - len(kept)
    return {
        "input_ids": packed["input_ids"].astype(np.int32),
        "token_type_ids": packed["token_type_ids"].astype(np.int32),
        "attention_mask": (segments > 0).astype(np.int32),
        "segment_ids": segments,
        "position_ids": packed["input_ids_positions"].astype(np.int32),
        "mlm_positions": np.pad(kept, (0, pad)).astype(np.int32),
        "mlm_ids": np.pad(packed["mlm_targets"][kept] - 1, (0, pad)).astype(np.int32),
        "mlm_weights": np.pad(np.ones(len(kept), np.float32), (0, pad)),
        "mlm_dropped": np.asarray(len(predicted) - len(kept), np.int32),
        "nsp_labels": np.asarray(0, np.int32),
        "nsp_weights": np.asarray(1.0, np.float32),   # one per row: rows are the examples
        **({} if SOURCE not in packed else source_columns(packed[SOURCE], segments)),
    }


def source_columns(source_token: np.ndarray, segments: np.ndarray) -> dict:
    """A packed row's per-token `source` (-1: padding) and `source_starts` (1
    at each example's first token): what the loader's counters read
    (kjax/train/stream_meter.py)."""
    real = segments > 0
    starts = real & (np.diff(segments, prepend=0) != 0)
    return {"source": np.where(real, source_token.astype(np.int32) - 1, -1).astype(np.int32),
            "source_starts": starts.astype(np.int32)}


def pack(ds: grain.IterDataset, config, bins: int) -> grain.IterDataset:
    """Packs an iterator of padded one-hot example rows into rows of
    data.max_seq_len (first fit over `bins` open rows, in order)."""
    seq = config.data.max_seq_len
    keys = PACKED + ((SOURCE,) if len(getattr(config.data, "sources", None) or {}) else ())
    packed = grain.experimental.FirstFitPackIterDataset(
        ds.map(unpad), length_struct={k: seq for k in keys}, num_packing_bins=bins,
        seed=config.data.seed, shuffle_bins=False)
    return packed.map(lambda row: repack(row, config.data.max_predictions_per_seq))


def packed_rows(lengths, seq: int, bins: int) -> int:
    """How many rows of `seq` slots `pack` fills with examples of `lengths` (first
    fit over `bins` open rows, all emitted when one does not fit): prepare's
    estimate of the packed token fill."""
    rows, open_rows = 0, []
    for n in lengths:
        n = min(int(n), seq)
        for i, free in enumerate(open_rows):
            if free >= n:
                open_rows[i] -= n
                break
        else:
            if len(open_rows) == bins:
                rows, open_rows = rows + len(open_rows), []
            open_rows.append(seq - n)
    return rows + len(open_rows)
