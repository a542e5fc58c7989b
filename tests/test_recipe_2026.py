"""tpu_configs/modern_2026.py: the 2026 recipe's three phases validate, with
the mask rates, source temperatures, batch ramp and decay branch its header
names."""
import json
import os

import pytest
from conftest import DEMO_CONFIG


def test_the_2026_recipes_phases_validate_with_their_rates():
    from kjax.config import load_config
    from kjax.pretrain.phases import phase_configs
    config = load_config(os.path.join(os.path.dirname(DEMO_CONFIG), "modern_2026.py"))
    phases = dict(phase_configs(config))
    assert list(phases) == ["stable1024", "extend8192", "decay8192"]
    stable, extend, decay = phases.values()
    assert [c.data.masked_lm_prob for c in phases.values()] == [0.3, 0.15, 0.05]
    assert [c.data.source_temperature for c in phases.values()] == [0.7, 0.5, 0.3]
    assert sorted(stable.data.sources) == ["news", "web", "wiki"]
    assert decay.data.sources["wiki"]["dir"].endswith("wiki_8192")
    assert len(stable.train.batch_ramp) == 2 and extend.train.batch_ramp == ()
    assert (decay.init.mode, decay.train.schedule, decay.train.decay_shape) == \
        ("continue", "wsd", "sqrt")
    assert all(c.train.ema_decay == 0.9999 for c in phases.values())
    assert extend.train.batch_size * 8192 == stable.train.batch_size * 1024


def test_demo_recipes_config_is_the_recipe_at_demo_size():
    """`kjax demo --recipe`'s overrides load on tpu_configs/demo.py and each
    phase validates: two sources, the mask and temperature anneal, a ramp in
    the first phase, the decay branch continuing the extension."""
    from kjax.cli.demo import recipe_overrides
    from kjax.config import load_config
    from kjax.pretrain.phases import phase_configs
    phases = dict(phase_configs(load_config(DEMO_CONFIG, recipe_overrides())))
    assert list(phases) == ["stable", "extend", "decay"]
    assert [c.data.masked_lm_prob for c in phases.values()] == [0.3, 0.15, 0.05]
    assert [c.data.source_temperature for c in phases.values()] == [0.7, 0.5, 0.3]
    assert [c.data.sources["konlpy"]["weight"] for c in phases.values()] == [0.7, 0.5, 0.3]
    assert phases["stable"].train.batch_ramp == ((10, 8),)
    assert (phases["decay"].init.mode, phases["decay"].train.decay_shape) == ("continue", "sqrt")
    assert phases["decay"].train.num_steps - phases["extend"].train.num_steps == \
        phases["decay"].train.decay_steps
    assert phases["stable"].model.arch == "modern" and phases["stable"].train.ema_decay > 0


def test_demo_recipe_refuses_another_demos_flags(capsys):
    from kjax.cli import main
    assert main(["demo", "--recipe", "--arch", "modern"]) == 2
    assert "demo --recipe is the modern recipe" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_recipe_runs_its_phases_and_logs_sources_and_mask_share(tmp_path, monkeypatch,
                                                                    capsys):
    """The demo-size recipe end to end (fewer steps): each phase logs examples
    by source and the realised mask share near its rate; the decay branch
    names the extension as its parent."""
    from kjax.cli import main
    from kjax.train.logdir import read_run_metrics
    monkeypatch.chdir(tmp_path)
    shorter = ["--config.train.eval_every=5", "--config.train.checkpoint_every=5"]
    assert main(["demo", "--recipe", *shorter]) == 0
    out = capsys.readouterr().out
    assert "decay branch of" in out and "examples by source: konlpy" in out
    for phase, rate in (("stable", 0.3), ("extend", 0.15), ("decay", 0.05)):
        row = [r for r in read_run_metrics(str(tmp_path / "runs/demo_recipe/phases" / phase))
               if r["split"] == "train"][-1]
        assert abs(row["masked_share"] - rate) < 0.05 and row["mask_rate"] == rate
        assert row["source/konlpy/examples"] > 0 and row["source/chatterbot/examples"] > 0
    lineage = json.load(open(tmp_path / "runs/demo_recipe/phases/decay/lineage.json"))
    assert lineage["parent"].endswith("phases/extend")
