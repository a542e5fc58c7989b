"""Batch-size ramps (train.batch_ramp, kjax/config/batch_ramp.py): the stages'
steps and tokens by hand, the positions the loader yields across stage
changes (each once, in order, on any process count), the mask schedule by
the ramp's steps, a resume mid-ramp equal to the uninterrupted run with each
stage compiled once, `kjax compile` per stage, and the one-line errors."""
import contextlib
import json
import zlib

import numpy as np
import pytest

from conftest import DEMO_CONFIG, tiny_config, tiny_overrides
from kjax.batches import loader
from kjax.batches.loader import train_dataset
from kjax.cli import main
from kjax.config.batch_ramp import ramp_of
from kjax.errors import KjaxError
from kjax.objectives import check_config
from kjax.train.metrics import read_metrics
from kjax.parallel.mesh import check_mesh

# batch 32 in 2 microbatches of 16; stages of 8 (one pass) and 16 (one microbatch)
RAMP = {"train.batch_size": 32, "train.microbatches": 2,
        "train.batch_ramp": ((2, 8), (4, 16)), "train.batch_ramp_unit": "steps"}


def test_token_stages_end_at_the_first_step_that_reaches_them(tmp_path):
    """64-token rows: (1000 tokens, batch 8) takes ⌈1000 / 512⌉ = 2 steps (1024
    tokens), (3000, 16) ⌈1976 / 1024⌉ = 2 more (3072), then batch 32; the
    tokens after n steps are the sum over the stages of steps × batch × 64."""
    config = tiny_config(tmp_path, **{**RAMP, "train.batch_ramp": ((1000, 8), (3000, 16)),
                                      "train.batch_ramp_unit": "tokens"})
    ramp = ramp_of(config)
    assert [(s.first_step, s.end_step, s.batch_size, s.microbatches, s.first_position)
            for s in ramp.stages] == [(0, 2, 8, 1, 0), (2, 4, 16, 1, 16), (4, None, 32, 2, 48)]
    assert ramp.tokens_at(4) == 3072 and ramp.tokens_at(6) == (2 * 8 + 2 * 16 + 2 * 32) * 64
    for n in range(12):
        assert ramp.tokens_at(n) == sum(s.steps_in(n) * s.batch_size * 64 for s in ramp.stages)
    positions = [ramp.position_of_step(s) for s in range(8)]
    assert positions == [0, 8, 16, 32, 48, 80, 112, 144]
    for step in range(7):   # every position of step s maps back to s
        assert {ramp.step_of_position(p) for p in range(positions[step], positions[step + 1])} \
            == {step}
    same = ramp_of(tiny_config(tmp_path))   # no ramp: position = step × batch, as before
    assert not same.ramped and same.position_of_step(5) == 80 and same.step_of_position(95) == 5


def test_a_stage_config_leaves_the_runs_config_as_it_was(tmp_path):
    """The run's frozen config is what it records: a stage's config (and any
    copy_of it, assigned into) must not change what its as_configdict() gives."""
    from ml_collections import FrozenConfigDict
    from kjax.config.batch_ramp import stage_config
    from kjax.config.load import copy_of
    config = FrozenConfigDict(tiny_config(tmp_path, **RAMP))
    stage = stage_config(config, ramp_of(config).stages[0])
    copy = copy_of(config)
    copy.train.batch_size = 5
    assert (stage.train.batch_size, stage.train.microbatches, stage.train.batch_ramp) == (8, 1, ())
    assert config.as_configdict().train.batch_size == config.train.batch_size == 32
    assert copy_of(config).train.batch_ramp == ((2, 8), (4, 16))


def positions_and_records(monkeypatch):
    """The loader's rows as (stream position, a hash of the example's tokens)."""
    def tagged(self, example, rng):
        ids = np.asarray(example["input_ids"], np.int32)
        return {"position": np.int64(example["position"]),
                "record": np.int64(zlib.crc32(ids.tobytes()))}
    monkeypatch.setattr(loader.ToModelInputs, "random_map", tagged)


def read(config, steps, process_count=1, state=None):
    """{process: [its rows of each step]} for `steps` steps (from `state`)."""
    out = {}
    for p in range(process_count):
        it = iter(train_dataset(config, p, process_count))
        if state is not None:
            it.set_state(state)
        out[p] = [next(it) for _ in range(steps)]
    return out, it.get_state()


