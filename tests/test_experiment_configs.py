"""The frozen experiment configs (experiments/configs) stay runnable and say
what they run: every SHAKE sanity variant's command line, in the config's
header and in experiments/shake_sanity.sh, gives a config that differs from
the baseline in exactly that variant's keys (kjax.config.presets.SHAKE_VARIANTS,
the keys tpu_configs/shake_*.py set)."""
import os
import re
import shlex

import pytest

from conftest import ROOT
from kjax.config import load_config
from kjax.config.presets import SHAKE_VARIANTS

CONFIG = os.path.join(ROOT, "experiments", "configs", "shake_sanity.py")
SCRIPT = os.path.join(ROOT, "experiments", "shake_sanity.sh")


def flat(tree, prefix=""):
    out = {}
    for key, value in tree.items():
        if hasattr(value, "items") and not isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def header_overrides() -> dict[str, list[str]]:
    """variant → the --config.* arguments of its `kjax train` line in the header."""
    header = open(CONFIG, encoding="utf-8").read().split('"""')[1].replace("\\\n", " ")
    return {m.group(1): re.findall(r"--config\.\S+", m.group(2))
            for m in re.finditer(r"kjax train --config \$C --workdir runs/shake_sanity/(\w+)(.*)",
                                 header)}


def script_overrides() -> dict[str, list[str]]:
    text = open(SCRIPT, encoding="utf-8").read()
    return {name: shlex.split(args) for name, args in re.findall(r'\[(\w+)\]="([^"]*)"', text)}


@pytest.mark.parametrize("source", [header_overrides, script_overrides], ids=lambda f: f.__name__)
def test_every_variant_differs_from_the_baseline_in_its_own_keys(source):
    overrides = source()
    assert sorted(overrides) == sorted(SHAKE_VARIANTS)
    baseline = flat(load_config(CONFIG, overrides["baseline"]))
    for variant, keys in SHAKE_VARIANTS.items():
        config = flat(load_config(CONFIG, overrides[variant]))
        changed = {k for k, v in config.items() if baseline[k] != v}
        assert changed <= set(keys), variant   # nothing else differs
        assert {k: config[k] for k in keys} == keys, variant


def test_the_sanity_config_shares_one_vocabulary_that_lines_up_with_morphemes():
    config = load_config(CONFIG)
    assert config.tokenizer.scheme == "morph-sp"   # POS B, shared positions, merging need it
    assert config.model.vocab_size == config.tokenizer.vocab_size
    assert config.train.nsp_weight == 0 and config.data.nsp_prob == 0   # SHAKE's RoBERTa recipe


def test_the_electra_comparison_runs_both_arms_at_equal_flops():
    """experiments/electra_vs_mlm.sh: its frozen config is the BERT arm, the
    script's ELECTRA keys make the other, and BERT's step count for equal FLOPs
    is the one docs/EXPERIMENTS.md reports (800 ELECTRA steps → 858)."""
    from kjax.objectives import check_config
    from kjax.train.step import flops_per_example
    path = os.path.join(ROOT, "experiments", "configs", "electra_vs_mlm.py")
    script = open(os.path.join(ROOT, "experiments", "electra_vs_mlm.sh"), encoding="utf-8").read()
    electra_keys = shlex.split(re.search(r'^ELECTRA="([^"]*)"', script, re.M).group(1))
    bert, electra = load_config(path), load_config(path, electra_keys)
    check_config(bert), check_config(electra)
    assert (bert.model.arch, bert.train.nsp_weight) == ("bert", 0.0)
    assert (electra.model.arch, electra.train.rtd_weight) == ("electra", 50.0)
    flops = {name: flops_per_example(c.model, c.data.max_seq_len, c.data.max_predictions_per_seq)
             for name, c in (("bert", bert), ("electra", electra))}
    assert round(800 * flops["electra"] / flops["bert"]) == 858
