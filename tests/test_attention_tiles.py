"""The flash kernels' tiles as values (kjax/model/flash/tuning.py): a traced
call's tiles are a function of the config (its fixed tiles, else the table)
and the call names itself in the trace; choosing better ones happens outside
any trace — timed within a budget with a fake clock and timer, kept in the
cache file, fixed by model.attention_tiles (what a resumed run's recorded
config holds) — and the config's old attention keys."""
import json

import jax
import numpy as np
import pytest
from ml_collections import ConfigDict

from kjax.config import load_config
from kjax.errors import KjaxError
from kjax.model.flash import tuning as flash_tuning
from kjax.model.flash.tiles import (CANDIDATES, TRITON_TILES, Tiles, candidates, format_tiles,
                                    kernel_tiles, parse_tiles)

CALL = flash_tuning.Call(32, 512, 12, 64, "bfloat16", dropout=0.1, shake="pairs")


class FakeClock:
    """Seconds advance only when a fake measurement says it compiled and ran."""
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def fake_measure(clock, seconds_each=3.0, fastest=None):
    """tiles → a time: `fastest` wins; each call costs the clock `seconds_each`."""
    seen = []

    def measure(tiles):
        seen.append(tiles)
        clock.now += seconds_each
        return 1.0 if tiles == fastest else 2.0 + len(seen)
    return measure, seen


@pytest.fixture(autouse=True)
def fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(flash_tuning, "cache_path",
                        lambda: str(tmp_path / "xla" / flash_tuning.CACHE_FILE))
    monkeypatch.setattr(flash_tuning, "device_kind", lambda: "NVIDIA H200")


def test_signature_names_shape_and_features():
    assert CALL.signature == "s512_d64_b32_h12_bfloat16_dropout_pairs"
    plain = flash_tuning.Call(2, 8192, 12, 64, "bfloat16", segments=True, local_window=64)
    assert plain.signature == "s8192_d64_b2_h12_bfloat16_segments_w64"


def test_the_cache_lies_beside_the_compilation_cache(tmp_path, monkeypatch):
    monkeypatch.undo()
    monkeypatch.setenv("KJAX_CACHE_DIR", str(tmp_path / "kjax"))
    before = jax.config.jax_compilation_cache_dir
    try:
        jax.config.update("jax_compilation_cache_dir", str(tmp_path / "xla"))
        assert flash_tuning.cache_path() == str(tmp_path / "xla" / flash_tuning.CACHE_FILE)
        jax.config.update("jax_compilation_cache_dir", None)
        assert flash_tuning.cache_path() == str(tmp_path / "kjax" / flash_tuning.CACHE_FILE)
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


def test_tiles_spec_round_trip_and_errors():
    for spec in ("128,64,8,2/128,32,4,5/128,32,4,5", "128,64,8,2/128,32,4,5/128,32,8,5,1"):
        assert format_tiles(parse_tiles(spec)) == spec
    assert parse_tiles("128,64,8,2/128,32,4,5/128,32,8,5,1")[2].transposed
    for bad in ("128,64,8,2/128,32,4,5", "a,b/c/d", "128,64,8,2/0,32,4,5/128,32,4,5",
                "128,64,8,2,1/128,32,4,5/128,32,4,5", "128,64,8,2/128,32,4,5/128,32,4,5,2"):
        with pytest.raises(ValueError, match="flash tiles"):
            parse_tiles(bad)


def test_candidates_start_with_the_table_and_fit_the_sequence():
    options = candidates(512)
    assert options[0] == TRITON_TILES[64] and len(options) == 1 + len(CANDIDATES[64])
    short = candidates(96)           # blocks shrink to divide 96; repeats collapse
    assert all(96 % t.outer == 0 and 96 % t.inner == 0 for c in short for t in c)
    assert len(set(short)) == len(short)


def test_fastest_within_the_budget_with_a_fake_timer():
    clock = FakeClock()
    options = candidates(512)
    measure, seen = fake_measure(clock, seconds_each=3.0, fastest=options[2])
    best, timings = flash_tuning.fastest(options, measure, clock=clock, budget_s=7.0)
    assert best == options[2] and seen == options[:3]   # 3 s each: a 4th would start at 9 s
    assert [t for t, _ in timings] == options[:3]
    # a tiling that fails to compile is skipped; all failing: None
    def broken(tiles):
        raise RuntimeError("Triton refused")
    assert flash_tuning.fastest(options, broken, clock=clock) == (None, [])


def test_first_choice_times_then_the_cache_keeps_it(tmp_path):
    clock = FakeClock()
    options = candidates(512)
    measure, seen = fake_measure(clock, fastest=options[1])
    tiles = flash_tuning.choose(CALL, measure=measure)
    assert tiles == options[1] and seen
    cache = json.loads((tmp_path / "xla" / flash_tuning.CACHE_FILE).read_text())
    assert cache == {"NVIDIA H200": {CALL.signature: format_tiles(options[1])}}
    never_called = lambda tiles: pytest.fail("timed again")  # noqa: E731
    assert flash_tuning.choose(CALL, measure=never_called) == options[1]   # the cache file
    assert flash_tuning.choose_tiles([CALL], measure=lambda call: never_called) == {
        CALL.signature: format_tiles(options[1])}


