"""Two `kjax train` processes on localhost (jax.distributed, gloo collectives,
4 fake CPU devices each) against the single-process 8-device run; then
SIGTERM to one process mid-run: both save the same step and exit cleanly,
and the resumed run ends bit-identical to an uninterrupted one; then a
damaged newest step that only one process reads, which both refuse and fall
back from; then one process SIGKILLed mid-run, and one dying while it saves:
the other stops in bounded time with one line, and the restart is bit-exact."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from conftest import DEMO_CONFIG, ROOT, built_once, tiny_config, tiny_overrides
from fault_helpers import data_files, zero
from kjax.train.metrics import read_metrics
from kjax.pretrain.trainer import PREEMPTED_EXIT, train
from test_train import TIMING, final_params
from waiting import Watched, committed, finish, progress, run, start, wait_for

STEPS, EVERY = 16, 5   # saves at 5, 10, 15 and 16; the loss falls ~0.5 by step 16
EXTRA = {"train.num_steps": STEPS, "train.checkpoint_every": EVERY, "train.learning_rate": 3e-3,
         "train.warmup_steps": 4}
TIMEOUT = 600  # seconds per two-process run (a loaded 2-core CI VM); a hang fails, not blocks
PEER_TIMEOUT = 15  # KJAX_PEER_TIMEOUT: a silent process stops the others after this


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def launch(prepared, workdir, logdir, tag: str, die_saving: int | None = None) -> list[Watched]:
    """Both processes of one run, each told its role only by the environment
    (what kjax.parallel.mesh.maybe_initialize_distributed reads). Later runs
    reuse the first one's executables from a persistent compilation cache of
    their own. (On the suite's shared cache, one full run's survivor was
    aborted by gloo, "Received data size doesn't match expected size", 0.2 s
    after its peer was killed; whether the cache caused it is not known, so
    the set-up that passed every earlier CI stays.)
    `die_saving`: process 1 SIGKILLs itself while saving that step."""
    port, procs = free_port(), []
    for i in range(2):
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "4",
               "JAX_COORDINATOR_ADDRESS": f"localhost:{port}", "JAX_NUM_PROCESSES": "2",
               "JAX_PROCESS_ID": str(i), "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
               "JAX_COMPILATION_CACHE_DIR": os.path.join(logdir, "jax_cache"),
               "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "PYTHONPATH": ROOT,
               "KJAX_PEER_TIMEOUT": str(PEER_TIMEOUT)}
        log = os.path.join(logdir, f"{tag}-{i}.log")
        kjax = [sys.executable, "-m", "kjax.cli"] if die_saving is None or i == 0 else \
            [sys.executable, os.path.join(ROOT, "tests", "die_during_save.py"), str(die_saving)]
        cmd = [*kjax, "train", "--config", DEMO_CONFIG,
               "--workdir", workdir, *tiny_overrides(str(prepared), **EXTRA)]
        procs.append(start(cmd, f"process {i} ({tag})", log, env=env, cwd=ROOT))
    return procs


def finish_all(procs: list[Watched], timeout: float, workdir: str) -> list[int]:
    """Every process's exit code. One still running after `timeout` seconds
    fails the test with the run's progress and every process's last lines;
    none outlives the test."""
    deadline = time.monotonic() + timeout
    try:
        return [finish(p, max(1.0, deadline - time.monotonic()), saw=lambda: progress(workdir),
                       procs=procs) for p in procs]
    finally:
        for p in procs:
            p.stop()


def logs(logdir, tag):
    return [open(os.path.join(logdir, f"{tag}-{i}.log")).read() for i in range(2)]


def run_two(prepared, workdir, logdir, tag) -> list[str]:
    codes = finish_all(launch(prepared, workdir, logdir, tag), TIMEOUT, workdir)
    out = logs(logdir, tag)
    assert codes == [0, 0], f"{tag} exited {codes}:\n{out[0][-3000:]}\n{out[1][-3000:]}"
    return out


def train_rows(workdir) -> dict:
    rows = [r for r in read_metrics(workdir) if r["split"] == "train"]
    return {r["step"]: {k: v for k, v in r.items() if k not in TIMING} for r in rows}


def goodput_rows(workdir) -> list[dict]:
    return [r for r in read_metrics(workdir) if r["split"] == "goodput"]


@pytest.fixture(scope="session")
def straight_run(prepared, tmp_path_factory):
    """(workdir, logdir, prepared) of an uninterrupted two-process run (the
    reference), built once for all workers on the run's shared `prepared`."""
    logdir = built_once(tmp_path_factory, "two-processes",
                        lambda logdir: run_two(prepared, os.path.join(logdir, "straight"),
                                               str(logdir), "straight"))
    return os.path.join(logdir, "straight"), str(logdir), str(prepared)