def test_the_loader_reads_each_position_once_across_stage_changes(prepared, monkeypatch):
    """Steps of 8, 8, 16, 16, 32, 32 rows on two processes: together they read
    positions 0..111 in order, each once; a loader resumed mid-stage (after
    step 3) reads what the uninterrupted one did; every record of the epoch
    (650 examples) is read once before any is read again."""
    positions_and_records(monkeypatch)
    config = tiny_config(prepared, **RAMP)
    rows, state = read(config, 6, process_count=2)
    assert state == {"position": 112}
    sizes = [len(b["position"]) for b in rows[0]]
    assert sizes == [4, 4, 8, 8, 16, 16]   # each process's half of 8, 8, 16, 16, 32, 32
    seen = np.concatenate([np.concatenate([rows[0][s]["position"], rows[1][s]["position"]])
                           for s in range(6)])
    np.testing.assert_array_equal(seen, np.arange(112))
    resumed, _ = read(config, 3, process_count=2, state={"position": 32})
    for p in (0, 1):
        for a, b in zip(rows[p][3:], resumed[p]):
            np.testing.assert_array_equal(a["position"], b["position"])
            np.testing.assert_array_equal(a["record"], b["record"])
    # an epoch: the ramp's first 650 positions hold each of the 650 records once
    long = tiny_config(prepared, **{**RAMP, "train.num_steps": 40})
    epoch, _ = read(long, 24)
    seen = np.concatenate([b["position"] for b in epoch[0]])
    records = np.concatenate([b["record"] for b in epoch[0]])
    assert np.array_equal(seen, np.arange(len(seen))) and len(seen) >= 650
    unramped, _ = read(tiny_config(prepared, **{"train.num_steps": 40}), 41)
    plain = np.concatenate([b["record"] for b in unramped[0]])
    np.testing.assert_array_equal(records[:650], plain[:650])   # one stream, batched otherwise
    assert len(set(records[:650].tolist())) == len(set(plain[:650].tolist()))


def test_loader_workers_give_the_same_batches_across_stage_changes(prepared):
    """train.loader_workers=2 (grain's worker processes, built again at each
    stage) yields the batches of the in-process loader, masks included."""
    plain, _ = read(tiny_config(prepared, **RAMP), 5)
    workers, state = read(tiny_config(prepared, **RAMP, **{"train.loader_workers": 2}), 5)
    assert state == {"position": 80}
    for a, b in zip(plain[0], workers[0]):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_a_records_mask_rate_is_that_of_the_ramp_step_it_lands_in(prepared, monkeypatch):
    """A linear 30 → 15 % schedule over 6 steps: the record at position 40
    lands in step 3 (0-based: positions 32..47 at batch 16), not 40 // 32 = 1."""
    asked = []
    monkeypatch.setattr(loader, "mask_rate", lambda d, step, n: asked.append(step) or 0.2)
    config = tiny_config(prepared, **RAMP, **{"data.mask_schedule": "linear",
                                              "data.masked_lm_prob": 0.3,
                                              "data.final_masked_lm_prob": 0.15,
                                              "data.max_predictions_per_seq": 18})
    transform = loader.ToModelInputs(config, dynamic_masking=True)
    from kjax.batches.stream import example_stream
    ds, _ = example_stream(config)
    for position in (0, 15, 16, 40, 48, 80):
        transform.random_map(dict(ds[position]), np.random.default_rng(0))
    assert asked == [0, 1, 2, 3, 4, 5]


@pytest.mark.slow
def test_a_run_resumed_mid_ramp_is_the_uninterrupted_run_each_stage_compiled_once(
        prepared, tmp_path, monkeypatch):
    """Stopped at step 3 (inside the batch-16 stage) and resumed, the run ends
    bit-exact (state, data state, every logged row); each session builds one
    step per stage it trains in, each compiled once; the logged batch,
    tokens and tokens/s follow the stage's batch."""
    from kjax.train import stage_steps
    from test_train import assert_stop_and_resume_is_bit_exact
    from kjax.pretrain.trainer import train
    built = []
    make = stage_steps.make_train_step

    def counted(config, *args):
        built.append(make(config, *args))
        built[-1].batch = config.train.batch_size
        return built[-1]
    monkeypatch.setattr(stage_steps, "make_train_step", counted)
    config = tiny_config(prepared, **RAMP)
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    train(config, straight, progress=False)
    assert [(f.batch, f.jitted._cache_size()) for f in built] == [(8, 1), (16, 1), (32, 1)]
    built.clear()
    rows = assert_stop_and_resume_is_bit_exact(config, straight, resumed)
    # the first session: steps 1-3 (stages 0, 1); the second: steps 4-6 (stages 1, 2)
    assert [(f.batch, f.jitted._cache_size()) for f in built] == \
        [(8, 1), (16, 1), (16, 1), (32, 1)]
    timed = {r["step"]: r for r in read_metrics(straight) if r["split"] == "train"}
    for step, batch in zip(range(1, 7), (8, 8, 16, 16, 32, 32)):
        row = rows[(step, "train")]
        assert row["batch_size"] == batch
        assert row["tokens"] == 64 * sum((8, 8, 16, 16, 32, 32)[:step])
        if step > 1:   # a window of one step: tokens/s × step time = its batch's tokens
            row = timed[step]
            assert row["tokens_per_sec"] * row["step_time"] == pytest.approx(batch * 64)


