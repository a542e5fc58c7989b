"""A run's config resolved once and frozen (kjax/pretrain/run_config.py): the
auto keys and the flash tiles are settled before anything is built, nothing
assigns into the config after that, and the trainer knows no kernel."""
from __future__ import annotations

import ast
import glob
import os

import pytest
from ml_collections import FrozenConfigDict

from conftest import DEMO_CONFIG, ROOT, tiny_config, tiny_overrides
from kjax.config import load_config
from kjax.config.recorded import recorded_config_path
from kjax.pretrain import aot, run_config


def test_the_run_config_is_frozen_and_the_callers_is_left_alone(tmp_path):
    config = load_config(DEMO_CONFIG, tiny_overrides(str(tmp_path / "data")))   # auto keys
    run = run_config.resolve_run(config, str(tmp_path / "w"))
    assert isinstance(run, FrozenConfigDict)
    assert config.train.dropout_rng == "auto" and run.train.dropout_rng == "threefry"
    with pytest.raises(AttributeError, match="immutable"):
        run.train.num_steps = 7
    with pytest.raises(AttributeError, match="immutable"):
        run.model.attention_tiles["*"] = "table"
    with pytest.raises(AttributeError, match="immutable"):
        run["data"]["max_seq_len"] = 128


def _imports(path: str) -> set[str]:
    tree = ast.parse(open(path, encoding="utf-8").read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return names


def test_pretraining_imports_no_kernel():
    """The trainer (and the rest of kjax/pretrain) reaches the flash kernels'
    tile choice only through the model's attention (attention_core)."""
    for path in glob.glob(os.path.join(ROOT, "kjax", "pretrain", "*.py")):
        reached = [n for n in _imports(path) if n.startswith("kjax.model.flash")]
        assert not reached, f"{path} imports {reached}"


def _as_if_on_a_gpu(monkeypatch):
    """The steps traced as for a GPU on this CPU host (the trace only: nothing is
    lowered), where the flash calls choose tiles (none can be timed here: the table)."""
    from kjax.config.platform import lowering_for
    monkeypatch.setattr(aot, "lowering_for", lambda name, kind=None: lowering_for("gpu"))
    return lowering_for("gpu")


def test_the_tiles_are_chosen_by_a_trace_before_the_build(tmp_path, monkeypatch):
    from kjax.config.recorded import record_config
    from kjax.model.flash import tuning as flash_tuning
    from kjax.model.flash.tiles import format_tiles, kernel_tiles
    config = tiny_config(tmp_path / "data", **{"model.attention_impl": "flash"})
    with _as_if_on_a_gpu(monkeypatch):
        run = run_config.resolve_run(config, str(tmp_path / "w"))
    tiles = dict(run.model.attention_tiles)
    # every flash call of the step (batch shard of 2 rows, 4 heads of 8; init's 1 row)
    assert "s64_d8_b2_h4_float32_dropout" in tiles, tiles
    assert set(tiles.values()) == {format_tiles(kernel_tiles(64, True, head_dim=8))}
    assert dict(config.model.attention_tiles) == {}   # the caller's config is as it was
    # The recorded run fixes every signature: resolving again times nothing and
    # the step's calls find their tiles in the config, not in this process.
    record_config(run, str(tmp_path / "w"))
    monkeypatch.setattr(flash_tuning, "_cached_or_timed",
                        lambda *a: pytest.fail("a tile chosen after the config was resolved"))
    with _as_if_on_a_gpu(monkeypatch):
        again = run_config.resolve_run(config, str(tmp_path / "w"))
    assert dict(again.model.attention_tiles) == tiles
    recorded = load_config(recorded_config_path(str(tmp_path / "w")))
    assert dict(recorded.model.attention_tiles) == tiles


def test_the_tiles_are_chosen_after_the_trace_has_closed(tmp_path, monkeypatch):
    """The trace lists the calls; the choice (cache, timing) runs on this thread
    once the trace has closed, where a jax operation gives a value, not a tracer."""
    import jax
    import jax.numpy as jnp
    from kjax.model.flash import tuning as flash_tuning
    from kjax.model.flash.tiles import kernel_tiles
    chosen = []

    def choose(call, measure):
        chosen.append((call.signature, isinstance(jnp.ones(1) + 1, jax.core.Tracer)))
        return kernel_tiles(call.seq, True, head_dim=call.head_dim)
    monkeypatch.setattr(flash_tuning, "_cached_or_timed", choose)
    config = tiny_config(tmp_path / "data", **{"model.attention_impl": "flash",
                                               "train.eval_every": 3})
    with _as_if_on_a_gpu(monkeypatch):
        run = run_config.resolve_run(config, str(tmp_path / "w"))
    assert chosen and not any(traced for _, traced in chosen)
    # the train step's calls (dropout) and the eval step's (none), each once
    assert sorted(s for s, _ in chosen) == sorted(run.model.attention_tiles) == [
        "s64_d8_b2_h4_float32", "s64_d8_b2_h4_float32_dropout"]


def test_no_trace_where_no_call_reaches_the_kernel(tmp_path, monkeypatch):
    """On this CPU (and on a GPU under `xla` or `dot_product`, whose calls never
    reach the kernel) resolving a run traces nothing."""
    monkeypatch.setattr(aot, "trace", lambda *a, **k: pytest.fail("traced"))
    config = tiny_config(tmp_path / "data", **{"model.attention_impl": "flash"})
    assert dict(run_config.resolve_run(config, str(tmp_path / "w")).model.attention_tiles) == {}
    from kjax.config.platform import lowering_for
    for impl in ("xla", "dot_product"):
        with lowering_for("gpu"):
            config = tiny_config(tmp_path / "data", **{"model.attention_impl": impl,
                                                       "model.attention_dropout_rate": 0.0})
            assert dict(run_config.resolve_run(config, str(tmp_path / f"w_{impl}"))
                        .model.attention_tiles) == {}