@pytest.mark.slow
def test_two_processes_match_one_and_resume_bit_exactly_after_sigterm(prepared, tmp_path,
                                                                       straight_run):
    straight, logdir, prepared = straight_run   # its data: the reference trained on it
    single, cut = (str(tmp_path / n) for n in ("single", "cut"))

    # 1. Two processes × 4 devices vs one process × 8 devices: the same curve.
    train(tiny_config(prepared, **EXTRA), single, progress=False)
    two, one = train_rows(straight), train_rows(single)
    assert sorted(two) == sorted(one) == list(range(1, STEPS + 1))  # process 0 logs, once
    for step in one:
        for key in ("loss", "mlm_loss", "nsp_loss", "grad_norm"):
            assert two[step][key] == pytest.approx(one[step][key], rel=1e-5, abs=1e-6), (step, key)
    assert two[STEPS]["loss"] < two[1]["loss"] - 0.3  # it trained
    assert len(os.listdir(os.path.join(straight, "tensorboard"))) == 1  # one writer
    data_dir = os.path.join(straight, "checkpoints", str(STEPS), "data")
    assert sorted(f for f in os.listdir(data_dir) if f.endswith(".json")) == [
        "process_0-of-2.json", "process_1-of-2.json"]  # one iterator state per process
    (g,) = goodput_rows(straight)
    assert g["restarts"] == 0 and g["sessions"] == 1 and 0 < g["goodput"] <= 1
    assert g["compile_seconds"] > 0 and g["step_seconds"] > 0 and g["checkpoint_seconds"] > 0

    # 2. SIGTERM to process 1 only, once training is under way.
    procs = launch(prepared, cut, logdir, "cut")
    try:
        wait_for("a training step logged", lambda: bool(train_rows(cut)), timeout=TIMEOUT,
                 saw=lambda: progress(cut), procs=procs)
        procs[1].process.send_signal(signal.SIGTERM)
    finally:
        codes = finish_all(procs, TIMEOUT, cut)
    out = logs(logdir, "cut")
    assert codes == [PREEMPTED_EXIT] * 2, f"{codes}:\n{out[0][-3000:]}\n{out[1][-3000:]}"
    stopped = {int(o.split("after saving step ")[1].split(";")[0]) for o in out}
    assert len(stopped) == 1  # both processes agreed on the step
    (saved,) = stopped
    assert 1 <= saved < STEPS and "Traceback" not in out[0] + out[1]
    assert committed(os.path.join(cut, "checkpoints"))[-1] == saved

    # 3. Resume: the same command continues bit-exactly.
    run_two(prepared, cut, logdir, "resumed")
    config = tiny_config(prepared, **EXTRA)
    (s_state, s_data), (r_state, r_data) = final_params(config, straight), final_params(config, cut)
    assert int(r_state["step"]) == STEPS and s_data == r_data
    for a, b in zip(jax.tree.leaves(s_state), jax.tree.leaves(r_state)):
        assert np.array_equal(a, b)
    s_rows, r_rows = train_rows(straight), train_rows(cut)
    for step in range(saved + 1, STEPS + 1):
        assert s_rows[step] == r_rows[step], step
    last = goodput_rows(cut)[-1]
    assert last["restarts"] == 1 and last["sessions"] == 2
    with open(os.path.join(cut, "goodput.json")) as f:
        assert json.load(f)["last_step"] == STEPS
    # 4. The newest step of a finished two-process run damaged where only
    # process 1 reads (a data file of its own: the parameter and optimizer
    # slices it updates): process 0 reads its part fine, both agree the step
    # is damaged, process 0 moves it aside, and the run ends as before (on a
    # copy: the other tests read the reference).
    fallback = str(tmp_path / "fallback")
    shutil.copytree(straight, fallback)
    newest = os.path.join(fallback, "checkpoints", str(STEPS))
    own = [f for f in data_files(newest) if f"{os.sep}ocdbt.process_1{os.sep}" in f]
    zero(own[-1])   # its largest
    out = run_two(prepared, fallback, logdir, "fallback")
    assert (f"checkpoint {fallback}/checkpoints/{STEPS} is damaged (process 1 of 2: an array "
            f"cannot be read") in out[0], out[0][-3000:]
    assert len(os.listdir(os.path.join(fallback, "checkpoints", "damaged"))) == 1
    f_state, f_data = final_params(config, fallback)
    assert f_data == r_data and all(np.array_equal(a, b) for a, b in zip(
        jax.tree.leaves(f_state), jax.tree.leaves(r_state)))
    logged = [r["step"] for r in read_metrics(fallback) if r["split"] == "train"]
    assert logged == list(range(1, STEPS + 1))  # each step once
    print(f"\nsingle 8-device vs two-process loss at steps 1/{saved}/{STEPS}: "
          f"{one[1]['loss']:.6f}/{one[saved]['loss']:.6f}/{one[STEPS]['loss']:.6f} vs "
          f"{two[1]['loss']:.6f}/{two[saved]['loss']:.6f}/{two[STEPS]['loss']:.6f}; "
          f"SIGTERM saved step {saved}; resumed final loss {r_rows[STEPS]['loss']:.6f}")


