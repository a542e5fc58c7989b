"""The one canonical trainer: `kjax train` and `kjax eval` call into here.

It checks everything it can before compiling (mesh, batch, data, tokenizer
vocabulary, a writable workdir), restores the newest checkpoint that
verifies (damaged ones are moved aside: kjax/checkpoint/recovery.py), and
runs the jit-compiled step. Host syncs happen only at log/eval/checkpoint
steps. Storage faults (full, read-only, denied) end the run with one line
naming the path and the last complete step (kjax/checkpoint/storage.py);
after the fix, the same command resumes from there.

Preemption: SIGTERM (what a spot/preemptible TPU VM, `launch/stop.sh` or a
scheduler sends) sets a flag; the processes agree on it through a tiny
all-reduce read one step late, save at the same step, wait for the async
write and return `preempted` (the CLI then exits with 143). orbax's own
preemption sync point is checked every step as well.
"""
from __future__ import annotations

import collections
import os
import signal
import time

import jax
import numpy as np

from kjax.batches.loader import eval_batches, train_dataset
from kjax.checkpoint import storage
from kjax.checkpoint.manager import Checkpointer
from kjax.checkpoint.recovery import restore_newest, restore_step
from kjax.checkpoint.restore import check_weights, chosen_weights
from kjax.errors import KjaxError
from kjax.progress import Progress
from kjax.parallel.mesh import (global_any, make_mesh, processes_meet, put_batch,
                                read_replicated)
from kjax.config.recorded import flush_notes
from kjax.pretrain import branch, mixture, phases
from kjax.pretrain.run_folder import record_run
from kjax.pretrain.run_load import Run, training_run
from kjax.train.logdir import local_log_dir, pull_logs, push_logs
from kjax.train.goodput import Goodput
from kjax.train.metrics import MetricWriter, plot_loss_curve
from kjax.train.peak_flops import peak_flops
from kjax.train.profiler import StepProfiler
from kjax.train.stage_steps import StageSteps
from kjax.train.stream_meter import StreamMeter
from kjax.train.state import abstract_state, init_state, make_model, make_optimizer
from kjax.train.step import (flops_per_example, make_eval_step, objective_weights,
                             summarize_eval)


def check_data(config) -> dict:
    """The prepared data's meta.json (a mixture's: its first source's), every
    folder checked against the config (kjax/pretrain/mixture.py)."""
    return mixture.check_prepared(config)[0]


PREEMPTED_EXIT = 143  # 128 + SIGTERM: "terminated", so supervisors restart the job


class StopSignal:
    """While active, SIGTERM only sets `received` (the default would kill the
    process mid-write). It replaces jax's C++ SIGTERM notifier, if any: the
    trainer's own agreement below does that job on every platform."""

    def __init__(self):
        self.received, self.previous = False, None

    def __enter__(self):
        try:
            self.previous = signal.signal(signal.SIGTERM, self._handle)
        except ValueError:  # not the main thread: nobody can deliver it to us anyway
            self.previous = None
        else:
            self.previous = self.previous if self.previous is not None else signal.SIG_DFL
        return self

    def _handle(self, signum, frame):
        self.received = True

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


class PreemptionCheck:
    """Turns a local SIGTERM flag into one decision all processes share. With
    several processes each step dispatches `any(flags)` and reads the previous
    step's result, which is ready by then: no host sync, one step of delay."""

    def __init__(self, mesh, stop: StopSignal):
        self.mesh, self.stop, self.pending = mesh, stop, None
        self.multi = jax.process_count() > 1

    def __call__(self, after) -> bool:
        """The agreement on a signal; `after`: this step's loss (global_any)."""
        if not self.multi:
            return self.stop.received
        agreed = self.pending is not None and bool(read_replicated(self.pending))
        self.pending = global_any(self.stop.received, self.mesh, after)
        return agreed


