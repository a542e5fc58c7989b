"""The train stream: example k of a run (k = 0, 1, 2 … its global position)
is a pure function of (config, k), read by random access, and the data state
is where the stream is.

    one source    data.dir's train shards, shuffled by index permutation
                  (reseeded every epoch) and repeated: example k is record
                  perm_epoch(k mod n)
    a mixture     each source so, on a seed of its own, mixed by grain's
                  `MapDataset.mix` in the weights' proportions
                  (kjax/config/sources.py, `mixture_weights`): example k
                  comes from source i(k) as its j(k)-th example, a function
                  of k alone

Every example is tagged with its `position` k (and its `source` id in a
mixture) before the loader's transform, which draws its masks from grain's
per-record generator (a function of the seed and k) at the rate of the step
k lands in (`step_of_position`, kjax/config/mask_schedule.py). Step s of a
run reads examples [position_of_step(s), position_of_step(s + 1)): [s·B,
(s+1)·B) at batch size B, or through the stages of a batch ramp
(train.batch_ramp, kjax/config/batch_ramp.py, whose `Ramp` is this map);
process p of P reads rows [p·B/P, (p+1)·B/P) of it. None of this depends on
the process, device, loader-worker or microbatch count.

The data state a checkpoint holds is `{"position": k}`: the examples the run
has consumed (plus the loader's per-source counters,
kjax/train/stream_meter.py). A resume rebuilds the stream at k, whatever its
worker count, and at a ramp's stage change the iterator builds the stream
again at the new batch from k; a later run may take the stream over at k
or, in a mixture, with other weights: `origin`
({"position": K0, "source_examples": {name: consumed}}, from the parent's
data state: its position and its counters' `sources.examples`) starts a new
mixing at K0 with each source continuing where it stood, its masks drawn on
a generator of its own (`mask_seed`). The same weights need no origin: the
position alone continues the parent's mixing.

Checkpoints written before this (grain's own `{"next_index": batches}`, or
its worker-process state) are read as positions. Packed rows
(`train.packing`) keep grain's packer state: a packed row holds a varying
number of examples.
"""
from __future__ import annotations

import functools
import sys
import zlib

import grain
import numpy as np

from kjax.config.batch_ramp import Ramp, ramp_of
from kjax.config.sources import Source, sources
from kjax.examples import records

MASK_STREAM = 3   # the mixture's mask generator: a seed of its own, apart from the sources'


def step_of_position(position: int, config) -> int:
    """The 0-based step whose global batch holds example `position`: what a
    record's mask rate follows (position // batch_size, or through the
    stages of train.batch_ramp: kjax/config/batch_ramp.py)."""
    return ramp_of(config).step_of_position(position)


def shuffled_source(directory: str, seed: int) -> grain.MapDataset:
    """One prepared folder's train records, shuffled and repeated for ever."""
    source = grain.sources.ArrayRecordDataSource(records.local_shards(directory, "train"))
    return grain.MapDataset.source(source).seed(seed).shuffle().repeat(None)


def _decoded_at(position0: int, index: int, record: bytes) -> dict:
    return {**records.decode_example(record), "position": position0 + index}


def _with_source(source_id: int, record: bytes) -> dict:
    return {**records.decode_example(record), "source": source_id}


def _at(position0: int, index: int, example: dict) -> dict:
    return {**example, "position": position0 + index}


def source_seed(config, name: str) -> int:
    """The shuffle seed of one source: its name and the run's seeds."""
    base = config.data.seed + config.train.seed
    return int(np.random.SeedSequence([base, zlib.crc32(name.encode())]).generate_state(1)[0])


def mask_seed(config, origin_position: int = 0) -> int:
    """The seed of a mixture's per-record mask generator (grain's random_map);
    a mixing begun at another position has its own."""
    seq = [config.data.seed, config.train.seed, MASK_STREAM, int(origin_position)]
    return int(np.random.SeedSequence(seq).generate_state(1)[0])


def source_sizes(found: list[Source]) -> list[int]:
    """Train examples of each prepared source (its meta.json)."""
    return [int(records.read_meta(s.dir).get("train_examples", 0)) for s in found]


def mixture_weights(config, found: list[Source] | None = None) -> list[float]:
    """The probability of each source (by name order): weight_i · n_i^τ,
    normalised; τ = data.source_temperature (0: the weights alone)."""
    found = sources(config) if found is None else found
    tau = float(config.data.get("source_temperature", 0.0))
    raw = [s.weight for s in found]
    if tau:
        raw = [w * float(n) ** tau for w, n in zip(raw, source_sizes(found))]
    total = sum(raw)
    return [w / total for w in raw]