@pytest.mark.slow
def test_a_process_killed_mid_run_stops_the_other_and_the_restart_is_bit_exact(
        prepared, tmp_path, straight_run):
    """SIGKILL to process 1 (what a crashed host does) once step 5 is saved:
    process 0 stops within KJAX_PEER_TIMEOUT with one line naming process 1
    (not in a collective forever, not with jax's abort), exit code 69; both
    started again end bit-identical to the uninterrupted run."""
    straight, logdir, prepared = straight_run   # its data: the reference trained on it
    killed = str(tmp_path / "killed")
    procs = launch(prepared, killed, logdir, "killed")
    try:
        wait_for(f"checkpoint {EVERY} committed",
                 lambda: EVERY in committed(os.path.join(killed, "checkpoints")), timeout=TIMEOUT,
                 saw=lambda: progress(killed), procs=procs)
        procs[1].stop()   # SIGKILL
        stopped_after = survivor_stops(procs, time.monotonic(), killed)
    finally:
        for p in procs:
            p.stop()
    saved = assert_lost_peer_line_and_restart_is_bit_exact(prepared, killed, logdir, "killed",
                                                           straight)
    print(f"\nprocess 1 killed after step {saved[-1]} was saved: process 0 exited "
          f"after {stopped_after:.1f} s (KJAX_PEER_TIMEOUT={PEER_TIMEOUT}); "
          f"the restart ended bit-identical")


@pytest.mark.slow
def test_a_process_dying_while_saving_stops_the_other_and_the_restart_is_bit_exact(
        prepared, tmp_path, straight_run):
    """Process 1 SIGKILLs itself in the middle of saving step 10 (its arrays
    written, its part not committed; tests/die_during_save.py): process 0,
    waiting for it to commit, stops within KJAX_PEER_TIMEOUT with the same
    line; step 10 is never committed, and both started again resume from
    step 5 and end bit-identical to the uninterrupted run."""
    straight, logdir, prepared = straight_run   # its data: the reference trained on it
    died = str(tmp_path / "died")
    procs = launch(prepared, died, logdir, "died", die_saving=2 * EVERY)
    try:
        code = finish(procs[1], TIMEOUT, f"process 1's death while saving step {2 * EVERY}",
                      saw=lambda: progress(died), procs=procs)
        assert code == -signal.SIGKILL, f"process 1 exited {code}:\n{procs[1].tail()}"
        stopped_after = survivor_stops(procs, time.monotonic(), died)
    finally:
        for p in procs:
            p.stop()
    assert f"SIGKILL while saving step {2 * EVERY}" in logs(logdir, "died")[1]
    saved = assert_lost_peer_line_and_restart_is_bit_exact(prepared, died, logdir, "died",
                                                           straight)
    assert saved == [EVERY], saved   # step 2 × EVERY was being saved: never committed
    print(f"\nprocess 1 died saving step {2 * EVERY}: process 0 exited after "
          f"{stopped_after:.1f} s; the restart from step {EVERY} ended bit-identical")


