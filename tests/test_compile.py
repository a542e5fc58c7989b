"""`kjax compile` (kjax/pretrain/aot.py, kjax/parallel/topology.py, kjax/cli/compile.py).

The TPU compiles themselves need libtpu (`make tpu-check` runs them for every
preset); here the same code path compiles for this host's 8 CPU devices
(`--topology local`), the batch search runs against a scripted compiler,
and the loop-counted cost is checked against an unrolled compile.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import DEMO_CONFIG, tiny_config, tiny_overrides
from kjax.cli import main
from kjax.errors import KjaxError
from kjax.parallel.topology import parse_topology
from kjax.pretrain import aot, memory_fit


@pytest.mark.parametrize("text, name, devices, hosts", [
    ("v2-8", "v2:2x2", 8, 1), ("v3-8", "v3:2x2", 8, 1), ("v3-32", "v3:4x4", 32, 4),
    ("v3-128", "v3:8x8", 128, 16), ("v3-64", "v3:4x8", 64, 8), ("v4-8", "v4:2x2x1", 4, 1),
    ("v4-32", "v4:2x2x4", 16, 4), ("V3:4x4", "v3:4x4", 32, 4), ("v4:2x2x2", "v4:2x2x2", 8, 2)])
def test_topology_names(text, name, devices, hosts):
    t = parse_topology(text)
    assert (t.name, t.num_devices, t.hosts) == (name, devices, hosts)


@pytest.mark.parametrize("text", ["v9-8", "v3-12", "v3-4", "v3:4x4x4", "tpu", ""])
def test_unknown_topology_is_one_line(text):
    with pytest.raises(KjaxError, match="unknown TPU topology; give an accelerator type"):
        parse_topology(text)


def test_without_libtpu_the_error_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setattr("kjax.parallel.topology.libtpu_available", lambda: False)
    assert main(["compile", "--config", DEMO_CONFIG, "--topology", "v3-8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kjax: error: ")
    assert "pip install 'kjax[tpu]'" in err


def test_unknown_topology_from_the_command_line(capsys):
    assert main(["compile", "--config", DEMO_CONFIG, "--topology", "v3-9"]) == 2
    assert "kjax: error: --topology 'v3-9': unknown TPU topology" in capsys.readouterr().err


def test_compile_local_reports_train_and_eval_memory(tmp_path, capsys):
    """The verb's whole path on the 8 CPU devices: mesh, abstract state, the
    loader's batch shapes, both steps compiled, memory from XLA."""
    code = main(["compile", "--config", DEMO_CONFIG, "--topology", "local",
                 *tiny_overrides(str(tmp_path)), "--json"])
    assert code == 0
    import json
    report = json.loads(capsys.readouterr().out)
    assert report["devices"] == 8 and report["mesh"] == {"data": 8, "fsdp": 1, "tensor": 1}
    for name in ("train", "eval"):
        s = report["steps"][name]
        assert s["fits"] and s["arguments"] > 0 and s["temporaries"] > 0
        assert s["peak"] == s["arguments"] + s["outputs"] - s["aliased"] + s["temporaries"]
    # the train step's arguments hold params + 2 Adam moments (fp32), each
    # device a slice of the large ones (mesh.shard_update)
    config = tiny_config(tmp_path)
    import jax
    from kjax.train.state import dummy_inputs, make_model
    args, kwargs = dummy_inputs(config)
    params = jax.eval_shape(lambda: make_model(config, False).init(
        jax.random.key(0), *args, **kwargs))["params"]
    n = sum(np.prod(x.shape) for x in jax.tree.leaves(params))
    assert 3 * 4 * n / 8 <= report["steps"]["train"]["arguments"] < 3 * 4 * n / 2
    assert report["steps"]["eval"]["arguments"] < report["steps"]["train"]["arguments"]
    moved = report["steps"]["train"]["collectives"]   # gathered once, reduced once
    assert moved["in_loops"] == 0 and moved["all-gather"] > 0
    assert moved["all-reduce"] + moved["reduce-scatter"] >= 4 * n * 0.9
    assert report["layout"]["update"].startswith("sliced over data")
    assert "roofline" not in report   # no chip peak for a CPU


