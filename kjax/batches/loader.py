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

from kjax.batches.packing import pack
from kjax.config import shaking_enabled
from kjax.examples import records
from kjax.examples.masking import example_rng
from kjax.inputs import input_mode

EVAL_STREAM = 1 << 20  # eval's random choices (random-variant B) use their own stream


class ToModelInputs(grain.transforms.RandomMap):
    """One example → fixed-shape model inputs, as the input mode makes them
    (kjax/inputs: its masks, positions, arrays and position ids), with the
    Eq. 1 matrix B over its positions when the model shakes."""

    def __init__(self, config, dynamic_masking: bool):
        self.config, self.dynamic = config, dynamic_masking
        self.mode = input_mode(config)
        self.resources = self.mode.loader_resources(config)
        self.builds_b = config.shake.variant != "none" and shaking_enabled(config)

    def random_map(self, example, rng: np.random.Generator):
        return self.mode.to_model_inputs(example, self.config, rng, self.dynamic,
                                         self.resources, self.builds_b)


def train_dataset(config, process_index: int = 0, process_count: int = 1) -> grain.IterDataset:
    d, batch = config.data, config.train.batch_size
    if batch % process_count:
        raise ValueError(f"train.batch_size={batch} is not divisible by {process_count} processes")
    source = grain.sources.ArrayRecordDataSource(records.local_shards(d.dir, "train"))
    ds = (grain.MapDataset.source(source).seed(d.seed + config.train.seed).shuffle()
          .repeat(None).map(records.decode_example))
    ds = ds.random_map(ToModelInputs(config, dynamic_masking=d.masking == "dynamic"))
    read = grain.ReadOptions(num_threads=2, prefetch_buffer_size=config.train.prefetch)
    if config.train.packing:   # rows of several examples (kjax/batches/packing.py)
        local = batch // process_count
        ds = ds[process_index::process_count].to_iter_dataset(read)
        return in_workers(pack(ds, config, bins=local).batch(local, drop_remainder=True),
                          config)
    # Process p takes rows [p·L, (p+1)·L) of every global batch (lazily: it
    # reads only those). Masks are drawn by global record index, so the
    # global batch, and the loss curve, do not depend on the process count.
    ds = ds.batch(batch // process_count, drop_remainder=True)[process_index::process_count]
    return in_workers(ds.to_iter_dataset(read), config)


def in_workers(ds: grain.IterDataset, config) -> grain.IterDataset:
    """With train.loader_workers = N > 0, N grain processes build the batches
    (the per-example Python of the input mode, masking, B and knowledge targets
    leaves the training process and its GIL); grain keeps their order and
    checkpoints their state, so the batches are those of N = 0."""
    workers = config.train.get("loader_workers", 0)
    if not workers:
        return ds
    from absl import flags
    if not flags.FLAGS.is_parsed():   # grain's workers read absl flags (their defaults)
        flags.FLAGS.mark_as_parsed()
    return ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers,
                                                       per_worker_buffer_size=2))


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
