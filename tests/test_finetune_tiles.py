"""`kjax finetune` fixes the tiles of its flash calls before it builds a step
(kjax/finetune/trainer.py `fix_flash_tiles`), as `kjax train` does: its train
and eval steps, for every bf it will use, traced against abstract state and
batches; the calls read from the traces; the tiles chosen once the traces have
closed (kjax/model/attention_core.py `tiles_for_steps`) and held in the
tuner's config, which every step is built from. Traced as for a GPU on this
CPU host (the trace only: nothing is lowered); on the CPU nothing is traced."""
import json

import jax
import jax.numpy as jnp
import pytest

from conftest import tiny_config
from kjax.config.platform import lowering_for
from kjax.finetune.experiment import finetune_settings, make_tuner
from kjax.finetune.trainer import FineTuner
from kjax.model import attention_core
from kjax.model.flash import flash_calls, tuning as flash_tuning
from kjax.model.flash.tiles import candidates, format_tiles, kernel_tiles

# --sweep: fine-tune at bf 0 (attention dropout only) and 0.3 (dropout and B),
# infer at bf 0 (no feature: no flash call under auto) and 0.3 (B only)
BF = (0.0, 0.3)
FT = ["finetune.max_seq_len=32", "finetune.batch_size=16", "finetune.epochs=1",
      "finetune.shake.variant=random", "finetune.shake.p=0.5",
      f"finetune.shake.sweep_train={BF}", f"finetune.shake.sweep_infer={BF}"]
WORDS = ["국민", "정부", "그리고", "법", "조", "항", "있다", "서울"]


def _write(path, n, offset):
    rows = [{"text": " ".join(WORDS[(i + j) % len(WORDS)] for j in range(6)), "label": "ab"[i % 2]}
            for i in range(offset, offset + n)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                    encoding="utf-8")
    return str(path)


def _tuner(prepared, tmp_path, **model):
    config = tiny_config(prepared, **model)
    files = _write(tmp_path / "train.jsonl", 32, 0), _write(tmp_path / "dev.jsonl", 16, 5)
    return config, make_tuner(config, finetune_settings(FT), "classify", *files, init="none",
                              sweep=True)


def _step_jaxprs(tuner):
    """The built steps as run_one and predict call them, traced (not lowered)."""
    state = tuner.abstract_state()
    with tuner._context():
        return ([tuner.train_step(bf).trace(state, tuner._abstract(tuner.train_batch(0, 1, bf)))
                 .jaxpr for bf in BF] +
                [tuner.eval_step(bf).trace(state["params"],
                                           tuner._abstract(tuner.predict_batch("dev", 0, bf)[0]))
                 .jaxpr for bf in BF])


def test_finetune_fixes_every_flash_calls_tiles_before_building_its_steps(prepared, tmp_path,
                                                                          monkeypatch):
    chosen = []

    def choose(call, measure):   # the card's cache or a timing, in place of a GPU
        chosen.append((call.signature, isinstance(jnp.ones(1) + 1, jax.core.Tracer)))
        return candidates(call.seq, call.head_dim)[1]   # not the table's
    monkeypatch.setattr(flash_tuning, "_cached_or_timed", choose)
    with lowering_for("gpu"):   # auto: dropout and B reach the kernel
        config, tuner = _tuner(prepared, tmp_path)
        # chosen once each, on this thread with the traces closed (a jax operation
        # gives a value, not a tracer)
        assert chosen and not any(traced for _, traced in chosen)
        signatures = [s for s, _ in chosen]
        assert sorted(set(signatures)) == sorted(signatures) == sorted(tuner.flash_tiles)
        # a device's 2 rows of 4 heads of 8; the random variant's B is dense
        assert sorted(signatures) == [
            "s32_d8_b2_h4_float32_dense",            # infer at bf 0.3 (at bf 0: no call)
            "s32_d8_b2_h4_float32_dropout",          # fine-tune at bf 0
            "s32_d8_b2_h4_float32_dropout_dense"]    # fine-tune at bf 0.3
        wanted = format_tiles(candidates(32, 8)[1])
        assert wanted != format_tiles(kernel_tiles(32, True, head_dim=8))
        assert tuner.flash_tiles == dict.fromkeys(signatures, wanted)
        assert dict(tuner.config.model.attention_tiles) == tuner.flash_tiles
        assert dict(config.model.attention_tiles) == {}   # the caller's config is as it was
        # The built steps make exactly these calls, each with its chosen tiles
        # from the config: nothing is chosen any more, not even the card's cache.
        monkeypatch.setattr(flash_tuning, "_cached_or_timed",
                            lambda *a: pytest.fail("a tile chosen after the steps were built"))
        monkeypatch.setattr(flash_tuning, "_cached", lambda *a: pytest.fail("the cache read"))
        monkeypatch.setattr(flash_tuning, "can_time", lambda: True)   # a GPU of its own
        ran, traced_tiles = [], flash_tuning.traced_tiles

        def recording(call, fixed=()):
            ran.append((call.signature, format_tiles(traced_tiles(call, fixed))))
            return traced_tiles(call, fixed)
        monkeypatch.setattr(flash_tuning, "traced_tiles", recording)
        jaxprs = _step_jaxprs(tuner)
    assert {c.signature for j in jaxprs for c in flash_calls(j)} == set(tuner.flash_tiles)
    assert dict(ran) == tuner.flash_tiles


def test_finetune_on_the_cpu_traces_nothing(prepared, tmp_path, monkeypatch):
    """On this CPU (and on a GPU under xla, whose calls never reach the kernel)
    the tuner neither traces its steps nor chooses a tile, and keeps its config."""
    monkeypatch.setattr(FineTuner, "_traced_steps", lambda *a: pytest.fail("traced"))
    monkeypatch.setattr(attention_core, "choose_flash_tiles", lambda *a: pytest.fail("chosen"))
    config, tuner = _tuner(prepared, tmp_path, **{"model.attention_impl": "flash"})
    assert tuner.flash_tiles == {} and tuner.config is config
    with lowering_for("gpu"):
        config, tuner = _tuner(prepared, tmp_path, **{"model.attention_impl": "xla"})
    assert tuner.flash_tiles == {} and tuner.config is config
