"""The device mesh and the logical-axis rules (MaxText style).

Model code names axes logically (`embed`, `heads`, `mlp`, `vocab`, ...);
the rules, `mesh.rules` in the config (default: kjax/config/schema.py
LOGICAL_RULES), map those names onto mesh axes. Changing how a model is
sharded means changing the rules or the mesh shape, never the model.

    data    pure data parallelism: params replicated, batch split
    fsdp    batch split too, and params/optimizer state sharded on `embed`
    tensor  Megatron-style split of heads, mlp and vocab
"""
from __future__ import annotations

import contextlib
import functools
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from kjax.config.batch_ramp import ramp_of
from kjax.config.schema import LOGICAL_RULES, MESH_AXES
from kjax.errors import KjaxError

BATCH_AXES = ("data", "fsdp")   # the loader feeds each process whole data×fsdp shards


def logical_rules(config) -> tuple:
    """`mesh.rules` as flax wants them: (name, mesh axis | tuple | None) pairs."""
    return tuple((name, tuple(axes) if isinstance(axes, list) else axes)
                 for name, axes in config.mesh.rules)


@contextlib.contextmanager
def on_mesh(mesh, config):
    """The mesh and the config's logical rules, as every jit call needs."""
    with jax.set_mesh(mesh), nn.logical_axis_rules(logical_rules(config)):
        yield


# Environment that turns a run into one process of a multi-process job.
# jax itself reads JAX_COORDINATOR_ADDRESS but not the process count/id;
# kjax passes all three, so the localhost test and real clusters share a path.
COORDINATOR_ENV = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")
DISTRIBUTED_ENV = "KJAX_DISTRIBUTED"   # 1: always initialise; 0: never (opt out)
# Set on Cloud TPU hosts by GKE / the TPU runtime (jax's GkeTpuCluster reads the first two).
TPU_ENV = ("TPU_WORKER_HOSTNAMES", "TPU_PROCESS_ADDRESSES", "TPU_ACCELERATOR_TYPE",
           "MEGASCALE_COORDINATOR_ADDRESS")


def on_cloud_tpu_vm() -> bool:
    """A Cloud TPU host: TPU environment variables, or TPU chips on the PCI
    bus (the check jax's own cloud_tpu_init makes). JAX_PLATFORMS without
    `tpu` (a CPU run on a TPU VM) means no."""
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if platforms and "tpu" not in platforms.lower():
        return False
    if any(os.environ.get(k) for k in TPU_ENV):
        return True
    try:
        from jax._src import hardware_utils   # private, hence the guard
        chips, _ = hardware_utils.num_available_tpu_chips_and_device_id()
        return chips > 0
    except Exception:  # noqa: BLE001 - any failure means "no TPU found"
        return False