class Session:
    """Mesh, model, optimizer, checkpoints and compiled steps for one workdir."""

    def __init__(self, config, workdir: str, read_only: bool = False, recorded=None,
                 parent=None):
        self.config, self.workdir, self.lineage = config, workdir, None
        # what the command read (kjax/pretrain/run_load.py), not read again: the
        # workdir's record before this session, and --init-from's record
        self.recorded, self.parent = recorded, parent
        self.mesh = make_mesh(config)
        check_data(config)
        self.tx = make_optimizer(config.train)
        self.train_model = make_model(config, deterministic=False)
        self.eval_model = make_model(config, deterministic=True)
        t = config.train
        self.checkpoints = Checkpointer(os.path.join(workdir, "checkpoints"),
                                        t.checkpoint_every, t.keep_checkpoints, read_only)

    def initial_state(self, goodput: Goodput):
        """(state, shardings, data_state or None): the newest checkpoint that
        verifies (damaged newer ones are moved aside), else a fresh init."""
        target, shardings = abstract_state(self.config, self.mesh, self.train_model, self.tx)
        with goodput.timed("checkpoint"):
            found = restore_newest(self.checkpoints, target, move_damaged=True)
        if found is None:
            if branch.continuing(self.config):   # a decay branch: the parent's run, continued
                state, data_state, self.lineage = branch.continue_from_parent(
                    self.config, self.mesh, self.train_model, self.tx, shardings,
                    branch.branch_start(self.config, self.workdir), self.parent)
                return state, shardings, data_state
            if self.config.init.from_run:   # a new phase: another run's parameters
                state, self.lineage = phases.init_from_parent(
                    self.config, self.mesh, self.train_model, self.tx, shardings, self.parent)
                return state, shardings, None
            state, shardings = init_state(self.config, self.mesh, self.train_model, self.tx,
                                          shardings)
            return state, shardings, None
        state, data_state, _ = found
        return state, shardings, data_state

    def evaluate(self, eval_fn, params) -> dict:
        """Held-out metrics; a mixture's pooled and per source (mixture.py)."""
        c = self.config
        return mixture.evaluate(
            c, lambda directory: eval_batches(c, c.train.batch_size, c.train.eval_batches,
                                              jax.process_index(), jax.process_count(),
                                              directory),
            lambda b: eval_fn(params, put_batch(b, self.mesh)),
            lambda sums: summarize_eval(jax.device_get(sums), objective_weights(c)))


def train(config, workdir: str, progress: bool = True, stop_at: int | None = None) -> dict:
    """Trains to train.num_steps (or stops early at `stop_at`, checkpointing
    there, with the schedule of the full run: how a time-limited job ends).
    SIGTERM stops it the same way at the next step (`preempted` in the result).
    `config`: the `Run` kjax/pretrain/run_load.py made of the command (its
    config resolved against `workdir`), or a config, resolved here the same way."""
    run = config if isinstance(config, Run) else training_run(config, workdir)
    if run.config.phases:   # one run in the listed phases, each a run of its own
        return phases.run_phases(run.config, workdir, train, run.recorded, progress=progress,
                                 stop_at=stop_at)
    with StopSignal() as stop:
        return _train(run, workdir, progress, stop_at, stop)


def _train(run: Run, workdir, progress, stop_at, stop: StopSignal) -> dict:
    primary = jax.process_index() == 0  # only process 0 writes metrics, plots, goodput
    config = run.config   # resolved and frozen (run_config.py), the workdir checked
    logs = local_log_dir(workdir)  # the workdir, or a local mirror of gs:// (logdir.py)
    if primary:
        pull_logs(workdir)
    goodput = Goodput(logs, enabled=primary)
    s = Session(config, workdir, recorded=run.recorded, parent=run.parent)
    writer = None
    try:
        state, shardings, data_state = s.initial_state(goodput)
        flush_notes()   # restored (or fresh): notes about the config are news now, not an error's cause
        start = int(jax.device_get(state["step"]))
        # Rows logged after `start` by a killed session are computed again: dropped.
        writer = MetricWriter(logs, enabled=primary, resume_step=start)
        return _loop(s, state, shardings, data_state, start, writer, goodput, logs,
                     progress, stop_at, stop)
    except BaseException as e:
        last = s.checkpoints.last_complete_step()
        s.checkpoints.abandon()  # lets a good in-flight save finish; raises nothing
        if writer is not None:
            writer.abandon()
        error = storage.fault_error(e, workdir, last) if isinstance(e, Exception) and (
            not isinstance(e, KjaxError) or storage.unreachable_error(e, workdir, None)) else None
        if error is None:
            raise
        raise error from None


