"""tpu_configs/modern_2026.py: the 2026 recipe's three phases validate, with
the mask rates, source temperatures, batch ramp and decay branch its header
names."""
import os

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