def example_stream(config, origin: dict | None = None) -> tuple[grain.MapDataset, int | None]:
    """(the run's examples by global position, the seed of its mask generator:
    None for grain's default seeding). Index i of the dataset is position
    origin + i (0 unless a later run took the stream over)."""
    d = config.data
    found = sources(config)
    if not found:   # the one source, exactly as before mixtures (the same masks)
        ds = shuffled_source(d.dir, d.seed + config.train.seed)
        return ds.map_with_index(functools.partial(_decoded_at, 0)), None
    start = int((origin or {}).get("position", 0))
    consumed = dict((origin or {}).get("source_examples", {}))
    parts = [shuffled_source(s.dir, source_seed(config, s.name)).map(
        functools.partial(_with_source, i)) for i, s in enumerate(found)]
    offsets = [int(consumed.get(s.name, 0)) for s in found]
    mixed = grain.MapDataset.select_from_datasets(
        parts, Selection(selection(mixture_weights(config, found)), offsets))
    return mixed.map_with_index(functools.partial(_at, start)), mask_seed(config, start)


def _pair(source_id: int, index: int) -> tuple[int, int]:
    return source_id, index


def selection(weights: list[float]) -> grain.MapDataset:
    """Index i of a mixing → (source id, the source's example index), by
    grain's `MapDataset.mix` in the weights' proportions (sources of weight 0
    left out): a function of i alone, computed without reading a record."""
    kept = [i for i, w in enumerate(weights) if w > 0]
    picks = [grain.MapDataset.range(sys.maxsize).map(functools.partial(_pair, i)) for i in kept]
    return grain.MapDataset.mix(picks, [weights[i] for i in kept]) if len(picks) > 1 \
        else picks[0]


class Selection:
    """grain's selection map (`MapDataset.select_from_datasets`): index i of
    a mixing → (source, example index), each source continuing from its
    offset (the examples it gave before this mixing began)."""

    def __init__(self, picks: grain.MapDataset, offsets: list[int]):
        self.picks, self.offsets = picks, offsets

    def __len__(self) -> int:
        return len(self.picks)

    def __getitem__(self, index: int) -> tuple[int, int]:
        source, j = self.picks[index]
        return source, self.offsets[source] + j


def start_position(state: dict, batch_size: int) -> int:
    """The position a data state names: ours, or an older checkpoint's grain
    state (batches consumed, in one process or summed over its workers)."""
    if "position" in state:
        return int(state["position"])
    if "next_index" in state:
        return int(state["next_index"]) * batch_size
    workers = state.get("iterators_in_use_states")
    if workers is not None:
        return sum(int(w["next_index"]) for w in workers) * batch_size
    raise ValueError(f"unknown data state {sorted(state)}: not a kjax loader position")


class PositionIterator:
    """Batches from `build(position, origin, batch_size)` (a grain iterable of
    this process's rows of the global batches of `batch_size` from `position`
    on); the state is the position. At a batch ramp's stage change the
    stream is built again at the new batch from the exact position the last
    stage ended at: no example skipped or read twice."""

    def __init__(self, build, ramp: Ramp, origin: dict | None = None):
        self.build, self.ramp, self.origin = build, ramp, origin
        self.position, self._inner = int((origin or {}).get("position", 0)), None
        self._stage = None

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        stage = self.ramp.stage_of_position(self.position)
        if self._inner is None or stage is not self._stage:
            self.close()
            self._stage = stage
            self._inner = iter(self.build(self.position, self.origin, stage.batch_size))
        batch = next(self._inner)
        self.position += stage.batch_size
        return batch

    def get_state(self) -> dict:
        state = {"position": self.position}
        if self.origin:
            state["origin"] = self.origin
        return state

    def set_state(self, state: dict) -> None:
        self.close()
        self.origin = state.get("origin") or None
        self.position = start_position(state, self.ramp.stages[-1].batch_size)

    def close(self) -> None:
        inner, self._inner = self._inner, None
        if inner is not None and hasattr(inner, "close"):
            inner.close()


class TrainStream:
    """`iter()` gives a PositionIterator (the trainer's iterator)."""

    def __init__(self, build, ramp: Ramp, origin: dict | None = None):
        self.build, self.ramp, self.origin = build, ramp, origin

    def __iter__(self) -> PositionIterator:
        return PositionIterator(self.build, self.ramp, self.origin)