def _loop(s: Session, state, shardings, data_state, start, writer, goodput, logs,
          progress, stop_at, stop) -> dict:
    c, t, workdir = s.config, s.config.train, s.workdir
    primary = jax.process_index() == 0
    if start >= t.num_steps:
        s.checkpoints.close()
        writer.close()
        return {"step": start, "message": "already trained to train.num_steps"}
    iterator = iter(train_dataset(c, jax.process_index(), jax.process_count()))
    meter = StreamMeter(c, s.mesh, data_state)   # masked share, a mixture's counters
    if data_state is not None:
        iterator.set_state(meter.iterator_state(data_state))
    # one compiled step per batch-ramp stage (kjax/train/stage_steps.py)
    steps = StageSteps(c, s.mesh, s.train_model, s.tx, shardings)
    steps.check_position(start, iterator)
    eval_step = make_eval_step(c, s.mesh, s.eval_model, shardings["params"])
    example_flops = flops_per_example(c.model, c.data.max_seq_len,
                                      c.data.max_predictions_per_seq)
    peak, peak_source = peak_flops(c)
    preempted = PreemptionCheck(s.mesh, stop)
    # The bar counts steps whose result exists (not steps dispatched ahead of
    # the device): `done` advances it as their losses become ready, and a log
    # step waits for them one by one, so the bar moves instead of freezing.
    bar = Progress("train", total=t.num_steps, initial=start, unit="step",
                   enabled=progress and primary)
    dispatched = collections.deque()

    def done(wait: bool) -> None:
        while dispatched and (wait or dispatched[0].is_ready()):
            dispatched.popleft().block_until_ready()
            bar.update()
    processes_meet("train_loop")   # the first step's collectives find every process there
    last = {"step": start}
    goodput.start_loop(start)
    window_start, window_steps, window_examples, data_wait = time.perf_counter(), 0, 0, 0.0
    profiler = StepProfiler(c, logs, start, workdir, bar)   # train.profile_steps
    try:
        for step in range(start + 1, t.num_steps + 1):
            profiler.begin(step)
            fetch_start = time.perf_counter()
            with goodput.timed("data_wait"):
                batch = meter.take(put_batch(next(iterator), s.mesh))
            data_wait += time.perf_counter() - fetch_start
            stage, train_step = steps(step)
            state, metrics = train_step(state, batch)
            window_start += profiler.end(step, (state, metrics))  # writing a trace: not step time
            s.checkpoints.check_for_errors()  # a failed background write: stop now, in one line
            window_steps, window_examples = window_steps + 1, window_examples + stage.batch_size
            dispatched.append(metrics["loss"])
            done(wait=False)
            if step % t.log_every == 0 or step == t.num_steps or step == start + 1:
                done(wait=True)
                m = {k: float(v) for k, v in jax.device_get(metrics).items()}
                m.update(meter.metrics(batch, step))
                m.update(steps.logged(step))   # a ramp's batch and tokens so far
                elapsed = time.perf_counter() - window_start
                step_time = elapsed / window_steps
                # the window's examples: a ramp's stages hold different batches
                m.update(step_time=step_time,
                         tokens_per_sec=window_examples * c.data.max_seq_len / elapsed,
                         data_wait_fraction=data_wait / elapsed,
                         mfu=example_flops * window_examples / elapsed / peak)
                if step == start + 1:
                    m["compile_and_first_step_time"] = m.pop("step_time")
                    m.pop("tokens_per_sec"), m.pop("mfu")
                writer.write(step, m)
                goodput.save(step)
                bar.update(0, loss=f"{m['loss']:.3f}", mlm_acc=f"{m['mlm_accuracy']:.3f}")
                last = {"step": step, **m}
                window_start, window_steps, window_examples, data_wait = \
                    time.perf_counter(), 0, 0, 0.0
            if primary and step == start + 1:   # the first step ran: the config works
                record_run(c, workdir, s.recorded)   # WORKDIR/kjax_config.py, its files kept
                if s.lineage:                   # a phase: where its parameters came from
                    phases.write_lineage(workdir, s.lineage)
            if t.eval_every and (step % t.eval_every == 0 or step == t.num_steps):
                with goodput.timed("eval"):
                    done(wait=True)
                    result = s.evaluate(eval_step, state["params"])
                    writer.write(step, result, prefix="eval")
                bar.write(f"eval at step {step}: " + "  ".join(
                    f"{k} {v:.4f}" for k, v in result.items() if isinstance(v, (int, float))))
            signalled = preempted(metrics["loss"]) or s.checkpoints.reached_preemption(step)
            stop_now = signalled or step == stop_at
            if s.checkpoints.should_save(step) or step == t.num_steps or stop_now:
                jax.block_until_ready(state)  # the step's compute is step time, not checkpoint
                with goodput.timed("checkpoint"):
                    writer.flush()   # the steps this checkpoint covers are logged for good
                    s.checkpoints.save(step, state, meter.data_state(iterator.get_state()),
                                       force=True)
                    if primary:
                        push_logs(workdir)
            if stop_now:
                break
        done(wait=True)
    finally:
        profiler.close()   # a run stopped while tracing still writes its trace
        bar.close()  # a newline before any error line
    goodput.end_loop()
    with goodput.timed("checkpoint"):
        s.checkpoints.close()  # waits for the async write: the last save is complete
    last.update(peak_flops=peak, peak_source=peak_source, final_step=step)
    if signalled:
        last.update(preempted=True, exit_code=PREEMPTED_EXIT,
                    message=f"stopped by a preemption signal after saving step {step}; "
                            f"run the same command to resume")
        print(f"kjax: process {jax.process_index()}: {last['message']}", flush=True)
    if primary:
        last["loss_curve"] = plot_loss_curve(logs)
    last["goodput"] = goodput.summary(step)
    writer.write(step, last["goodput"], prefix="goodput")
    writer.close()
    if primary:
        push_logs(workdir)
    return last


