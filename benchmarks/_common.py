"""Shared pieces of the benchmark scripts: preset loading with size overrides,
synthetic batches (one-hot, multi-hot, SHAKE's B, knowledge targets), the
machine line and the record appended to docs/PERFORMANCE.md.

Not a benchmark itself; the scripts in this folder import it (they run as
`python benchmarks/<name>.py`, so this folder is on sys.path).
"""
from __future__ import annotations

import datetime
import os
import platform
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# Shapes of the two model families the issue names (tpu_configs presets).
SHAPES = {
    "uknow_small": dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024),
    "bert_base": dict(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072),
}


def preset_config(preset: str, seq: int, batch: int, dtype: str | None = None,
                  extra: list[str] | None = None):
    """tpu_configs/<preset>.py at `seq` × `batch`, 15% predictions, a 1000-step
    schedule (the LR value does not change the cost of a step)."""
    from kjax.config import load_config
    overrides = [f"--config.data.max_seq_len={seq}", f"--config.train.batch_size={batch}",
                 "--config.train.num_steps=1000", "--config.train.warmup_steps=10",
                 f"--config.data.max_predictions_per_seq={max(1, round(seq * 0.15))}"]
    if dtype:
        overrides.append(f"--config.model.dtype={dtype}")
    path = os.path.join(ROOT, "tpu_configs", f"{preset}.py")
    base = load_config(path)
    if seq > base.model.max_position_embeddings:  # longer than the preset's table
        overrides.append(f"--config.model.max_position_embeddings={seq}")
    return load_config(path, overrides + list(extra or []))


