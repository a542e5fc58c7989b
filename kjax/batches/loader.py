"""Examples → fixed-shape batches with grain.

Train: the run's examples by global position (kjax/batches/stream.py: one
source, or a weighted mixture of several), ArrayRecord shards (remote ones
cached on this host first, kjax/examples/records.py) read lazily (random
access, nothing held in RAM), dynamic masking, padding to fixed shapes,
batching and per-process slicing. The data state a checkpoint holds is the
stream's position (stream.py).

Dynamic masking draws from grain's per-record generator, which is a function
of (seed, global record index), at the rate of the step the record lands in
(data.mask_schedule): the masks after a resume are the masks an
uninterrupted run would have drawn.

Held out: each source's eval shards in order, with the masks prepare stored,
or (data.eval_masked_lm_prob > 0) masks drawn at that one rate by (seed,
eval example) from the unmasked example, whatever the training rate.
"""
from __future__ import annotations

import grain
import numpy as np

from kjax.batches.packing import pack
from kjax.batches.stream import TrainStream, example_stream
from kjax.config.batch_ramp import ramp_of
from kjax.config import shaking_enabled
from kjax.config.mask_schedule import mask_rate, scheduled
from kjax.examples import records
from kjax.examples.masking import example_rng, unmasked
from kjax.inputs import input_mode

EVAL_STREAM = 1 << 20  # eval's random choices (random-variant B) use their own stream


class ToModelInputs(grain.transforms.RandomMap):
    """One example → fixed-shape model inputs, as the input mode makes them
    (kjax/inputs: its masks, positions, arrays and position ids), with the
    Eq. 1 matrix B over its positions when the model shakes. A mixture's
    rows also carry their `source` id and its tokens (`source_tokens`), which
    only the loader's counters read (kjax/train/stream_meter.py)."""

    def __init__(self, config, dynamic_masking: bool):
        self.config, self.dynamic = config, dynamic_masking
        self.mode = input_mode(config)
        self.resources = self.mode.loader_resources(config)
        self.builds_b = config.shake.variant != "none" and shaking_enabled(config)
        self.scheduled = dynamic_masking and scheduled(config.data)
        self.ramp = ramp_of(config)   # position → step (train.batch_ramp's stages)

    def random_map(self, example, rng: np.random.Generator):
        position, source = example.pop("position", None), example.pop("source", None)
        if self.scheduled and position is not None:   # the rate of the step it lands in
            step = self.ramp.step_of_position(position)
            example["mask_rate"] = mask_rate(self.config.data, step, self.config.train.num_steps)
        out = self.mode.to_model_inputs(example, self.config, rng, self.dynamic,
                                        self.resources, self.builds_b)
        if source is not None:
            out.update(source=np.asarray(source, np.int32),
                       source_tokens=np.asarray(len(example["input_ids"]), np.int32))
        return out


def train_dataset(config, process_index: int = 0, process_count: int = 1,
                  origin: dict | None = None):
    """This process's batches of the run's stream: an iterable whose iterator
    has get_state/set_state (the position, stream.py). `origin`: where a run
    that takes a mixture over with other weights starts (stream.py)."""
    d, ramp = config.data, ramp_of(config)
    for stage in ramp.stages:
        if stage.batch_size % process_count:
            raise ValueError(f"a batch of {stage.batch_size} is not divisible by "
                             f"{process_count} processes")
    read = grain.ReadOptions(num_threads=2, prefetch_buffer_size=config.train.prefetch)
    local = config.train.batch_size // process_count
    transform = ToModelInputs(config, dynamic_masking=d.masking == "dynamic")

    def examples(origin):
        ds, seed = example_stream(config, origin)
        return ds.random_map(transform, seed=seed)

    if config.train.packing:   # rows of several examples (kjax/batches/packing.py)
        ds = examples(origin)[process_index::process_count].to_iter_dataset(read)
        return in_workers(pack(ds, config, bins=local).batch(local, drop_remainder=True),
                          config)

    def build(position: int, origin: dict | None, batch: int):
        # Process p takes rows [p·L, (p+1)·L) of every global batch of B (L =
        # B / P; lazily: it reads only those). Masks are drawn by global record
        # index, so the global batch, and the loss curve, do not depend on the
        # process count. A ramp's stage builds this again at its batch.
        first = position - int((origin or {}).get("position", 0))
        ds = examples(origin)[first:].batch(batch // process_count, drop_remainder=True)
        return in_workers(ds[process_index::process_count].to_iter_dataset(read), config)
    return TrainStream(build, ramp, origin)


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
                 process_count: int = 1, directory: str | None = None):
    """The held-out examples of `directory` (default data.dir) in order: with
    the masks prepare stored or, at data.eval_masked_lm_prob, masks drawn by
    (seed, eval example) from the unmasked example. The last batch is filled
    with zero-weight rows so every example counts once. Every process yields
    the same number of batches (each is a collective), and process p's rows
    are its slice of each global batch, as in training."""
    d = config.data
    source = grain.sources.ArrayRecordDataSource(
        records.local_shards(directory or d.dir, "eval"))
    local = batch_size // process_count
    count = -(-len(source) // batch_size)
    count = min(count, max_batches) if max_batches > 0 else count
    rate = d.get("eval_masked_lm_prob", 0.0)
    to_inputs = ToModelInputs(config, dynamic_masking=bool(rate))

    def row(i):
        example = records.decode_example(source[i])
        if rate:   # one fixed rate, whatever the training rate: comparable across phases
            example = {**unmasked(example), "mask_rate": rate}
        return to_inputs.random_map(example, example_rng(d.seed, i, EVAL_STREAM))

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