def survivor_stops(procs, at: float, workdir: str) -> float:
    """Seconds from `at` (process 1 gone) until process 0 exits, asserting its code."""
    from kjax.parallel.watchdog import PEER_LOST_EXIT
    code = finish(procs[0], PEER_TIMEOUT + 60, "process 0's exit after process 1 was gone",
                  saw=lambda: progress(workdir), procs=procs)
    stopped_after = time.monotonic() - at
    print(f"\nprocess 0 exited {code} {stopped_after:.1f} s after process 1 was gone")
    assert code == PEER_LOST_EXIT, f"process 0 exited {code}:\n{procs[0].tail()}"
    return stopped_after


def assert_lost_peer_line_and_restart_is_bit_exact(prepared, workdir, logdir, tag,
                                                   straight) -> list[int]:
    """Process 0's one line, no traceback, then the same command on both
    processes ends bit-identical to `straight`; returns the steps that were
    committed before the restart."""
    out = logs(logdir, tag)[0]
    (line,) = [x for x in out.splitlines() if x.startswith("kjax: error:")]
    assert line.startswith("kjax: error: process 1 of 2 stopped responding ("), line
    assert "Restart all 2 processes with the same command" in line
    assert "Traceback" not in out and "Check failure" not in out, out[-3000:]
    saved = committed(os.path.join(workdir, "checkpoints"))
    assert saved and saved[-1] < STEPS, saved

    run_two(prepared, workdir, logdir, f"after-{tag}")
    config = tiny_config(prepared, **EXTRA)
    (s_state, s_data), (k_state, k_data) = final_params(config, straight), final_params(config,
                                                                                        workdir)
    assert int(k_state["step"]) == STEPS and s_data == k_data
    for a, b in zip(jax.tree.leaves(s_state), jax.tree.leaves(k_state)):
        assert np.array_equal(a, b)
    return saved


# A process of a two-process run with kjax's watchdog and abort guard, and an
# in-memory stand-in for jax's coordination service; a native thread (no
# Python, no GIL: what gloo's I/O thread is) then calls abort().
ABORTING = """
import ctypes, sys, threading, time
from kjax.parallel import watchdog

class Coordinator:   # the key-value calls the watchdog makes
    def __init__(self, peer_alive):
        self.values, self.peer_alive = {}, peer_alive

    def key_value_set(self, key, value, allow_overwrite=True):
        self.values[key] = value

    def key_value_dir_get(self, prefix):
        if self.peer_alive:   # process 1 beats on every look
            self.values[prefix + "1"] = str(time.monotonic())
        return list(self.values.items())

dog = watchdog.Watchdog(Coordinator(sys.argv[1] == "alive"), 0, 2, timeout=600)
dog.interval = 0.1   # the test's own pace; the timeout never passes here
dog.start()
watchdog.guard_aborts(dog)
libc = ctypes.CDLL(None)
native = ctypes.c_ulong()
libc.pthread_create(ctypes.byref(native), None, ctypes.cast(libc.abort, ctypes.c_void_p), None)
threading.Event().wait()
"""


@pytest.mark.parametrize("peer", ["silent", "alive"])
def test_an_abort_in_a_library_thread_is_the_lost_process_line_when_a_peer_is_silent(
        tmp_path, peer):
    """gloo can abort the survivor of a killed peer from its I/O thread
    (docs/RECOVERY.md): with the peer silent, the process ends as the
    watchdog would end it, one line and PEER_LOST_EXIT; with every peer
    alive, an abort stays an abort."""
    from kjax.parallel.watchdog import PEER_LOST_EXIT
    done = run([sys.executable, "-c", ABORTING, peer], 120, f"an aborting process ({peer} peer)",
               env={**os.environ, "PYTHONPATH": ROOT}, cwd=str(tmp_path))
    lines = [line for line in done.stderr.splitlines() if line.startswith("kjax:")]
    if peer == "silent":
        assert done.returncode == PEER_LOST_EXIT, done.stderr[-2000:]
        (line,) = lines
        assert line.startswith("kjax: error: process 1 of 2 stopped responding (silent when a "
                               "collective library aborted this process; "), line
        assert "Restart all 2 processes with the same command" in line
    else:
        assert done.returncode == -signal.SIGABRT and not lines, (done.returncode, done.stderr)


