"""Platform defaults (kjax/config/platform_defaults.py): `auto` keys take the
GPU's measured fast recipe there, stay as before on CPU and TPU, and a run
keeps the values it recorded wherever it resumes."""
from __future__ import annotations

import os

import jax
import pytest

from conftest import DEMO_CONFIG, ROOT
from kjax.config import load_config, platform_defaults
from kjax.config.recorded import recorded_config_path, take_notes, write_config_file
from kjax.model.arch import architecture
from kjax.model.config import EncoderConfig
from kjax.pretrain.run_config import resolve_run


@pytest.mark.parametrize("platform, rng, unroll", [
    ("cuda", "rbg", 0), ("gpu", "rbg", 0), ("rocm", "rbg", 0),
    ("tpu", "threefry", 1), ("cpu", "threefry", 1)])
def test_auto_keys_take_the_platforms_values(platform, rng, unroll):
    config = load_config(DEMO_CONFIG)
    assert (config.train.dropout_rng, config.model.scan_unroll) == ("auto", -1)
    assert sorted(platform_defaults.resolve(config, platform)) == [
        f"model.scan_unroll={unroll}", f"train.dropout_rng={rng!r}"]
    assert (config.train.dropout_rng, config.model.scan_unroll) == (rng, unroll)


def test_a_value_the_user_set_is_kept():
    config = load_config(DEMO_CONFIG, ["--config.train.dropout_rng=threefry",
                                       "--config.model.scan_unroll=2"])
    assert platform_defaults.resolve(config, "cuda") == []
    assert (config.train.dropout_rng, config.model.scan_unroll) == ("threefry", 2)


def test_builders_refuse_an_unresolved_auto_key(tmp_path):
    """Models and steps are built from resolved configs only: an auto value that
    reaches a builder is a ValueError, not a value it picks for itself."""
    import jax.numpy as jnp
    from conftest import tiny_config
    from kjax.model.encoder import BertForPreTraining
    from kjax.train.step import make_train_step
    config = tiny_config(tmp_path)
    config.model.scan_unroll = -1
    model = BertForPreTraining(EncoderConfig.from_config(config.model))
    ids = jnp.zeros((1, 8), jnp.int32)
    with pytest.raises(ValueError, match=r"model.scan_unroll=-1 \(auto\) reached a builder "
                                         r"unresolved"):
        model.init(jax.random.key(0), ids, ids, jnp.ones((1, 8), jnp.int32))
    config.train.dropout_rng = "auto"
    with pytest.raises(ValueError, match=r"train.dropout_rng='auto' \(auto\) reached a builder"):
        make_train_step(config, None, None, None, None)


def test_resolved_is_a_copy_for_this_platform():
    config = load_config(DEMO_CONFIG)
    copy = platform_defaults.resolved(config)
    assert (config.train.dropout_rng, config.model.scan_unroll) == ("auto", -1)
    here = jax.default_backend()
    assert (copy.train.dropout_rng, copy.model.scan_unroll) == (
        platform_defaults.platform_value("train.dropout_rng", here),
        platform_defaults.platform_value("model.scan_unroll", here))


def test_auto_keys_follow_the_platform_a_step_is_traced_for():
    """Traced on this CPU host for a GPU (`kjax compile`, `make gpu-check`), the
    auto keys take the GPU's values, as attention takes its path."""
    from kjax.config.platform import lowering_for, platform
    with lowering_for("cuda"):
        assert platform() == "gpu"
        assert platform_defaults.resolved(load_config(DEMO_CONFIG)).model.scan_unroll == 0
        assert sorted(platform_defaults.resolve(load_config(DEMO_CONFIG))) == [
            "model.scan_unroll=0", "train.dropout_rng='rbg'"]
    assert platform_defaults.resolved(load_config(DEMO_CONFIG)).model.scan_unroll == \
        platform_defaults.platform_value("model.scan_unroll", jax.default_backend())


@pytest.mark.parametrize("name, kjax_name", [("cuda", "gpu"), ("ROCm", "gpu"), ("gpu", "gpu"),
                                             ("tpu", "tpu"), ("cpu", "cpu")])
def test_one_name_for_each_platform(name, kjax_name):
    """kjax.config.platform is the one place jax's platform names become kjax's."""
    from kjax.config.platform import lowering_for, normalize, platform
    assert normalize(name) == kjax_name
    with lowering_for(name):
        assert platform() == kjax_name
        assert platform_defaults.resolved(load_config(DEMO_CONFIG)).train.dropout_rng == (
            "rbg" if kjax_name == "gpu" else "threefry")