def test_the_config_fixes_the_tiles_without_timing():
    """A signature's entry (a recorded run's), then '*', then 'table'."""
    no_timing = lambda tiles: pytest.fail("a fixed signature was timed")  # noqa: E731
    spec = "64,64,4,3/64,64,4,3/64,64,4,3"
    got = flash_tuning.choose(CALL, fixed=((CALL.signature, spec),), measure=no_timing)
    assert got == parse_tiles(spec)
    assert flash_tuning.choose_tiles([CALL], fixed=((CALL.signature, spec),)) == {
        CALL.signature: spec}
    star = "128,64,8,2/128,32,4,5/128,32,4,5"
    got = flash_tuning.choose(CALL, fixed=(("*", star), ("other", spec)), measure=no_timing)
    assert got == parse_tiles(star)
    got = flash_tuning.choose(CALL, fixed=(("*", "table"),), measure=no_timing)
    assert got == kernel_tiles(512, True)
    # blocks larger than the sequence shrink to divide it
    short = flash_tuning.Call(4, 96, 12, 64, "bfloat16")
    assert flash_tuning.choose(short, fixed=(("*", star),))[1] == Tiles(32, 32, 4, 5)


def test_a_traced_call_takes_the_configs_tiles_else_the_table(monkeypatch):
    """While a step is traced nothing is timed or cached: the config's tiles, else
    the table, whatever the card's cache holds."""
    monkeypatch.setattr(flash_tuning, "_cached_or_timed",
                        lambda *a: pytest.fail("chosen inside a trace"))
    spec = "64,64,4,3/64,64,4,3/64,64,4,3"
    assert flash_tuning.traced_tiles(CALL) == kernel_tiles(512, True)
    assert flash_tuning.traced_tiles(CALL, ((CALL.signature, spec),)) == parse_tiles(spec)
    assert flash_tuning.traced_tiles(CALL, (("*", "table"),)) == kernel_tiles(512, True)


def test_a_traced_call_reads_the_cards_cache_and_never_writes_it(tmp_path, monkeypatch):
    """On a GPU of its own, a traced call whose signature the config leaves open
    takes what an earlier choice cached for this card (a verb that chooses none,
    e.g. kjax eval after kjax train), else the table; it times nothing and
    writes nothing."""
    monkeypatch.setattr(flash_tuning, "can_time", lambda: True)
    monkeypatch.setattr(flash_tuning, "_on_device", lambda *a: pytest.fail("timed in a trace"))
    assert flash_tuning.traced_tiles(CALL) == kernel_tiles(512, True)
    assert not (tmp_path / "xla" / flash_tuning.CACHE_FILE).exists()
    spec = "64,64,4,3/64,64,4,3/64,64,4,3"
    (tmp_path / "xla").mkdir()
    (tmp_path / "xla" / flash_tuning.CACHE_FILE).write_text(
        json.dumps({"NVIDIA H200": {CALL.signature: spec}}))
    assert flash_tuning.traced_tiles(CALL) == parse_tiles(spec)


def test_without_a_gpu_of_its_own_the_table_and_no_cache(tmp_path):
    """CPU here (and a deviceless compile, TPU, several processes): no timing."""
    assert not flash_tuning.can_time()
    assert flash_tuning.choose(CALL) == kernel_tiles(512, True)
    assert not (tmp_path / "xla" / flash_tuning.CACHE_FILE).exists()
    assert flash_tuning.choose_tiles([CALL]) == {
        CALL.signature: format_tiles(kernel_tiles(512, True))}


def test_a_trace_lists_the_calls_it_makes_in_its_jaxpr():
    """A call names itself in a named scope: read back from the jaxpr of a step
    (under a mesh, scanned, rematerialised, differentiated) with every field,
    and absent from the lowered program's text that the compile record hashes."""
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P
    from kjax.model import flash
    calls = [CALL, flash_tuning.Call(2, 8192, 12, 64, "bfloat16", segments=True,
                                     local_window=64)]
    assert [flash_tuning.Call.from_scope(c.scope[len("kjax_flash["):-1]) for c in calls] == calls
    mesh = jax.make_mesh((8,), ("data",))

    def layer(x, call):
        def local(x):
            with jax.named_scope(call.scope):
                return jnp.sin(x)
        return jax.shard_map(local, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)

    def loss(x):
        def body(c, _):
            return layer(layer(c, calls[0]), calls[1]), None
        return jax.lax.scan(jax.checkpoint(body), x, None, length=2)[0].sum()
    with jax.set_mesh(mesh):
        x = jax.ShapeDtypeStruct((16,), jnp.float32, sharding=NamedSharding(mesh, P("data")))
        traced = jax.jit(jax.grad(loss)).trace(x)
        assert flash.flash_calls(traced.jaxpr) == calls
        assert "kjax_flash" not in traced.lower().as_text(debug_info=False)