def test_sigterm_saves_at_that_step_and_restores_the_handler(prepared, tmp_path, monkeypatch):
    """One process: SIGTERM arriving while step 3's batch is fetched stops the
    run right after step 3, with that step saved and the old handler back."""
    import kjax.pretrain.trainer as trainer

    class SignallingIterator:
        def __init__(self, it):
            self.it, self.calls = it, 0

        def __next__(self):
            self.calls += 1
            if self.calls == 3:
                os.kill(os.getpid(), signal.SIGTERM)
            return next(self.it)

        def __getattr__(self, name):  # get_state / set_state
            return getattr(self.it, name)

    class Dataset:
        def __init__(self, ds):
            self.ds = ds

        def __iter__(self):
            return SignallingIterator(iter(self.ds))

    real = trainer.train_dataset
    monkeypatch.setattr(trainer, "train_dataset", lambda *a: Dataset(real(*a)))
    before = signal.getsignal(signal.SIGTERM)
    workdir = str(tmp_path / "run")
    result = train(tiny_config(prepared), workdir, progress=False)
    assert result["preempted"] and result["final_step"] == 3
    assert result["exit_code"] == PREEMPTED_EXIT and signal.getsignal(signal.SIGTERM) == before
    assert sorted(int(d) for d in os.listdir(os.path.join(workdir, "checkpoints"))) == [3]
    assert goodput_rows(workdir)[-1]["restarts"] == 0


def test_bad_process_environment_is_a_clear_error(monkeypatch):
    from kjax.errors import KjaxError
    from kjax.parallel.mesh import maybe_initialize_distributed
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "localhost:1")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
    monkeypatch.setenv("JAX_PROCESS_ID", "2")
    with pytest.raises(KjaxError, match=r"JAX_PROCESS_ID=2 is outside 0\.\.1"):
        maybe_initialize_distributed()
    monkeypatch.setenv("JAX_PROCESS_ID", "one")
    with pytest.raises(KjaxError, match="must be integers"):
        maybe_initialize_distributed()


def test_a_tensor_axis_across_hosts_is_refused_in_one_line(tmp_path):
    """Two processes × 4 devices with mesh.tensor=8: the one batch shard would
    span both hosts (each would feed its own rows for one replicated array).
    Each process exits 2 with one stderr line, before any data is read."""
    port, procs = free_port(), []
    overrides = ["--config.mesh.tensor=8", "--config.mesh.data=1", "--config.model.num_heads=8"]
    for i in range(2):
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "4",
               "JAX_COORDINATOR_ADDRESS": f"localhost:{port}", "JAX_NUM_PROCESSES": "2",
               "JAX_PROCESS_ID": str(i), "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
               "PYTHONPATH": ROOT}
        cmd = [sys.executable, "-m", "kjax.cli", "train", "--config", DEMO_CONFIG,
               "--workdir", str(tmp_path / "run"), *tiny_overrides(str(tmp_path)), *overrides]
        procs.append(start(cmd, f"process {i}", str(tmp_path / f"{i}.err"),
                           str(tmp_path / f"{i}.out"), env=env, cwd=str(tmp_path)))
    codes = finish_all(procs, TIMEOUT, str(tmp_path / "run"))
    assert codes == [2, 2], "\n".join(p.tail() for p in procs)
    for p in procs:
        (line,) = open(p.log).read().strip().splitlines()
        assert line.startswith("kjax: error: mesh data=1 × fsdp=1 gives 1 batch shard(s)")
        assert "mesh.tensor=8 spans hosts" in line and "4 devices" in line
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


def test_batch_shards_must_not_span_processes_on_the_real_layout():
    """check_batch_layout reads jax's device layout: devices interleaved over
    processes along the tensor axis are refused even when sizes divide."""
    from types import SimpleNamespace
    from kjax.errors import KjaxError
    from kjax.parallel.mesh import check_batch_layout
    dev = lambda p: SimpleNamespace(process_index=p)  # noqa: E731
    grouped = np.array([[[dev(0), dev(0)]], [[dev(1), dev(1)]]], dtype=object)  # data=2, tensor=2
    check_batch_layout(SimpleNamespace(devices=grouped))
    interleaved = np.array([[[dev(0), dev(1)]], [[dev(0), dev(1)]]], dtype=object)
    with pytest.raises(KjaxError, match=r"batch shard \(0, 0\) of the mesh spans processes "
                                        r"\[0, 1\]"):
        check_batch_layout(SimpleNamespace(devices=interleaved))