def test_a_resumed_run_keeps_what_it_recorded(tmp_path):
    """Started on a GPU (recorded rbg, unrolled), resumed here with a config
    that still says auto: the recorded values win, so the masks and the
    program are the ones the checkpoints were written with."""
    started = load_config(DEMO_CONFIG)
    platform_defaults.resolve(started, "cuda")
    write_config_file(started, recorded_config_path(str(tmp_path)), "recorded")
    resumed = load_config(DEMO_CONFIG)
    take_notes()
    run = resolve_run(resumed, str(tmp_path))
    assert (run.train.dropout_rng, run.model.scan_unroll) == ("rbg", 0)
    assert (resumed.train.dropout_rng, resumed.model.scan_unroll) == ("auto", -1)   # a copy
    [line] = [n for n in take_notes() if n.startswith("keeping")]   # (and the relative paths')
    assert "keeping train.dropout_rng='rbg', model.scan_unroll=0 as recorded in" in line


def test_a_new_run_takes_this_platforms_values(tmp_path):
    config = load_config(DEMO_CONFIG)
    take_notes()
    run = resolve_run(config, str(tmp_path))
    want = platform_defaults.platform_value("train.dropout_rng", jax.default_backend())
    assert run.train.dropout_rng == want
    assert take_notes() == []   # nothing to say: kjax_config.py records the values


def test_auto_against_a_recorded_value_is_no_difference():
    from kjax.config.recorded import config_differences
    recorded = load_config(DEMO_CONFIG)
    platform_defaults.resolve(recorded, "cuda")
    assert config_differences(recorded, load_config(DEMO_CONFIG)) == []
    other = load_config(DEMO_CONFIG, ["--config.train.dropout_rng=threefry"])
    assert config_differences(recorded, other) == ["train.dropout_rng: 'rbg' → 'threefry'"]


def compare_op_by_op_init(folder: str) -> None:
    import numpy as np
    from conftest import tiny_config
    from kjax.parallel.mesh import make_mesh
    from kjax.train import state as S
    config = tiny_config(folder)
    mesh = make_mesh(config)
    model, tx = S.make_model(config, deterministic=False), S.make_optimizer(config.train)
    jitted, shardings = S.init_state(config, mesh, model, tx)
    S.op_by_op_init = lambda mesh: True
    eager, _ = S.init_state(config, mesh, model, tx)
    for a, b, sharding in zip(jax.tree.leaves(jitted), jax.tree.leaves(eager),
                              jax.tree.leaves(shardings)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert b.sharding.is_equivalent_to(sharding, b.ndim)


def test_op_by_op_init_gives_the_jitted_parameters(tmp_path):
    """One GPU process initialises op by op (kjax.train.state.op_by_op_init):
    the same state as the jitted init, placed with the same shardings.
    Compared in a process of its own at XLA's default optimisation level (3),
    as a run compiles: at the suite's level 0 (tests/conftest.py) XLA:CPU's
    fused init rounds some values a unit in the last place differently."""
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import conftest; "
            "from test_platform_defaults import compare_op_by_op_init as compare; "
            "compare(sys.argv[2]); print('same')")
    env = {**os.environ, "XLA_FLAGS": "--xla_backend_optimization_level=3"}
    proc = subprocess.run([sys.executable, "-c", code, here, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.split()[-1:] == ["same"], proc.stderr[-3000:]


MODERN = os.path.join(ROOT, "tpu_configs", "modern_small.py")


@pytest.mark.parametrize("unroll", [0, 1, 4])
def test_scan_unroll_with_the_modern_recipe_is_refused_in_one_line(unroll):
    """modern's layers differ (window, θ, layer 0's norm): never a scanned loop,
    so a scan_unroll it cannot act on is refused, not ignored."""
    from kjax.errors import KjaxError
    from kjax.objectives import check_config
    assert load_config(MODERN).model.scan_unroll == -1
    with pytest.raises(KjaxError, match=rf"^model.scan_unroll={unroll} does nothing with "
                                        rf"model.arch='modern' .*: leave it at -1 "):
        check_config(load_config(MODERN, [f"--config.model.scan_unroll={unroll}"]))
    check_config(load_config(DEMO_CONFIG, [f"--config.model.scan_unroll={unroll}"]))  # bert: acts


def test_a_modern_run_records_scan_unroll_unresolved_and_resumes(tmp_path):
    """`kjax train` resolves only the auto keys that act: a modern run records
    scan_unroll -1, so its kjax_config.py loads again (resume, eval, export)."""
    config = load_config(MODERN)
    keys = architecture(config).auto_keys
    assert platform_defaults.resolve(config, "cuda", keys=keys) == ["train.dropout_rng='rbg'"]
    assert config.model.scan_unroll == -1
    write_config_file(config, recorded_config_path(str(tmp_path)), "recorded")
    resumed = load_config(recorded_config_path(str(tmp_path)))
    take_notes()
    run = resolve_run(resumed, str(tmp_path))
    assert (run.train.dropout_rng, run.model.scan_unroll) == ("rbg", -1)
    notes = take_notes()
    assert not any("scan_unroll" in n for n in notes), notes