def _scripted(limit: int, fixed: int, per_row: int, calls: list, sizes: bool = True):
    """A compiler whose temporaries are fixed + per_row · batch and that refuses
    above `limit`, naming the sizes as XLA's TPU verdict does (or not)."""
    def compile_step(config, devices, step="train", cache=None):
        b = config.train.batch_size
        temps = fixed + per_row * b
        calls.append((b, temps <= limit))
        if temps > limit:
            error = (f"RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required "
                     f"for HLO temporaries ({temps / 2**30:.4f}G) exceeds available HBM "
                     f"({limit / 2**30:.4f}G)." if sizes else "RESOURCE_EXHAUSTED: scripted")
            return aot.StepCompile(step, b, 1.0, False, error=error)
        return aot.StepCompile(step, b, 1.0, True, temporaries=temps, peak=temps + 7)
    return compile_step


@pytest.mark.parametrize("sizes", [True, False], ids=["verdict-names-sizes", "bisection"])
@pytest.mark.parametrize("limit_rows, start", [(37, 16), (100, 16), (9, 16), (16, 16),
                                               (1000, 16), (3, 16), (0, 16)])
def test_fit_batch_finds_the_largest_batch_that_compiles(tmp_path, monkeypatch, limit_rows,
                                                         start, sizes):
    """Batch searched in rows per batch shard (8 shards here), the limit a
    little above the last fitting row. When XLA's refusals name the bytes
    needed, at most two compiles fit (the dear ones) and six in all."""
    import jax
    calls = []
    fixed, per = 2**30, 2**20
    monkeypatch.setattr(aot, "compile_step", _scripted(fixed + per * 8 * limit_rows + 55, fixed,
                                                       per, calls, sizes))
    config = tiny_config(tmp_path, **{"train.batch_size": 8 * start})
    first = aot.compile_step(config, jax.devices())
    calls.clear()
    largest, failing, seen = memory_fit.fit_batch(config, jax.devices(), first, budget=12,
                                           progress=lambda m: None)
    assert largest <= 8 * limit_rows < failing and seen[failing].fits is False
    if sizes or limit_rows <= 100:   # bisection alone: as close when the budget allows
        # exact up to 32 rows per shard, then to within 1/32
        assert failing // 8 - largest // 8 <= max(1, largest // 8 // 32), (largest, failing)
    assert set(seen) == {8 * start} | {b for b, _ in calls}
    if sizes:
        assert sum(fits for _, fits in calls) <= 2 and len(calls) <= 6, calls
    else:
        assert len(calls) <= 12, calls


def test_xla_refusals_give_the_bytes_they_needed():
    assert memory_fit.required_temporaries(
        "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
        "temporaries (28.03G) exceeds available HBM (15.48G).") == (int(28.03 * 2**30),
                                                                    int(15.48 * 2**30))
    assert memory_fit.required_temporaries("Ran out of memory in memory space hbm. Used 20.15G of "
                                    "15.48G hbm.") == (int(20.15 * 2**30), int(15.48 * 2**30))
    assert memory_fit.required_temporaries("RESOURCE_EXHAUSTED: out of memory") == (None, None)


