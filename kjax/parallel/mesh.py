"""The device mesh and the logical-axis rules (MaxText style).

Model code names axes logically (`embed`, `heads`, `mlp`, `vocab`, ...);
the rules below map those names onto mesh axes. Changing how a model is
sharded means editing these rules or the mesh shape, never the model.

    data    pure data parallelism: params replicated, batch split
    fsdp    batch split too, and params/optimizer state sharded on `embed`
    tensor  Megatron-style split of heads, mlp and vocab
"""
from __future__ import annotations

import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from kjax.errors import KjaxError

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")

LOGICAL_RULES = (
    ("batch", BATCH_AXES),
    ("length", None),
    ("act_embed", None),     # activations keep the hidden axis whole
    ("embed", "fsdp"),       # parameters: FSDP shards the hidden axis
    ("vocab", "tensor"),
    ("heads", "tensor"),
    ("kv", None),
    ("mlp", "tensor"),
    ("layers", None),
)


# Environment that turns a run into one process of a multi-process job.
# jax itself reads JAX_COORDINATOR_ADDRESS but not the process count/id;
# kjax passes all three, so the localhost test and real clusters share a path.
COORDINATOR_ENV = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


def maybe_initialize_distributed() -> None:
    """Multi-process runs (TPU pods, several GPU hosts, the 2-process CPU test)
    need `jax.distributed.initialize()` before any other JAX call. When:

    - JAX_COORDINATOR_ADDRESS=host:port, JAX_NUM_PROCESSES=N, JAX_PROCESS_ID=i
      are set: those (any of the last two missing: jax's cluster detection);
    - TPU_WORKER_HOSTNAMES lists several hosts (a pod slice), or
      KJAX_DISTRIBUTED=1: jax's auto-detection (TPU metadata, SLURM, ...).
    """
    if jax.distributed.is_initialized():
        return
    address, count, index = (os.environ.get(k) for k in COORDINATOR_ENV)
    multi_host_tpu = "," in os.environ.get("TPU_WORKER_HOSTNAMES", "")
    if not (address or multi_host_tpu or os.environ.get("KJAX_DISTRIBUTED")):
        return
    try:
        count = int(count) if count else None
        index = int(index) if index else None
    except ValueError:
        raise KjaxError(f"JAX_NUM_PROCESSES={count!r} and JAX_PROCESS_ID={index!r} must be "
                        f"integers (the process count and this process's 0-based id)") from None
    if count is not None and index is not None and not 0 <= index < count:
        raise KjaxError(f"JAX_PROCESS_ID={index} is outside 0..{count - 1} "
                        f"(JAX_NUM_PROCESSES={count})")
    jax.distributed.initialize(coordinator_address=address or None, num_processes=count,
                               process_id=index)


def mesh_shape(mesh_cfg, num_devices: int) -> tuple[int, int, int]:
    sizes = [mesh_cfg[a] for a in MESH_AXES]
    fixed = int(np.prod([s for s in sizes if s != -1]))
    if sizes.count(-1) > 1:
        raise KjaxError("only one mesh axis may be -1 (fill); set the others explicitly")
    if -1 in sizes:
        if fixed == 0 or num_devices % fixed:
            raise KjaxError(f"mesh {dict(zip(MESH_AXES, sizes))}: {fixed} does not divide "
                            f"{num_devices} devices; choose axis sizes whose product divides it")
        sizes[sizes.index(-1)] = num_devices // fixed
    if int(np.prod(sizes)) != num_devices:
        raise KjaxError(f"mesh data={sizes[0]} × fsdp={sizes[1]} × tensor={sizes[2]} = "
                        f"{int(np.prod(sizes))} but there are {num_devices} devices; set "
                        f"--config.mesh.data=-1 to fill, or sizes whose product is {num_devices}")
    return tuple(sizes)


def check_mesh(config, num_devices: int, num_processes: int = 1) -> tuple[int, int, int]:
    """The mesh shape for `num_devices`, after every check that needs no device."""
    shape = mesh_shape(config.mesh, num_devices)
    if config.train.batch_size % num_processes:  # each process loads its own rows
        raise KjaxError(f"train.batch_size={config.train.batch_size} is not divisible by the "
                        f"{num_processes} processes; use a multiple of {num_processes}")
    batch_shards = shape[0] * shape[1]
    if config.train.batch_size % batch_shards:
        raise KjaxError(f"train.batch_size={config.train.batch_size} is not divisible by the "
                        f"{batch_shards} batch shards (mesh data×fsdp); use a multiple of "
                        f"{batch_shards}")
    m = config.model
    for name, size, axis in (("hidden_size", m.hidden_size, shape[1]),
                             ("num_heads", m.num_heads, shape[2]),
                             ("intermediate_size", m.intermediate_size, shape[2])):
        if size % axis:
            raise KjaxError(f"model.{name}={size} is not divisible by the mesh axis that "
                            f"shards it (size {axis}); change the mesh or the model")
    return shape


def make_mesh(config, devices=None) -> jax.sharding.Mesh:
    devices = devices if devices is not None else jax.devices()
    processes = len({d.process_index for d in devices})
    shape = check_mesh(config, len(devices), processes)
    return jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES),
                         devices=devices)


def logical_sharding(mesh, logical_specs):
    """Pytree of logical PartitionSpecs → pytree of NamedShardings."""
    return nn.logical_to_mesh_sharding(logical_specs, mesh, LOGICAL_RULES)


def batch_sharding(mesh) -> NamedSharding:
    return NamedSharding(mesh, P(BATCH_AXES))


def replicated(mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def put_batch(batch: dict, mesh) -> dict:
    """Host-local numpy batch → global jax.Arrays split over the batch axes.
    Each process passes its own slice; JAX stitches the global array."""
    sharding = batch_sharding(mesh)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


def global_any(flag: bool, mesh) -> jax.Array:
    """Every process's boolean → one replicated 'any' (a tiny all-reduce over
    the mesh). Dispatched asynchronously: read it a step later so the check
    costs no host sync. Processes agree because they read the same value."""
    sharding = NamedSharding(mesh, P(MESH_AXES))
    local = np.full((len(mesh.local_devices),), flag, np.int32)
    flags = jax.make_array_from_process_local_data(sharding, local, (mesh.devices.size,))
    return _any(flags)


@jax.jit
def _any(flags):
    return jnp.max(flags) > 0


def read_replicated(x: jax.Array):
    """Host value of a replicated array; works when it spans several processes."""
    return np.asarray(x.addressable_data(0))
