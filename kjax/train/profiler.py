"""jax.profiler traces of the pretraining steps `train.profile_steps` names.

The trace of steps A..B lands in TENSORBOARD/plugins/profile/steps_A-B/,
TENSORBOARD being the run's TensorBoard folder (WORKDIR/tensorboard; a
gs:// run's local mirror, uploaded to WORKDIR/logs/tensorboard): the folder
TensorBoard's profile plugin and xprof read, one "run" per folder. It holds
what jax writes: HOST.xplane.pb (the profile plugin, xprof), HOST.trace.json.gz
and perfetto_trace.json.gz (the same events for ui.perfetto.dev).

Every process traces, not only process 0: a process's profiler records only
its own devices (a TPU VM's chips, a GPU process's GPUs) and host threads, so
on a pod each host must write its own file; the profile plugin shows the
hosts of one run folder together. The folder name comes from the steps, the
same on every host, so the files meet there on a shared filesystem and in
gs://. With several processes each file name carries `-processN`: two
processes on one machine (one per GPU) would otherwise write the same name.

jax writes a trace into a folder of its own choosing under the log dir it is
given, so each trace is taken into a temporary folder (.profile-* beside the
TensorBoard folder, which TensorBoard does not read) and its files moved to
their place when it stops.

Timing: traced steps run slower (the profiler records every host function
and device op), so the step_time logged for them is not the run's; writing
the trace at the end takes seconds, which `end` returns so the trainer can
leave it out of the logged step time (goodput still counts it as step time).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

import jax

from kjax import paths
from kjax.config.validate import profile_steps
from kjax.train import logdir

SESSION = "trace"   # jax's folder name for the trace in the temporary folder
SUFFIXES = (".xplane.pb", ".trace.json.gz", ".json.gz")


class StepProfiler:
    """Called around each step of the loop: `begin(step)` before its batch is
    fetched, `end(step, outputs)` after it is dispatched, `close()` in the
    loop's finally (a run that stops while tracing still writes its trace)."""

    def __init__(self, config, log_dir: str, start: int, workdir: str | None = None,
                 bar=None):
        t = config.train
        self.log_dir, self.tensorboard = log_dir, os.path.join(log_dir, "tensorboard")
        self.remote = (paths.join(workdir, "logs", "tensorboard")
                       if workdir is not None and logdir.is_remote(workdir) else None)
        self.bar, self.first, self.last = bar, None, None
        self.staging = self.annotation = self.current = None
        span = profile_steps(t.profile_steps)
        if span is None:
            return
        last = min(span[0] + span[1] - 1, t.num_steps)
        if span[0] > t.num_steps:
            self._say(f"kjax: note: train.profile_steps={t.profile_steps!r} starts after "
                      f"train.num_steps={t.num_steps}: no profiler trace")
        elif max(span[0], start + 1) <= last:  # a resumed run traces the steps left
            self.first, self.last = max(span[0], start + 1), last

    @property
    def tracing(self) -> bool:
        return self.staging is not None

    def begin(self, step: int) -> None:
        if step == self.first:
            self._start()
        if self.tracing:
            self.current = step
            self.annotation = jax.profiler.StepTraceAnnotation("train", step_num=step)
            self.annotation.__enter__()

    def end(self, step: int, outputs) -> float:
        """Closes the step's annotation; after the last traced step waits for
        `outputs` (the trace then holds its device work) and writes the trace.
        The seconds the writing took (0 on other steps)."""
        self._end_annotation()
        if not self.tracing or step < self.last:
            return 0.0
        jax.block_until_ready(outputs)
        started = time.perf_counter()
        self._stop()
        return time.perf_counter() - started

    def close(self) -> None:
        """Stops a trace still running (the run stopped early or failed) and
        writes what it holds; a failure to write it is one line, not an error
        that would hide the run's own."""
        self._end_annotation()
        if self.tracing:
            try:
                self._stop(early=True)
            except Exception as e:  # noqa: BLE001 - the run's outcome matters more
                self._say(f"kjax: warning: the profiler trace of steps {self.first}-"
                          f"{self.current} was not written: {e}")

    def _start(self) -> None:
        options = jax.profiler.ProfileOptions()
        options.session_id = SESSION
        os.makedirs(self.log_dir, exist_ok=True)   # beside the trace's place: a rename away
        staging = tempfile.mkdtemp(prefix=".profile-", dir=self.log_dir)
        try:
            jax.profiler.start_trace(staging, create_perfetto_trace=True,
                                     profiler_options=options)
        except RuntimeError as e:   # another trace is running: train on, untraced
            shutil.rmtree(staging, ignore_errors=True)
            self._say(f"kjax: warning: no profiler trace of steps {self.first}-{self.last}: {e}")
            return
        self.staging = staging

    def _end_annotation(self) -> None:
        if self.annotation is not None:
            annotation, self.annotation = self.annotation, None
            annotation.__exit__(None, None, None)

    def _stop(self, early: bool = False) -> None:
        staging, self.staging = self.staging, None
        run = f"steps_{self.first}-{self.current}"
        target = os.path.join(self.tensorboard, "plugins", "profile", run)
        try:
            jax.profiler.stop_trace()
            if jax.process_count() == 1:
                shutil.rmtree(target, ignore_errors=True)  # an older trace of these steps
            os.makedirs(target, exist_ok=True)
            written = os.path.join(staging, "plugins", "profile", SESSION)
            for name in sorted(os.listdir(written)):
                dest = os.path.join(target, _process_name(name))
                shutil.move(os.path.join(written, name), dest)
                if self.remote is not None:
                    paths.upload(dest, paths.join(self.remote, "plugins", "profile", run,
                                                  os.path.basename(dest)))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        board = self.tensorboard if self.remote is None else self.remote
        where = target if self.remote is None else paths.join(board, "plugins", "profile", run)
        who = f"process {jax.process_index()}: " if jax.process_count() > 1 else ""
        self._say(f"kjax: {who}profiler trace of steps {self.first}-{self.current} in {where}"
                  + (" (the run stopped during the trace)" if early else "")
                  + f"; open it with `tensorboard --logdir {board}` (pip install "
                  f"tensorboard-plugin-profile; Profile tab) or load its perfetto_trace*.json.gz "
                  f"at ui.perfetto.dev; traced steps run slower than the others")

    def _say(self, message: str) -> None:
        if self.bar is not None and self.bar.enabled:
            self.bar.write(message)   # above the progress bar, not through it
        else:
            print(message, file=sys.stderr, flush=True)


def _process_name(name: str) -> str:
    """`name` with -processN before its suffix when several processes trace."""
    if jax.process_count() == 1:
        return name
    suffix = next((s for s in SUFFIXES if name.endswith(s)), os.path.splitext(name)[1])
    return f"{name[:len(name) - len(suffix)]}-process{jax.process_index()}{suffix}"