def maybe_initialize_distributed() -> None:
    """Multi-process runs (TPU pods, several GPU hosts, the 2-process CPU test)
    need `jax.distributed.initialize()` before any other JAX call. As MaxText
    does, kjax always calls it on a Cloud TPU VM (jax finds the coordinator,
    process count and id in the TPU metadata; one host is a job of one), and
    elsewhere when told:

    - JAX_COORDINATOR_ADDRESS=host:port, JAX_NUM_PROCESSES=N, JAX_PROCESS_ID=i
      are set: those (any of the last two missing: jax's cluster detection);
    - KJAX_DISTRIBUTED=1: jax's cluster detection (SLURM, Open MPI, GKE, ...).

    KJAX_DISTRIBUTED=0 turns all of this off (one process per host). A process
    that stops answering stops the others within KJAX_PEER_TIMEOUT seconds
    (default 60; kjax/parallel/watchdog.py).
    """
    if jax.distributed.is_initialized():
        return
    flag = os.environ.get(DISTRIBUTED_ENV, "").strip().lower()
    if flag in ("0", "false", "no", "off"):
        return
    address, count, index = (os.environ.get(k) for k in COORDINATOR_ENV)
    told = bool(address) or flag in ("1", "true", "yes", "on")
    if not (told or on_cloud_tpu_vm()):
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
    from kjax.parallel import watchdog
    timeout = watchdog.peer_timeout()
    # jax's heartbeat timeout (default 100 s) above kjax's watchdog's, so a lost
    # process is reported by the watchdog in one line (watchdog.py), not by jax's abort.
    heartbeat = {} if 2 * timeout <= 100 else {"heartbeat_timeout_seconds": int(2 * timeout)}
    try:
        jax.distributed.initialize(coordinator_address=address or None, num_processes=count,
                                   process_id=index, **heartbeat)
    except (RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise KjaxError(f"jax.distributed.initialize() failed ({first}); set "
                        f"{DISTRIBUTED_ENV}=0 to run this host as a single process") from None
    watchdog.start(timeout)
    if jax.process_count() > 1:
        checkpoint_barriers_through_coordinator()


MEET_TIMEOUT_S = 7200   # a slow peer is waited for; a dead one ends the run through the watchdog


def processes_meet(name: str) -> None:
    """Every process waits here for the others (the coordination service's
    barrier; no device collective). Called before a run's first step: gloo,
    jax's CPU collectives, gives the processes 30 s to form a communicator at
    their first collective, and processes that started together can be
    further apart than that by then on a loaded host (imports, data, their
    compile): they meet first (docs/RECOVERY.md)."""
    if jax.process_count() == 1:
        return
    from jax._src import distributed
    distributed.global_state.client.wait_at_barrier(f"kjax/{name}", MEET_TIMEOUT_S * 1000)


def host_allgather(tree):
    """Every process's arrays in `tree`, each stacked on a new first axis
    (jax's `process_allgather`), once the processes have met
    (`processes_meet`): gloo gives processes 30 s to form a communicator at
    their first collective, and a resume's host-side checks can be a run's
    first. Every call meets at the one barrier name, so callers must make
    the same calls in the same order on every process (the checkpoint
    restore does, whatever each process read: manager.agree)."""
    if jax.process_count() == 1:
        return jax.tree.map(lambda x: np.asarray(x)[None], tree)
    processes_meet("host_allgather")
    from jax.experimental import multihost_utils
    return jax.tree.map(np.asarray, multihost_utils.process_allgather(tree))


def checkpoint_barriers_through_coordinator() -> None:
    """orbax's checkpoint barriers through the coordination service's barrier,
    not device collectives. By default orbax syncs processes with
    `sync_global_devices` (a psum over every device: on CPU a gloo all-reduce,
    on GPU NCCL), which it documents as unsafe beside other collectives from
    another thread: a final save can hang with every process alive and
    waiting (docs/RECOVERY.md). The coordinator's barrier (orbax's
    `experimental_orbax_use_distributed_barrier`, an absl flag) shares no
    communicator with the step's collectives and has orbax's timeouts."""
    from absl import flags
    from orbax.checkpoint._src.multihost import multihost   # defines the flag
    if not flags.FLAGS.is_parsed():   # kjax parses no absl flags; orbax reads their values
        flags.FLAGS.mark_as_parsed()
    flags.FLAGS[multihost.EXPERIMENTAL_ORBAX_USE_DISTRIBUTED_BARRIER.name].value = True


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
    batch_shards = shape[0] * shape[1]
    if batch_shards % num_processes:
        # Each process feeds only its own rows (put_batch): a batch shard whose
        # devices sit on two hosts would get different rows from each.
        raise KjaxError(f"mesh data={shape[0]} × fsdp={shape[1]} gives {batch_shards} batch "
                        f"shard(s), which {num_processes} processes cannot split (mesh.tensor="
                        f"{shape[2]} spans hosts); keep mesh.tensor within one host's "
                        f"{num_devices // num_processes} devices")
    for key, batch, micro in batch_stages(config):
        _check_batch(key, batch, micro, shape, num_processes)
    m = config.model
    for name, size, axis in (("hidden_size", m.hidden_size, shape[1]),
                             ("num_heads", m.num_heads, shape[2]),
                             ("intermediate_size", m.intermediate_size, shape[2])):
        if size % axis:
            raise KjaxError(f"model.{name}={size} is not divisible by the mesh axis that "
                            f"shards it (size {axis}); change the mesh or the model")
    return shape


def batch_stages(config) -> list[tuple[str, int, int]]:
    """(what names it, global batch, microbatches) of every batch a run
    trains at: train.batch_size's, and each train.batch_ramp stage's
    (kjax/config/batch_ramp.py)."""
    stages = ramp_of(config).stages
    return [(f"train.batch_size={s.batch_size}" if s.end_step is None else
             f"train.batch_ramp[{s.index}]'s batch {s.batch_size}", s.batch_size, s.microbatches)
            for s in stages[::-1]]


def _check_batch(key: str, batch: int, micro: int, shape, num_processes: int) -> None:
    """One batch against the mesh: rows for every process and batch shard,
    microbatches the shards split evenly (one line each)."""
    batch_shards = shape[0] * shape[1]
    if batch % num_processes:  # each process loads its own rows
        raise KjaxError(f"{key} is not divisible by the {num_processes} processes; use a "
                        f"multiple of {num_processes}")
    if batch % batch_shards:
        raise KjaxError(f"{key} is not divisible by the {batch_shards} batch shards (mesh "
                        f"data×fsdp); use a multiple of {batch_shards}")
    if micro > 1 and batch % (micro * batch_shards):
        raise KjaxError(f"{key} in train.microbatches={micro} makes microbatches of "
                        f"{batch / micro:g} examples, which the {batch_shards} batch shards "
                        f"(mesh data×fsdp) cannot split evenly; use a batch_size that is a "
                        f"multiple of {micro * batch_shards}, or fewer microbatches")
    if min(shape) > 1 and batch == micro * batch_shards:
        # XLA's SPMD partitioner (jax 0.10.2, XLA:CPU) gave the encoder wrong
        # gradients on a mesh with all three axes > 1 and one row per batch
        # shard (tests/test_accumulation.py measures it); two rows are right.
        raise KjaxError(f"mesh data={shape[0]} × fsdp={shape[1]} × tensor={shape[2]} with one "
                        f"example per batch shard ({key}, train.microbatches={micro}) is "
                        f"refused: XLA computes wrong gradients there; give each shard two "
                        f"rows or more, or set one mesh axis to 1")


def make_mesh(config, devices=None) -> jax.sharding.Mesh:
    devices = devices if devices is not None else jax.devices()
    processes = len({d.process_index for d in devices})
    shape = check_mesh(config, len(devices), processes)
    mesh = jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES),
                         devices=devices)
    check_batch_layout(mesh)
    return mesh


