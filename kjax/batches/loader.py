"""Examples → fixed-shape batches with grain.

Train: ArrayRecord shards (remote ones cached on this host first,
kjax/examples/records.py) read lazily (random access, nothing held in RAM),
a global shuffle by index permutation reseeded every epoch, per-process
slicing, dynamic masking, padding to fixed shapes and batching. The
iterator's state (a position, as JSON) goes into every checkpoint.

Dynamic masking draws from grain's per-record generator, which is a function
of (seed, global record index): the masks after a resume are the masks an
uninterrupted run would have drawn.
"""
from __future__ import annotations

import grain
import numpy as np

from kjax.config import knowledge_enabled, shaking_enabled
from kjax.examples import records
from kjax.batches.multihot import position_arrays, to_multihot
from kjax.examples.masking import example_rng, mask_example, whole_position_masks
from kjax.shake.matrix import build_shake_matrix, build_shake_pairs
from kjax.shake.variants import merged_units, shared_position_ids
from kjax.tokens.sentencepiece import PAD

EVAL_STREAM = 1 << 20  # eval's random choices (random-variant B) use their own stream

class ToModelInputs(grain.transforms.RandomMap):
    """One example → fixed-shape model inputs: dynamic masks (when configured),
    the Eq. 1 matrix B (dense, or its pairs layout) and SHAKE position ids
    (when configured), padding."""

    def __init__(self, config, dynamic_masking: bool):
        self.config, self.dynamic = config, dynamic_masking
        self.d = config.data
        # Multi-hot morphemes and SHAKE's merged positions (§1.5, 6) share the
        # token-stream → positions path.
        self.multihot = config.model.input_mode in ("multihot", "merged")
        self.merged = config.model.input_mode == "merged"
        self.knowledge = None
        if knowledge_enabled(config):
            from kjax.batches.knowledge import KnowledgeTargets
            from kjax.tokens.factory import open_tokenizer
            self.knowledge = KnowledgeTargets(config, open_tokenizer(config))
        self.builds_b = config.shake.variant != "none" and shaking_enabled(config)

    def random_map(self, example, rng: np.random.Generator):
        # SHAKE variant 6 (METHODS §1.5, 6): merge first, then mask whole merged
        # positions, so no masked token's position shows one of its tokens.
        merged = merged_units(example) if self.merged else None
        merged_positions = None if merged is None else merged["morph_ids"]
        if self.dynamic:
            example = mask_example(example, self.config, rng, merged_positions)
        d = self.d
        if self.multihot:
            if self.merged:   # stored masks may have been drawn for another input mode
                example = whole_position_masks(example, merged_positions, rng,
                                               self.config.model.vocab_size)
            original = np.array(example["input_ids"])
            original[example["mlm_positions"]] = example["mlm_ids"]
            if self.merged:
                example = {**example, "morph_ids": merged["morph_ids"], "inpos": merged["inpos"]}
            out = to_multihot(example, original, example["mlm_positions"], d.max_seq_len,
                              d.max_predictions_per_seq, d.max_targets_per_position)
            positions = position_arrays(example)  # B is over morphemes (METHODS §2.3)
            if self.knowledge is not None:
                masked = out["mlm_positions"][out["mlm_weights"] > 0]
                out.update(self.knowledge(original, example, masked, rng))
        else:
            out = pad_example(example, d.max_seq_len, d.max_predictions_per_seq)
            positions = example
        if self.builds_b and self.config.shake.layout == "pairs":   # O(seq), see shake/matrix.py
            out.update(build_shake_pairs(positions, d.max_seq_len, self.config.shake, rng))
        elif self.builds_b:
            out["shake"] = build_shake_matrix(positions, d.max_seq_len, self.config.shake, rng)
        if self.config.shake.position_variant == "shared_position":
            out["position_ids"] = shared_position_ids(positions, d.max_seq_len,
                                                      self.config.shake)
        return out


