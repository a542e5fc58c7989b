"""Fingerprints of the arrays in a checkpoint, so a restore notices bytes that
are not the ones written. orbax checks that items exist, not what the array
chunks hold: one flipped bit in an OCDBT data file restores silently.

The fingerprint of an array is the sum of its elements' bit patterns, read
as unsigned words (8/16/32 bits; 64-bit elements as two 32-bit words),
modulo 2**32. Why this and not a CRC of the bytes:
- it splits over shards: each process sums the shards it owns (replica 0,
  exactly what orbax writes), and the total is the sum of the processes'
  parts, whatever mesh, sharding or process count wrote or reads the array;
- it is one vectorised pass (numpy on CPU hosts, a jitted reduction on the
  accelerator that holds the shard, so nothing extra crosses to the host);
- any change to one element changes the sum for certain (it moves by a
  nonzero amount below 2**32); wider damage (a zeroed or shuffled chunk) is
  missed only if the changes cancel exactly, about 1 in 2**32.
A tensorstore read error (a missing or truncated chunk) is caught before the
fingerprint is needed; the fingerprint catches what reads back silently.

Each process stores the sums of what it owns (`partial_sums`); a restore
adds every process's part up again (`total`) and compares with the sums of
the restored arrays, gathered over processes (`restored_sums`).
"""
from __future__ import annotations

import hashlib
import json

import jax
import jax.numpy as jnp
import numpy as np

from kjax.parallel.mesh import host_allgather

MASK = 0xFFFFFFFF
_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint32}


def key_name(path) -> str:
    """'params/encoder/layers/mlp_in/kernel', 'opt_state/1/0/mu/...': one
    string per leaf, the same for a restored tree and orbax's metadata tree."""
    parts = []
    for k in path:
        for attr in ("key", "idx", "name"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def _host_sum(x: np.ndarray) -> int:
    x = np.ascontiguousarray(x)
    if x.dtype == np.bool_:
        x = x.view(np.uint8)
    return int(x.reshape(-1).view(_WORDS[x.dtype.itemsize]).sum(dtype=np.uint32))


@jax.jit
def _device_sums(shards: list) -> jax.Array:
    def one(x):
        if x.dtype == jnp.bool_:
            words = x.astype(jnp.uint32)
        else:
            words = jax.lax.bitcast_convert_type(x, jnp.dtype(_WORDS[x.dtype.itemsize]))
        return jnp.sum(words.astype(jnp.uint32), dtype=jnp.uint32)
    return jnp.stack([one(x) for x in shards]) if shards else jnp.zeros((0,), jnp.uint32)


def _owned_shards(x) -> list:
    """What this process writes of `x`: replica 0 of each shard it holds."""
    if isinstance(x, jax.Array):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.extended):  # typed PRNG keys
            x = jax.random.key_data(x)
        return [s.data for s in x.addressable_shards if s.replica_id == 0]
    return [np.asarray(x)] if jax.process_index() == 0 else []


class PendingSums:
    """Word sums started on the caller's thread, finished on any thread.

    Starting takes zero-copy numpy views of CPU shards and dispatches a jitted
    reduction for accelerator shards, so the arrays may be donated right
    after (XLA orders the donation after the pending read; on CPU, JAX skips
    donating a buffer a numpy view still holds). `result` does the summing,
    off the training loop's critical path (numpy releases the GIL)."""

    def __init__(self, tree):
        self.names, self.counts, self.host, device = [], [], [], {}
        flat = []
        for path, x in jax.tree_util.tree_leaves_with_path(tree):
            shards = _owned_shards(x)
            self.names.append(key_name(path))
            self.counts.append(len(shards))
            flat += shards
        self.slots = [None] * len(flat)
        for i, s in enumerate(flat):
            dev = next(iter(s.devices())) if isinstance(s, jax.Array) else None
            if dev is None or dev.platform == "cpu":
                self.host.append((i, np.asarray(s)))
            else:
                device.setdefault(dev, []).append(i)
        self.device = [(indices, _device_sums([flat[i] for i in indices]))
                       for indices in device.values()]

    def result(self) -> dict[str, int]:
        for i, view in self.host:
            self.slots[i] = _host_sum(view)
        for indices, sums in self.device:
            for i, v in zip(indices, np.asarray(jax.device_get(sums))):
                self.slots[i] = int(v)
        self.host, self.device = [], []  # let the views go
        out, at = {}, 0
        for name, n in zip(self.names, self.counts):
            out[name] = sum(self.slots[at:at + n]) & MASK
            at += n
        return out


def partial_sums(tree) -> dict[str, int]:
    """{key path: sum over the shards this process owns} for every leaf."""
    return PendingSums(tree).result()


def total(parts: list[dict[str, int]]) -> dict[str, int]:
    """The whole arrays' fingerprints from every process's partial sums."""
    out: dict[str, int] = {}
    for part in parts:
        for name, value in part.items():
            out[name] = (out.get(name, 0) + int(value)) & MASK
    return out


def restored_sums(tree) -> dict[str, int]:
    """Fingerprints of a (restored) global tree, identical on every process."""
    part = partial_sums(tree)
    names = sorted(part)
    gathered = host_allgather(np.array([part[n] for n in names], np.uint32))
    summed = np.asarray(gathered, np.uint64).reshape(jax.process_count(), -1).sum(0)
    return {n: int(v) & MASK for n, v in zip(names, summed)}


def digest(tree) -> str:
    """16 hex digits naming a (restored) tree's contents: the SHA-256 of its
    fingerprints (lineage.json names a parent checkpoint by it)."""
    sums = restored_sums(tree)
    return hashlib.sha256(json.dumps(sums, sort_keys=True).encode()).hexdigest()[:16]


def mismatches(expected: dict[str, int], got: dict[str, int]) -> list[str]:
    """Key paths whose fingerprint differs from, or is missing in, `expected`."""
    return [k for k in sorted(set(expected) | set(got)) if expected.get(k) != got.get(k)]