def evaluate(config, workdir: str, step: int | None = None, weights: str = "params") -> dict:
    """Held-out metrics of `step`, or of the newest checkpoint that verifies
    (damaged newer ones are named and skipped, not moved: eval only reads);
    `weights`: its params or their EMA (kjax/checkpoint/restore.py)."""
    check_weights(config, weights, workdir)
    s = Session(config, workdir, read_only=True)
    try:
        target, shardings = abstract_state(config, s.mesh, s.train_model, s.tx)
        if step is not None:
            state, _ = restore_step(s.checkpoints, target, step)
        else:
            found = restore_newest(s.checkpoints, target, move_damaged=False)
            if found is None:
                raise KjaxError(f"no checkpoint in {workdir}/checkpoints; train first "
                                f"(`kjax train`)")
            state, _, step = found
        eval_step = make_eval_step(config, s.mesh, s.eval_model, shardings["params"])
        result = {"step": step, "weights": weights,
                  **s.evaluate(eval_step, chosen_weights(state, weights))}
        if lineage := phases.describe(phases.read_lineage(workdir)):
            result["started"] = lineage   # a phase: the run its parameters came from
    finally:
        s.checkpoints.abandon()
    return {k: (float(v) if isinstance(v, np.floating) else v) for k, v in result.items()}
