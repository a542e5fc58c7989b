"""The one canonical trainer: `kjax train` and `kjax eval` call into here.

It checks everything it can before compiling (mesh, batch, data, tokenizer
vocabulary, checkpoint completeness), restores the latest checkpoint if the
workdir has one, and runs the jit-compiled step. Host syncs happen only at
log/eval/checkpoint steps.
"""
from __future__ import annotations

import os
import time

import jax
import numpy as np
from tqdm import tqdm

from kjax.batches.loader import eval_batches, train_dataset
from kjax.checkpoint.manager import Checkpointer
from kjax.errors import KjaxError
from kjax.examples import records
from kjax.parallel.mesh import make_mesh, put_batch
from kjax.train.metrics import MetricWriter, peak_flops, plot_loss_curve
from kjax.train.state import abstract_state, init_state, make_model, make_optimizer
from kjax.train.step import flops_per_example, make_eval_step, make_train_step, summarize_eval


def check_data(config) -> dict:
    meta = records.read_meta(config.data.dir)
    d, m = config.data, config.model
    for key, want in (("vocab_size", m.vocab_size), ("max_seq_len", d.max_seq_len),
                      ("max_predictions_per_seq", d.max_predictions_per_seq)):
        if meta.get(key) != want:
            section = "model" if key == "vocab_size" else "data"
            raise KjaxError(f"{config.data.dir} was prepared with {key}={meta.get(key)} but the "
                            f"config has {section}.{key}={want}; run `kjax prepare` again or "
                            f"set --config.{section}.{key}={meta.get(key)}")
    return meta


class Session:
    """Mesh, model, optimizer, checkpoints and compiled steps for one workdir."""

    def __init__(self, config, workdir: str):
        self.config, self.workdir = config, workdir
        self.mesh = make_mesh(config)
        check_data(config)
        self.tx = make_optimizer(config.train)
        self.train_model = make_model(config, deterministic=False)
        self.eval_model = make_model(config, deterministic=True)
        t = config.train
        self.checkpoints = Checkpointer(os.path.join(workdir, "checkpoints"),
                                        t.checkpoint_every, t.keep_checkpoints)
        self.latest = self.checkpoints.latest_step()
        if self.latest is not None:
            self.checkpoints.check_complete(self.latest)

    def initial_state(self):
        """(state, shardings, data_state or None): restored if the workdir has one."""
        if self.latest is None:
            state, shardings = init_state(self.config, self.mesh, self.train_model, self.tx)
            return state, shardings, None
        target, shardings = abstract_state(self.config, self.mesh, self.train_model, self.tx)
        state, data_state = self.checkpoints.restore(self.latest, target)
        return state, shardings, data_state

    def evaluate(self, eval_fn, params) -> dict:
        c = self.config
        sums = [eval_fn(params, put_batch(b, self.mesh)) for b in eval_batches(
            c, c.train.batch_size, c.train.eval_batches, jax.process_index(),
            jax.process_count())]
        if not sums:
            raise KjaxError(f"no eval examples in {c.data.dir}; lower data.eval_every_nth_doc")
        return summarize_eval(jax.device_get(sums))


def train(config, workdir: str, progress: bool = True, stop_at: int | None = None) -> dict:
    """Trains to train.num_steps (or stops early at `stop_at`, checkpointing
    there, with the schedule of the full run: how a time-limited job ends)."""
    s = Session(config, workdir)
    c, t = config, config.train
    primary = jax.process_index() == 0
    state, shardings, data_state = s.initial_state()
    iterator = iter(train_dataset(c, jax.process_index(), jax.process_count()))
    if data_state is not None:
        iterator.set_state(data_state)
    train_step = make_train_step(c, s.mesh, s.train_model, s.tx, shardings)
    eval_step = make_eval_step(c, s.mesh, s.eval_model, shardings["params"])
    writer = MetricWriter(workdir, enabled=primary)
    start = int(jax.device_get(state["step"]))
    if start >= t.num_steps:
        s.checkpoints.close()
        return {"step": start, "message": "already trained to train.num_steps"}
    step_flops = flops_per_example(c.model, c.data.max_seq_len,
                                   c.data.max_predictions_per_seq) * t.batch_size
    peak, peak_source = peak_flops(c)
    tokens_per_step = t.batch_size * c.data.max_seq_len
    bar = tqdm(total=t.num_steps, initial=start, desc="train", disable=not (progress and primary))
    last = {"step": start}
    window_start, window_steps, data_wait = time.perf_counter(), 0, 0.0
    for step in range(start + 1, t.num_steps + 1):
        fetch_start = time.perf_counter()
        batch = put_batch(next(iterator), s.mesh)
        data_wait += time.perf_counter() - fetch_start
        state, metrics = train_step(state, batch)
        window_steps += 1
        bar.update()
        if step % t.log_every == 0 or step == t.num_steps or step == start + 1:
            m = {k: float(v) for k, v in jax.device_get(metrics).items()}
            elapsed = time.perf_counter() - window_start
            step_time = elapsed / window_steps
            m.update(step_time=step_time, tokens_per_sec=tokens_per_step / step_time,
                     data_wait_fraction=data_wait / elapsed,
                     mfu=step_flops / step_time / peak)
            if step == start + 1:
                m["compile_and_first_step_time"] = m.pop("step_time")
                m.pop("tokens_per_sec"), m.pop("mfu")
            writer.write(step, m)
            bar.set_postfix(loss=f"{m['loss']:.3f}", mlm_acc=f"{m['mlm_accuracy']:.3f}")
            last = {"step": step, **m}
            window_start, window_steps, data_wait = time.perf_counter(), 0, 0.0
        if t.eval_every and (step % t.eval_every == 0 or step == t.num_steps):
            writer.write(step, s.evaluate(eval_step, state["params"]), prefix="eval")
        stop = s.checkpoints.reached_preemption(step) or step == stop_at
        if s.checkpoints.should_save(step) or step == t.num_steps or stop:
            s.checkpoints.save(step, state, iterator.get_state(), force=True)
        if stop:
            break
    bar.close()
    s.checkpoints.close()
    writer.close()
    last.update(peak_flops=peak, peak_source=peak_source, final_step=step)
    if primary:
        last["loss_curve"] = plot_loss_curve(workdir)
    return last


def evaluate(config, workdir: str, step: int | None = None) -> dict:
    s = Session(config, workdir)
    step = step if step is not None else s.latest
    if step is None:
        raise KjaxError(f"no checkpoint in {workdir}/checkpoints; train first (`kjax train`)")
    if step not in s.checkpoints.all_steps():
        raise KjaxError(f"no checkpoint for step {step} in {workdir}/checkpoints; "
                        f"available: {s.checkpoints.all_steps()}")
    target, shardings = abstract_state(config, s.mesh, s.train_model, s.tx)
    state, _ = s.checkpoints.restore(step, target)
    eval_step = make_eval_step(config, s.mesh, s.eval_model, shardings["params"])
    result = {"step": step, **s.evaluate(eval_step, state["params"])}
    s.checkpoints.close()
    return {k: (float(v) if isinstance(v, np.floating) else v) for k, v in result.items()}