def test_not_fitting_is_one_line_naming_what_to_change(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(aot, "compile_step", lambda config, devices, step="train", cache=None:
                        aot.StepCompile(step, config.train.batch_size, 1.0, False,
                                        error="RESOURCE_EXHAUSTED: Ran out of memory in memory "
                                        "space hbm. Used 20.15G of 15.48G hbm."))
    code = main(["compile", "--config", DEMO_CONFIG, "--topology", "local", "--no-roofline",
                 *tiny_overrides(str(tmp_path))])
    assert code == 2
    err = capsys.readouterr().err.splitlines()   # progress lines, then the error
    assert [e for e in err if e.startswith("kjax:")] == err[-1:]
    err = err[-1]
    assert err.startswith(f"kjax: error: {DEMO_CONFIG} does not fit local")
    for hint in ("Used 20.15G of 15.48G", "--config.train.batch_size", "remat_policy",
                 "--config.mesh.fsdp=-1"):
        assert hint in err, hint


@pytest.mark.slow
def test_loop_counted_cost_matches_an_unrolled_compile(tmp_path):
    """XLA counts a while loop's body once; the correction (1- and 2-layer
    unrolled compiles) must give what the unrolled 4-layer step costs."""
    import jax
    devices = jax.devices()
    scanned_cfg = tiny_config(tmp_path, **{"model.num_layers": 4, "model.scan_layers": True,
                                           "model.dropout_rate": 0.0,
                                           "model.attention_dropout_rate": 0.0})
    scanned = aot.compile_step(scanned_cfg, devices)
    flops, bytes_accessed, _ = aot.loop_counted_cost(scanned_cfg, devices, scanned)
    unrolled = aot.compile_step(aot.with_overrides(scanned_cfg, **{"model.scan_layers": False}),
                                devices)
    assert scanned.flops < 0.8 * unrolled.flops          # the loop counted once
    assert flops == pytest.approx(unrolled.flops, rel=0.02)
    assert bytes_accessed == pytest.approx(unrolled.bytes_accessed, rel=0.1)


@pytest.mark.parametrize("extra", [
    {"train.packing": True, "train.nsp_weight": 0.0, "data.nsp_prob": 0.0},
    {"model.shake_factor": 0.3, "shake.variant": "random", "shake.layout": "pairs"}])
def test_synthetic_batch_has_the_loader_keys(tmp_path, extra):
    """Keys and per-row shapes as the loader yields them (packing: repack's)."""
    from kjax.batches.packing import repack
    from kjax.batches.synthetic import batch_shapes
    config = tiny_config(tmp_path, **extra)
    shapes = batch_shapes(config, 4)
    assert all(shape[0] == 4 for shape, _ in shapes.values())
    if config.train.packing:
        s = config.data.max_seq_len
        row = repack({"input_ids": np.ones(s), "token_type_ids": np.zeros(s),
                      "mlm_targets": np.ones(s, np.int32), "input_ids_segment_ids": np.ones(s),
                      "input_ids_positions": np.arange(s)}, config.data.max_predictions_per_seq)
        assert set(row) == set(shapes)
        for k, v in row.items():
            assert shapes[k] == ((4, *v.shape), v.dtype), k
    else:
        assert {"shake_key_start", "shake_key_end", "shake_weight"} <= set(shapes)


def test_the_same_program_is_compiled_once(tmp_path):
    import jax
    cache, config = {}, tiny_config(tmp_path)
    first = aot.compile_step(config, jax.devices(), "eval", cache)
    again = aot.compile_step(aot.with_overrides(config, **{"name": "twin"}), jax.devices(),
                             "eval", cache)
    assert first.same_as == "" and again.same_as == config.name and len(cache) == 1
    assert (again.peak, again.fits) == (first.peak, first.fits)
    other = aot.compile_step(aot.with_overrides(config, **{"train.batch_size": 32}),
                             jax.devices(), "eval", cache)
    assert other.same_as == "" and len(cache) == 2
    # SHAKE's bf per layer is a constant in the program: another value, the
    # same buffers (compiled once); bf = 0 may be folded away (compiled)
    shaken = {"model.shake_factor": 0.3, "shake.variant": "random"}
    plus = aot.compile_step(aot.with_overrides(config, **shaken), jax.devices(), "eval", cache)
    minus = aot.compile_step(aot.with_overrides(config, **{**shaken, "model.shake_factor": -0.2}),
                             jax.devices(), "eval", cache)
    assert plus.same_as == "" and minus.same_as == config.name and len(cache) == 3


def test_xla_out_of_memory_message_is_kept_to_its_first_sentence():
    """The message libtpu 0.0.42.1 gives for a v3-32 (demo.py at batch 2^20)."""
    text = ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
            "temporaries (40.53G) exceeds available HBM (15.48G). Largest program allocations "
            "in hbm: 1. Size: 10.00G ...")
    assert aot._oom_summary(text) == (
        "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
        "temporaries (40.53G) exceeds available HBM (15.48G).")
    assert aot.OOM.search(text)


def test_compile_reports_one_microbatch_memory(tmp_path, capsys):
    """With train.microbatches the step holds one microbatch's activations:
    the same global batch compiles to fewer temporaries, and the report says
    the split."""
    import json

    def report(k):
        assert main(["compile", "--config", DEMO_CONFIG, "--topology", "local", "--no-eval",
                     *tiny_overrides(str(tmp_path), **{"train.batch_size": 64,
                                                       "train.microbatches": k}),
                     "--json"]) == 0
        return json.loads(capsys.readouterr().out)
    whole, split = report(1), report(4)
    assert (whole["microbatches"], split["microbatches"]) == (1, 4)
    assert split["steps"]["train"]["temporaries"] < whole["steps"]["train"]["temporaries"]
    from kjax.cli.compile import format_report
    text = format_report("demo.py", {**split, "steps": {}})
    assert "batch 64 (8 per batch shard) in 4 microbatches of 16 (2 per batch shard" in text