def synthetic_batch(config, rng: np.random.Generator) -> dict:
    """A full batch of the shapes the loader yields for `config` (all positions
    real, every prediction slot used), on the host."""
    d, m, g = config.data, config.model, config.knowledge
    b, s, p, v = config.train.batch_size, d.max_seq_len, d.max_predictions_per_seq, m.vocab_size
    ids = lambda *shape: rng.integers(5, v, shape).astype(np.int32)  # noqa: E731
    out = {"input_ids": ids(b, s),
           "token_type_ids": (np.arange(s) >= s // 2).astype(np.int32)[None].repeat(b, 0),
           "attention_mask": np.ones((b, s), np.int32),
           "mlm_positions": np.sort(rng.choice(s, (b, p)), -1).astype(np.int32),
           "mlm_ids": ids(b, p), "mlm_weights": np.ones((b, p), np.float32),
           "nsp_labels": rng.integers(0, 2, b).astype(np.int32),
           "nsp_weights": np.ones(b, np.float32)}
    from kjax.inputs import input_mode
    if not input_mode(config).positions_are_tokens:  # one token per position: the widest B
        t = d.max_targets_per_position
        out.pop("mlm_ids")
        out.update(token_ids=ids(b, s), token_position=np.arange(s, dtype=np.int32)[None].repeat(b, 0),
                   token_inpos=np.zeros((b, s), np.int32),
                   position_tags=rng.integers(0, m.num_pos_tags, (b, s)).astype(np.int32),
                   mlm_target_ids=ids(b, p, t), mlm_target_mask=np.ones((b, p, t), bool))
    from kjax.config import knowledge_enabled, shaking_enabled
    if shaking_enabled(config):  # B: a few boosted (q, k) pairs per row, as the pos variant
        from kjax.shake.matrix import B_DTYPE
        q = rng.integers(0, s, (b, s // 8))
        k = rng.integers(0, s, q.shape)
        if config.shake.layout == "pairs":   # the same pairs, per query (kjax/shake/matrix.py)
            start, weight = np.zeros((b, s), np.int32), np.zeros((b, s), np.float32)
            start[np.arange(b)[:, None], q], weight[np.arange(b)[:, None], q] = k, 1.0
            out.update(shake_key_start=start, shake_key_end=start + 1,
                       shake_weight=weight.astype(B_DTYPE))
        else:
            shake = np.zeros((b, s, s), np.float32)
            shake[np.arange(b)[:, None], q, k] = 1.0
            out["shake"] = shake.astype(B_DTYPE)
    if knowledge_enabled(config):
        n, k = g.max_hypernym, g.max_hypernyms_per_noun
        pos = lambda: np.sort(rng.choice(s, (b, n)), -1).astype(np.int32)  # noqa: E731
        out.update(hyp_positions=pos(), hyp_targets=ids(b, n, k),
                   hyp_target_mask=np.ones((b, n, k), bool), hyp_mask=np.ones((b, n), bool),
                   sense_positions=pos(),
                   sense_vectors=rng.normal(size=(b, g.max_sense, g.sense_dim)).astype(np.float32),
                   sense_mask=np.ones((b, g.max_sense), bool),
                   verb_targets=np.where(rng.random((b, s)) < 0.05,
                                         rng.integers(0, s, (b, s)), -1).astype(np.int32))
    return out


def load_average() -> str:
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def machine() -> str:
    import jax
    d = jax.devices()
    return (f"{platform.node() or 'host'}: {os.cpu_count()} CPU cores, {len(d)}× "
            f"{d[0].device_kind} ({d[0].platform}), jax {jax.__version__}")


def record(name: str, table: str, notes: str = "", no_record: bool = False) -> None:
    """Print the table and append it, dated and machine-described, to docs/PERFORMANCE.md."""
    print(table)
    if notes:
        print(notes)
    if no_record:
        return
    stamp = datetime.date.today().isoformat()
    with open(os.path.join(ROOT, "docs", "PERFORMANCE.md"), "a", encoding="utf-8") as f:
        f.write(f"\n### {name} — {stamp} — {machine()}; load average {load_average()}\n\n"
                f"{table}\n" + (f"\n{notes}\n" if notes else ""))


def lower_train_step(config):
    """The kjax train step for `config`, traced and lowered against abstract
    state and batch (nothing allocated, nothing run): `.compile()` it for
    compile time or `memory_analysis()`."""
    import jax
    from kjax.parallel.mesh import batch_sharding, make_mesh, on_mesh
    from kjax.train.state import abstract_state, make_model, make_optimizer
    from kjax.train.step import make_train_step
    mesh = make_mesh(config)
    model, tx = make_model(config, deterministic=False), make_optimizer(config.train)
    state, shardings = abstract_state(config, mesh, model, tx)
    step = make_train_step(config, mesh, model, tx, shardings)
    sharding = batch_sharding(mesh)
    batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=sharding)
             for k, v in synthetic_batch(config, np.random.default_rng(0)).items()}
    with on_mesh(mesh, config):
        return step.jitted.lower(state, batch)


def train_step(config):
    """(step function, state, mesh): the kjax train step for `config`, with
    freshly initialised state (what the timed benchmarks run)."""
    from kjax.parallel.mesh import make_mesh
    from kjax.train.state import init_state, make_model, make_optimizer
    from kjax.train.step import make_train_step
    mesh = make_mesh(config)
    model, tx = make_model(config, deterministic=False), make_optimizer(config.train)
    state, shardings = init_state(config, mesh, model, tx)
    return make_train_step(config, mesh, model, tx, shardings), state, mesh


def peak_bytes(compiled) -> int:
    """Bytes live at the peak of one compiled step on one device: arguments +
    outputs not aliased to (donated) arguments + temporaries."""
    m = compiled.memory_analysis()
    return (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
            + m.temp_size_in_bytes)


def timed_steps(step, state, batch, steps: int):
    """(state after `steps` calls, seconds per step), waiting for the device."""
    import time
    import jax
    start = time.perf_counter()
    for _ in range(steps):
        state, metrics = step(state, batch)
    jax.block_until_ready((state, metrics))
    return state, (time.perf_counter() - start) / steps