def pad_example(example: dict, max_seq_len: int, max_predictions: int) -> dict:
    """Variable-length example → fixed shapes (what jit needs)."""
    n, p = len(example["input_ids"]), len(example["mlm_positions"])
    if n > max_seq_len or p > max_predictions:
        raise ValueError(f"example of {n} tokens / {p} predictions exceeds max_seq_len="
                         f"{max_seq_len} / max_predictions_per_seq={max_predictions}; "
                         f"prepare the data again with the current config")

    def pad(x, size, value=0):
        return np.pad(np.asarray(x, np.int32), (0, size - len(x)), constant_values=value)

    return {
        "input_ids": pad(example["input_ids"], max_seq_len, PAD),
        "token_type_ids": pad(example["token_type_ids"], max_seq_len),
        "attention_mask": pad(np.ones(n, np.int32), max_seq_len),
        "mlm_positions": pad(example["mlm_positions"], max_predictions),
        "mlm_ids": pad(example["mlm_ids"], max_predictions),
        "mlm_weights": pad(np.ones(p, np.float32), max_predictions).astype(np.float32),
        "nsp_labels": np.asarray(example["nsp_label"], np.int32),
        "nsp_weights": np.asarray(1.0, np.float32),
    }


def train_dataset(config, process_index: int = 0, process_count: int = 1) -> grain.IterDataset:
    d, batch = config.data, config.train.batch_size
    if batch % process_count:
        raise ValueError(f"train.batch_size={batch} is not divisible by {process_count} processes")
    source = grain.sources.ArrayRecordDataSource(records.local_shards(d.dir, "train"))
    ds = (grain.MapDataset.source(source).seed(d.seed + config.train.seed).shuffle()
          .repeat(None).map(records.decode_example))
    ds = ds.random_map(ToModelInputs(config, dynamic_masking=d.masking == "dynamic"))
    # Process p takes rows [p·L, (p+1)·L) of every global batch (lazily: it
    # reads only those). Masks are drawn by global record index, so the
    # global batch, and the loss curve, do not depend on the process count.
    ds = ds.batch(batch // process_count, drop_remainder=True)[process_index::process_count]
    return ds.to_iter_dataset(grain.ReadOptions(num_threads=2,
                                                prefetch_buffer_size=config.train.prefetch))


def eval_batches(config, batch_size: int, max_batches: int, process_index: int = 0,
                 process_count: int = 1):
    """The held-out examples (statically masked at prepare), in order; the last
    batch is filled with zero-weight rows so every example counts once. Every
    process yields the same number of batches (each is a collective), and
    process p's rows are its slice of each global batch, as in training."""
    d = config.data
    source = grain.sources.ArrayRecordDataSource(records.local_shards(d.dir, "eval"))
    local = batch_size // process_count
    count = -(-len(source) // batch_size)
    count = min(count, max_batches) if max_batches > 0 else count
    to_inputs = ToModelInputs(config, dynamic_masking=False)  # eval masks are stored

    def row(i):
        return to_inputs.random_map(records.decode_example(source[i]),
                                    example_rng(d.seed, i, EVAL_STREAM))

    for b in range(count):
        first = b * batch_size + process_index * local
        rows = [row(i) for i in range(first, min(first + local, len(source)))]
        if len(rows) < local:
            rows += [empty_row(rows[0] if rows else row(0))] * (local - len(rows))
        yield stack(rows)


# Arrays whose "nothing here" value is -1, not 0 (a 0 verb target would count).
EMPTY_VALUES = {"verb_targets": -1, "token_position": -1}


def empty_row(template: dict) -> dict:
    """A filler row that counts nowhere: every weight and mask 0, no targets."""
    return {k: np.full_like(v, EMPTY_VALUES.get(k, 0)) for k, v in template.items()}


def stack(rows: list[dict]) -> dict:
    return {k: np.stack([r[k] for r in rows]) for k in rows[0]}