@pytest.mark.parametrize("batch, largest, shards, want", [
    (256, 128, 8, 2), (256, 100, 8, 4), (256, 256, 8, 1), (256, 7, 8, None), (96, 40, 8, 3)])
def test_fewest_microbatches_that_fit(tmp_path, batch, largest, shards, want):
    config = tiny_config(tmp_path, **{"train.batch_size": batch, "mesh.data": shards})
    assert memory_fit.fewest_microbatches(config, 8, 1, largest) == want


def test_fit_batch_names_the_accumulation_that_fits(tmp_path, monkeypatch):
    """The one-pass search gives the largest microbatch; the config's batch then
    needs the fewest microbatches of at most that, which one more compile checks."""
    import jax
    calls, one_pass = [], _scripted(20 * 1000, 0, 1000, [])

    def compile_step(config, devices, step="train", cache=None):   # memory of a microbatch
        k = config.train.microbatches
        calls.append(k)
        return one_pass(aot.with_overrides(config, **{
            "train.batch_size": config.train.batch_size // k}), devices, step, cache)
    monkeypatch.setattr(aot, "compile_step", compile_step)
    config = tiny_config(tmp_path, **{"train.batch_size": 64})
    first = aot.compile_step(config, jax.devices())
    largest, _, _ = memory_fit.fit_batch(config, jax.devices(), first, budget=12,
                                         progress=lambda m: 0)
    assert largest == 16
    found = memory_fit.accumulation_fit(config, jax.devices(), largest, first, None, lambda m: 0)
    assert found == {"microbatches": 4, "microbatches_fit": True, "microbatches_peak": 16007}
    assert calls[-1] == 4   # the split was compiled, not assumed
    assert "--config.train.microbatches=4" in memory_fit.advice(config, first, largest, 4)


@pytest.mark.slow
def test_loop_counted_cost_counts_every_microbatch(tmp_path):
    """XLA counts the microbatch loop's body once too: an accumulated step is
    costed from 1 and 2 microbatches (their loop unrolled) with 1 and 2
    layers, and comes to what the same batch costs in one pass."""
    import jax
    devices = jax.devices()
    shape = {"model.num_layers": 3, "model.scan_layers": True, "train.batch_size": 64,
             "model.dropout_rate": 0.0, "model.attention_dropout_rate": 0.0}
    whole_cfg = tiny_config(tmp_path, **shape)
    whole = aot.loop_counted_cost(whole_cfg, devices, aot.compile_step(whole_cfg, devices))
    split_cfg = tiny_config(tmp_path, **shape, **{"train.microbatches": 4})
    split = aot.compile_step(split_cfg, devices)
    flops, bytes_accessed, seconds = aot.loop_counted_cost(split_cfg, devices, split)
    assert split.flops < 0.5 * whole[0] and seconds > 0     # the loop's body counted once
    assert flops == pytest.approx(whole[0], rel=0.03)
    assert split.collectives["in_loops"] == 0               # one reduction, after the loop


def test_fsdp_advice_names_the_gather_in_every_microbatch(tmp_path):
    """An accumulated FSDP step that does not fit with its parameters gathered
    once a step is told of gathering them in every microbatch; the report
    says which it compiled."""
    config = tiny_config(tmp_path, **{"mesh.data": 2, "mesh.fsdp": 4, "train.batch_size": 64,
                                      "train.microbatches": 2})
    refused = aot.StepCompile("train", 64, 1.0, False, error="RESOURCE_EXHAUSTED: scripted")
    assert "--config.mesh.fsdp_gather=microbatch" in memory_fit.advice(config, refused)
    assert memory_fit.layout(config, 8) == {
        "update": "sliced over data (parameters gathered once a step, gradients "
                  "reduce-scattered once)", "fsdp_gather": "once a step"}
    config.mesh.fsdp_gather = "microbatch"
    assert "fsdp_gather" not in memory_fit.advice(config, refused)
    assert memory_fit.layout(config, 8)["fsdp_gather"] == "once a microbatch"
