"""What the loader fed the run, logged with the other metrics:

    masked_share               masked positions / maskable positions (real, not
                               [CLS]/[SEP]) of the logged step's global batch:
                               the realised masking rate
    mask_rate                  the rate the schedule asked for at that step
                               (dynamic masking; kjax/config/mask_schedule.py)
    source/NAME/examples       a mixture's examples and tokens of each source
    source/NAME/tokens         since the run began (cumulative)

Both are computed on the devices from the global batch (each process reads
only its rows), by small programs of their own: the train step's program is
the same with mixtures and schedules as without. A mixture's rows carry
`source` and `source_tokens` (kjax/batches/loader.py); `take` counts them
every step and drops them from the batch, `fold` adds the steps' counts up on
the host in int64 (read back asynchronously, so no step waits). The totals
go into the data state of every checkpoint (key "sources"), so a resumed run
continues them exactly, on any process, device, worker or microbatch count.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from kjax.config.mask_schedule import mask_rate
from kjax.config.sources import source_names
from kjax.inputs import input_mode
from kjax.parallel.mesh import replicated

KEY = "sources"                        # the meter's part of a checkpoint's data state
ROW_KEYS = ("source", "source_tokens", "source_starts")  # the loader's, for the meter alone
FOLD_EVERY = 256                       # steps of counts held before they are added up


def _per_source(batch, count: int):
    """(examples, tokens) of each source in one global batch (int32: a step's
    counts are far below 2³¹; the run's sums are int64 on the host). Rows of
    one example: `source` and its `source_tokens` per row; packed rows
    (kjax/batches/packing.py): `source` per token (-1: padding) and
    `source_starts`, 1 at each example's first token."""
    source = batch["source"]
    if "source_starts" not in batch:
        examples, tokens = jnp.ones_like(source), batch["source_tokens"]
    else:
        examples, tokens = batch["source_starts"], (source >= 0).astype(jnp.int32)
    ids = jnp.maximum(source, 0).ravel()
    return (jax.ops.segment_sum(examples.ravel(), ids, num_segments=count),
            jax.ops.segment_sum(tokens.ravel(), ids, num_segments=count))


def _masked_share(mode, batch):
    return batch["mlm_weights"].sum() / jnp.maximum(mode.maskable_positions(batch).sum(), 1)


class StreamMeter:
    def __init__(self, config, mesh, data_state: dict | None = None):
        self.config, self.names = config, source_names(config)
        self.dynamic = config.data.masking == "dynamic"
        saved = (data_state or {}).get(KEY, {})
        self.examples, self.tokens = (
            np.array([int(saved.get(kind, {}).get(n, 0)) for n in self.names], np.int64)
            for kind in ("examples", "tokens"))
        self.pending: list = []
        self.mode = input_mode(config)
        self._share = jax.jit(functools.partial(_masked_share, self.mode),
                              out_shardings=replicated(mesh))
        self._count = jax.jit(functools.partial(_per_source, count=len(self.names)),
                              out_shardings=replicated(mesh))

    @staticmethod
    def iterator_state(data_state: dict) -> dict:
        """The loader's part of a checkpoint's data state."""
        return {k: v for k, v in data_state.items() if k != KEY}

    def data_state(self, iterator_state: dict) -> dict:
        """The loader's state with the counters (all steps so far added up)."""
        if not self.names:
            return iterator_state
        self.fold()
        return {**iterator_state, KEY: self.counters()}

    def counters(self) -> dict:
        return {"examples": dict(zip(self.names, map(int, self.examples))),
                "tokens": dict(zip(self.names, map(int, self.tokens)))}

    def take(self, batch: dict) -> dict:
        """Counts a step's global batch (dispatched, not waited for); returns
        the batch without the rows' source keys."""
        if not self.names:
            return batch
        counts = self._count({k: batch[k] for k in ROW_KEYS if k in batch})
        for array in counts:
            array.copy_to_host_async()
        self.pending.append(counts)
        if len(self.pending) >= FOLD_EVERY:
            self.fold()
        return {k: v for k, v in batch.items() if k not in ROW_KEYS}

    def fold(self) -> None:
        """Adds the pending steps' counts to the run's totals."""
        for examples, tokens in jax.device_get(self.pending):
            self.examples += np.asarray(examples, np.int64)
            self.tokens += np.asarray(tokens, np.int64)
        self.pending = []

    def metrics(self, batch: dict, step: int) -> dict:
        """The logged step's figures (`step`: 1-based, after its update)."""
        keys = ("mlm_weights", "attention_mask", self.mode.token_ids_key)
        out = {"masked_share": float(self._share({k: batch[k] for k in keys}))}
        if self.dynamic:
            out["mask_rate"] = mask_rate(self.config.data, step - 1, self.config.train.num_steps)
        if self.names:
            self.fold()
            for name, examples, tokens in zip(self.names, self.examples, self.tokens):
                out[f"source/{name}/examples"] = int(examples)
                out[f"source/{name}/tokens"] = int(tokens)
        return out