def test_resume_keeps_the_recorded_tiles():
    """keep_recorded_tiles copies what the run recorded into a config that leaves
    the signature open; a config that fixes '*' or the signature wins."""
    from kjax.pretrain.run_config import keep_recorded_tiles
    recorded = ConfigDict({"attention_tiles": {CALL.signature: "64,64,4,3/64,64,4,3/64,64,4,3"}})
    mine = ConfigDict({"attention_tiles": {}})
    assert keep_recorded_tiles(mine, recorded) == [CALL.signature]
    assert dict(mine.attention_tiles) == dict(recorded.attention_tiles)
    fixed = ConfigDict({"attention_tiles": {"*": "table"}})
    assert keep_recorded_tiles(fixed, recorded) == [] and "*" in fixed.attention_tiles
    assert keep_recorded_tiles(mine, None) == []


def test_timing_runs_outside_any_trace():
    """The real measurement (interpret mode here: the plumbing, not a speed),
    called as `choose` calls it, after a step's trace has closed: every tiling
    timed is one of the candidates, in order, and the fastest is chosen."""
    call = flash_tuning.Call(1, 16, 1, 8, "float32", dropout=0.2, shake="pairs")
    measure = flash_tuning._on_device(call, reps=1, interpret=True)
    timed = []

    def recording(tiles):
        timed.append((tiles, measure(tiles)))
        return timed[-1][1]
    picked = flash_tuning.choose(call, measure=recording)
    assert timed and all(np.isfinite(t) and t > 0 for _, t in timed)
    assert [t for t, _ in timed] == candidates(16, 8)[:len(timed)]
    assert picked == min(timed, key=lambda x: x[1])[0]


@pytest.mark.parametrize("key,old,other,message", [
    ("attention_auto_flash", False, True, "model.attention_impl is the one choice"),
    ("attention_logits", "compute", "float32", "model.dtype='float32' for fp32 logits"),
])
def test_retired_attention_keys(tmp_path, key, old, other, message):
    """A config recorded by an older run (every key, `c.model.update({...})`)
    holds the key: at its old default it loads (dropped), another value is
    refused in one line that names the file's line and the replacement."""
    path = tmp_path / "kjax_config.py"
    for value in (old, other):
        path.write_text(f"from kjax.config import defaults\n\n\ndef get_config():\n"
                        f"    c = defaults()\n    c.model.update({{'num_layers': 2, {key!r}: "
                        f"{value!r}}})\n    return c\n")
        if value == old:
            config = load_config(str(path))
            assert key not in config.model and config.model.num_layers == 2
            continue
        with pytest.raises(KjaxError, match=message) as e:
            load_config(str(path))
        assert "\n" not in str(e.value) and f"kjax_config.py:6: config key 'model.{key}'" in str(
            e.value)


def test_attention_tiles_config_errors_are_one_line(tmp_path):
    from conftest import DEMO_CONFIG
    with pytest.raises(KjaxError, match=r"model.attention_tiles\['\*'\] = '128,64'") as e:
        load_config(DEMO_CONFIG, ["--config.model.attention_tiles={'*': '128,64'}"])
    assert "\n" not in str(e.value) and "F/DQ/DKV" in str(e.value)
    config = load_config(DEMO_CONFIG, ["--config.model.attention_tiles={'*': 'table'}"])
    assert dict(config.model.attention_tiles) == {"*": "table"}
    spec = "128,64,8,2/128,32,4,5/128,32,8,5,1"
    config = load_config(DEMO_CONFIG, [f"--config.model.attention_tiles={{'*': '{spec}'}}"])
    assert dict(config.model.attention_tiles) == {"*": spec}


def test_a_resumed_run_takes_the_tiles_its_workdir_recorded(tmp_path):
    """kjax train resolves the config against WORKDIR/kjax_config.py: the tiles
    recorded there fix the signatures a --config leaves open."""
    from conftest import DEMO_CONFIG
    from kjax.config.recorded import record_config
    from kjax.pretrain.run_config import resolve_run
    spec = "64,64,4,3/64,64,4,3/64,64,4,3"
    first = load_config(DEMO_CONFIG)
    first.model.attention_tiles[CALL.signature] = spec
    record_config(first, str(tmp_path))
    again = load_config(DEMO_CONFIG)
    assert dict(again.model.attention_tiles) == {}
    run = resolve_run(again, str(tmp_path))
    assert dict(run.model.attention_tiles) == {CALL.signature: spec}
    assert flash_tuning.traced_tiles(CALL, tuple(run.model.attention_tiles.items())) == \
        parse_tiles(spec)