def test_kjax_compile_compiles_each_stage(tmp_path, capsys):
    """`kjax compile` reports the train step of every stage: its batch,
    microbatches and XLA's memory (the last stage is the train step itself)."""
    args = ["compile", "--config", DEMO_CONFIG, "--topology", "local", "--no-eval",
            "--no-roofline", *tiny_overrides(str(tmp_path), **RAMP)]
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    stages = report["stages"]
    assert [(s["stage"], s["steps"], s["batch_size"], s["microbatches"]) for s in stages] == \
        [(0, [1, 2], 8, 1), (1, [3, 4], 16, 1)]
    assert all(s["compile"]["fits"] and s["compile"]["peak"] > 0 for s in stages)
    assert report["batch_size"] == 32 and report["steps"]["train"]["fits"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "batch-ramp stages (train.batch_ramp; from step 5 on: batch 32" in text
    assert "| 1     | 3–4   | 16    | 1            |" in text


@pytest.mark.parametrize("extra, message", [
    ({"train.batch_ramp": ((2, 8, 1),)}, r"train.batch_ramp\[0\]=\(2, 8, 1\): give each stage "
                                         r"as \(until, batch\)"),
    ({"train.batch_ramp": ((2, 24),)}, r"train.batch_ramp\[0\]: batch 24 is more than one "
                                       r"microbatch of 16 .* a multiple of 16"),
    ({"train.batch_ramp": ((3, 8), (3, 16))}, r"train.batch_ramp\[1\]=\(3, 16\): the stages "
                                              r"before it already reach step 3"),
    ({"train.batch_ramp": ((400, 8), (500, 16)), "train.batch_ramp_unit": "tokens"},
     r"train.batch_ramp\[1\]=\(500, 16\): the stages before it already reach 512 tokens"),
    ({"train.batch_ramp": ((2, 8), (9, 16))}, r"train.batch_ramp ends at step 9, past "
                                              r"train.num_steps=6"),
    ({"train.packing": True}, r"train.batch_ramp with train.packing=True"),
])
def test_bad_ramps_are_one_line_before_compiling(tmp_path, extra, message):
    with pytest.raises(KjaxError, match=message):
        check_config(tiny_config(tmp_path, **{**RAMP, **extra}))


def test_a_stage_batch_the_mesh_cannot_split_is_one_line(tmp_path):
    """Batch 4 on 8 batch shards; batch 12 on 2 processes × 8 shards."""
    config = tiny_config(tmp_path, **{**RAMP, "train.batch_ramp": ((2, 4),)})
    with pytest.raises(KjaxError, match=r"train.batch_ramp\[0\]'s batch 4 is not divisible "
                                        r"by the 8 batch shards"):
        check_mesh(config, 8)
    config = tiny_config(tmp_path, **{**RAMP, "train.batch_ramp": ((2, 12),)})
    with pytest.raises(KjaxError, match=r"train.batch_ramp\[0\]'s batch 12 is not divisible "
                                        r"by the 8 batch shards"):
        check_mesh(config, 8, 2)


def test_a_resume_with_other_batches_is_refused_in_one_line(prepared, trained_run, tmp_path):
    """The run trained at batch 16 to step 6; a ramp changes what it computes."""
    import shutil
    from kjax.pretrain.trainer import train
    workdir = str(tmp_path / "run")
    shutil.copytree(trained_run, workdir)
    config = tiny_config(prepared, **{"train.batch_ramp": ((2, 8),),
                                      "train.batch_ramp_unit": "steps", "train.num_steps": 8})
    with pytest.raises(KjaxError, match=r"train.batch_ramp"):
        train(config, workdir, progress=False)


def test_every_stage_has_its_flash_tiles_fixed_before_the_run_builds_a_step(prepared,
                                                                           monkeypatch):
    """On a GPU the run fixes the tiles of every flash call its steps make
    (kjax/pretrain/run_config.py `run_tiles`); a call's signature holds its
    batch, so each stage's step is traced too: batch 8 on 8 devices is one row
    a device (b1), batch 16 and the final 32 in microbatches of 16 two (b2).
    Traced as for a GPU on this CPU host (nothing is lowered)."""
    from kjax.config.platform import lowering_for
    from kjax.model.flash import tuning as flash_tuning
    from kjax.model.flash.tiles import candidates
    from kjax.pretrain.run_config import run_tiles
    chosen = []

    def choose(call, measure):   # the card's cache or a timing, in place of a GPU
        chosen.append(call.signature)
        return candidates(call.seq, call.head_dim)[1]
    monkeypatch.setattr(flash_tuning, "_cached_or_timed", choose)
    from kjax.pretrain import aot   # its trace keeps the GPU's lowering, not these devices'
    monkeypatch.setattr(aot, "lowering_for", lambda platform, kind=None: contextlib.nullcontext())
    with lowering_for("gpu"):
        tiles = run_tiles(tiny_config(prepared, **RAMP, **{"model.attention_impl": "flash"}))
    assert sorted(tiles) == sorted(chosen) == ["s64_d8_b1_h4_float32_dropout",
                                               "s64_d8_b2_h4_float32_dropout"]