def test_cloud_tpu_vms_always_initialize_unless_opted_out(monkeypatch):
    """As MaxText: on a Cloud TPU VM `jax.distributed.initialize()` runs with no
    variables set (jax reads the TPU metadata); KJAX_DISTRIBUTED=0 opts out;
    elsewhere nothing happens unless told."""
    from kjax.parallel import mesh
    calls = []
    monkeypatch.setattr(mesh.jax.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(mesh.jax.distributed, "initialize", lambda **kw: calls.append(kw))
    for key in (*mesh.COORDINATOR_ENV, mesh.DISTRIBUTED_ENV, *mesh.TPU_ENV):
        monkeypatch.delenv(key, raising=False)
    mesh.maybe_initialize_distributed()                 # this CPU machine: not a TPU VM
    assert calls == [] and not mesh.on_cloud_tpu_vm()
    monkeypatch.setenv("JAX_PLATFORMS", "")
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v3-32")  # what a TPU host's runtime sets
    assert mesh.on_cloud_tpu_vm()
    mesh.maybe_initialize_distributed()
    assert calls == [{"coordinator_address": None, "num_processes": None, "process_id": None,
                      "heartbeat_timeout_seconds": 120}]   # above kjax's watchdog's 60 s
    monkeypatch.setenv(mesh.DISTRIBUTED_ENV, "0")
    mesh.maybe_initialize_distributed()
    assert len(calls) == 1
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")          # a CPU run on a TPU VM
    monkeypatch.delenv(mesh.DISTRIBUTED_ENV)
    assert not mesh.on_cloud_tpu_vm()
    monkeypatch.setenv(mesh.DISTRIBUTED_ENV, "1")       # told: jax's cluster detection
    mesh.maybe_initialize_distributed()
    assert len(calls) == 2

    def fail(**kw):
        raise RuntimeError("Failed to connect to coordinator\nmore detail")
    monkeypatch.setattr(mesh.jax.distributed, "initialize", fail)
    from kjax.errors import KjaxError
    with pytest.raises(KjaxError, match=r"initialize\(\) failed \(Failed to connect to "
                                        r"coordinator\); set KJAX_DISTRIBUTED=0"):
        mesh.maybe_initialize_distributed()


def test_checkpoint_barriers_go_through_the_coordinator_not_collectives(monkeypatch):
    """Multi-process runs switch orbax's barriers to the coordination service
    (kjax.parallel.mesh): a barrier then calls the coordinator's barrier
    function and never `sync_global_devices`, a device all-reduce that can
    interleave with the step's collectives (the final-save hang in docs/RECOVERY.md)."""
    from absl import flags
    from jax.experimental import multihost_utils
    from orbax.checkpoint._src.multihost import multihost

    from kjax.parallel.mesh import checkpoint_barriers_through_coordinator
    flag = flags.FLAGS[multihost.EXPERIMENTAL_ORBAX_USE_DISTRIBUTED_BARRIER.name]
    monkeypatch.setattr(flag, "value", flag.value)   # restored after the test
    calls = []
    monkeypatch.setattr(multihost, "should_skip_process_sync", lambda processes=None: False)
    monkeypatch.setattr(multihost, "get_barrier_sync_fn",
                        lambda processes=None: lambda key, timeout_ms: calls.append(key))

    def collective(name):
        raise AssertionError(f"sync_global_devices({name!r}) used for a checkpoint barrier")

    monkeypatch.setattr(multihost_utils, "sync_global_devices", collective)
    with pytest.raises(AssertionError, match="sync_global_devices"):   # orbax's default
        multihost.sync_global_processes("kjax-test-before")
    checkpoint_barriers_through_coordinator()
    multihost.sync_global_processes("kjax-test-after")
    assert calls == ["kjax-test-after"]


def test_processes_meet_at_the_coordinators_barrier_before_the_first_step(monkeypatch):
    """Before a run's first step every process waits at the coordination
    service's barrier (kjax.parallel.mesh.processes_meet), so gloo's 30 s to
    form a communicator start with every process there; one process alone
    meets nobody."""
    from jax._src import distributed

    from kjax.parallel import mesh
    from kjax.pretrain import trainer
    calls = []

    class Client:
        def wait_at_barrier(self, name, timeout_ms):
            calls.append((name, timeout_ms))

    mesh.processes_meet("alone")
    assert calls == []
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(distributed.global_state, "client", Client())
    mesh.processes_meet("train_loop")
    assert calls == [("kjax/train_loop", mesh.MEET_TIMEOUT_S * 1000)]
    loop = open(trainer.__file__).read().split("def _loop(")[1]
    assert loop.index('processes_meet("train_loop")') < loop.index("train_step(state, batch)")