def check_batch_layout(mesh) -> None:
    """Every batch shard (a data×fsdp index) on the devices of one process:
    what check_mesh's arithmetic implies, checked on jax's actual layout."""
    for index in np.ndindex(*mesh.devices.shape[:2]):
        owners = sorted({d.process_index for d in mesh.devices[index].flat})
        if len(owners) > 1:
            raise KjaxError(f"batch shard {index} of the mesh spans processes {owners}: each "
                            f"process must feed whole batch shards; keep mesh.tensor within "
                            f"one host's devices")


def logical_sharding(mesh, logical_specs, rules=LOGICAL_RULES):
    """Pytree of logical PartitionSpecs → pytree of NamedShardings."""
    return nn.logical_to_mesh_sharding(logical_specs, mesh, rules)


def data_sharded(sharding: NamedSharding, shape) -> NamedSharding:
    """The layout of a parameter, its gradient and its optimizer state under
    `mesh.shard_update` (ZeRO over the data axis: each device keeps a slice):
    `sharding` with mesh.data added on the largest dimension that no mesh
    axis of more than one device splits yet and that the data axis divides;
    as it was when none does (a scalar, a bias of odd width) or the axis has
    one device. A function of the array's spec, shape and the mesh's sizes
    alone, so a parameter, its gradient and its optimizer moments all get
    the same layout."""
    sizes = sharding.mesh.shape
    data = sizes["data"]
    spec = tuple(sharding.spec) + (None,) * (len(shape) - len(sharding.spec))
    if data == 1 or "data" in _spec_axes(spec):
        return sharding
    axes = [tuple(e) if isinstance(e, tuple) else () if e is None else (e,) for e in spec]
    free = [d for d in range(len(shape)) if shape[d] % data == 0
            and all(sizes[a] == 1 for a in axes[d])]
    if not free:
        return sharding
    d = max(free, key=lambda i: (shape[i], -i))   # the largest; the first of equals
    entry = axes[d] + ("data",)
    return NamedSharding(sharding.mesh, P(*spec[:d], entry[0] if len(entry) == 1 else entry,
                                          *spec[d + 1:]))


def _spec_axes(spec) -> set:
    """The mesh axes a PartitionSpec names."""
    names = set()
    for entry in spec:
        names |= set(entry) if isinstance(entry, tuple) else {entry} - {None}
    return names


def manual_part(spec, axes) -> P:
    """`spec` naming only the mesh `axes` (a shard_map's manual axes): the
    layout a shard_map over them sees, the other axes left to XLA."""
    def keep(entry):
        names = tuple(a for a in (entry if isinstance(entry, tuple) else (entry,))
                      if a in axes)
        return None if not names else names[0] if len(names) == 1 else names
    return P(*(keep(e) for e in spec))


def batch_sharding(mesh) -> NamedSharding:
    return NamedSharding(mesh, P(BATCH_AXES))


def replicated(mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def put_batch(batch: dict, mesh) -> dict:
    """Host-local numpy batch → global jax.Arrays split over the batch axes.
    Each process passes its own slice; JAX stitches the global array."""
    sharding = batch_sharding(mesh)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


def global_any(flag: bool, mesh, after: jax.Array) -> jax.Array:
    """Every process's boolean → one replicated 'any' (a tiny all-reduce over
    the mesh). Dispatched asynchronously: read it a step later so the check
    costs no host sync. Processes agree because they read the same value.
    `after` (the step's loss) orders it after that step on every device: a
    device whose step failed (a peer died in its all-reduce) starts no new
    collective, which its neighbours, still in the step's, would take for
    theirs (docs/RECOVERY.md)."""
    sharding = NamedSharding(mesh, P(MESH_AXES))
    local = np.full((len(mesh.local_devices),), flag, np.int32)
    flags = jax.make_array_from_process_local_data(sharding, local, (mesh.devices.size,))
    return _any(flags, after)


@functools.partial(jax.jit, keep_unused=True)   # `after` is an argument the program waits for
def _any(flags, after):
    del after
    return jnp.max(flags) > 0


def read_replicated(x: jax.Array):
    """Host value of a replicated array; works when it spans several processes."""
    return np.asarray(x.addressable_data(0))
