"""The architecture registry (kjax/model/arch): every architecture keeps the
contract of kjax/model/arch/base.py — what its model's parameters hold
matches what it says (biases, the NSP and RTD heads, its scanned loops and
their depths), its auto keys act and only they are resolved, its FLOPs grow
with what they count, its export format has a writer — and
docs/ARCHITECTURE.md's worked example of a new one passes the same contract
and trains from the CLI."""
from __future__ import annotations

import os
import re

import flax.linen as nn
import jax
import numpy as np
import pytest
from flax import traverse_util

from conftest import DEMO_CONFIG, ROOT, tiny_config, tiny_overrides
from kjax.config.platform_defaults import AUTO, value
from kjax.errors import KjaxError
from kjax.model.arch import ARCHITECTURES, architecture
from kjax.model.config import EncoderConfig
from kjax.objectives import check_config
from kjax.pretrain.aot import with_overrides

# What each architecture needs beside the tiny config (ELECTRA: a generator of
# another depth than the discriminator, so its two loops differ).
EXTRA = {"modern": {"train.nsp_weight": 0.0},
         "electra": {"train.nsp_weight": 0.0, "model.embedding_size": 24,
                     "model.generator_hidden_size": 16, "model.generator_num_heads": 2,
                     "model.generator_intermediate_size": 32, "model.num_layers": 3,
                     "model.generator_num_layers": 2}}


def arch_config(tmp, name: str, **extra):
    return tiny_config(tmp, **{"model.arch": name, **EXTRA.get(name, {}), **extra})


def param_shapes(config) -> dict[str, tuple]:
    """"a/b/c" → shape of every parameter of the config's pretraining model
    (traced, nothing initialised)."""
    from kjax.train.state import dummy_inputs, make_model
    model = make_model(config, deterministic=True)
    args, kwargs = dummy_inputs(config, batch_size=2)
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), *args, **kwargs))["params"]
    flat = traverse_util.flatten_dict(nn.meta.unbox(shapes))
    return {"/".join(k): tuple(v.shape) for k, v in flat.items()}


def scanned_depths(shapes: dict) -> list[int]:
    """The depth of every nn.scan loop in a parameter tree (its `layers` subtree's
    leading axis), one per loop."""
    loops = {}
    for path, shape in shapes.items():
        if "/layers/" in f"/{path}":
            loops[path[:path.index("layers/")]] = shape[0]
    return sorted(loops.values())


def assert_keeps_the_contract(config) -> None:
    arch = architecture(config)
    check_config(config)
    assert set(arch.auto_keys) <= set(AUTO)
    for key, auto in AUTO.items():   # tiny_config resolved the arch's keys, and only those
        assert (value(config, key) != auto) == (key in arch.auto_keys), key
    shapes = param_shapes(config)
    assert any(p.endswith("/bias") for p in shapes) == arch.use_bias   # (not mlm_bias)
    assert any(p.startswith("nsp/") for p in shapes) == arch.has_nsp_head
    assert any(p.startswith("discriminator_predictions/") for p in shapes) == arch.has_rtd_head
    loops = arch.scanned_loops(config.model)
    assert sorted(depth for _, depth in loops) == scanned_depths(shapes)
    m, d = config.model, config.data
    flops = arch.flops_per_example(m, d.max_seq_len, d.max_predictions_per_seq)
    assert flops > 0
    assert arch.flops_per_example(m, d.max_seq_len + 8, d.max_predictions_per_seq) > flops
    for key, depth in loops:   # each loop's key sets its depth: a layer more costs more
        deeper = with_overrides(config, **{key: depth + 1})
        assert scanned_depths(param_shapes(deeper)).count(depth + 1) >= 1, key
        assert arch.flops_per_example(deeper.model, d.max_seq_len,
                                      d.max_predictions_per_seq) > flops, key
    assert arch.scanned_loops(with_overrides(config, **{"model.scan_layers": False}).model) == ()
    from kjax.export.formats import FORMATS
    assert arch.export_format is None or arch.export_format in FORMATS
    enc = EncoderConfig.from_config(config.model, config.knowledge)
    assert arch.build(enc).config.use_bias == arch.encoder_config(enc).use_bias == arch.use_bias


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_every_architecture_keeps_its_contract(tmp_path, name):
    assert architecture(name).name == name
    assert_keeps_the_contract(arch_config(tmp_path, name))


def test_an_unknown_architecture_is_refused_in_one_line(tmp_path):
    config = arch_config(tmp_path, "bert")
    config.model.arch = "albert"
    with pytest.raises(KjaxError, match=r"^model.arch='albert'; choose one of bert, modern, "
                                        r"electra$"):
        check_config(config)


def worked_example() -> str:
    """The python block of docs/ARCHITECTURE.md's "Adding an architecture"."""
    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
        page = f.read()
    section = page[page.index("## Adding an architecture"):]
    section = section[:section.index("\n## ", 4)]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_the_worked_example_of_a_new_architecture_runs(prepared, tmp_path, monkeypatch, capsys):
    """The page's module defines `bert_nobias` and the registry lists it: it keeps
    the contract (no bias anywhere, BERT's heads and loop), `kjax train` trains
    it and `kjax export` refuses it in one line."""
    from kjax.cli import main
    block = worked_example()
    assert "ARCHITECTURES" not in block   # its module imports no registry: the registry lists it
    module = {"__name__": "kjax.model.arch.bert_nobias"}
    exec(compile(block, "ARCHITECTURE.md", "exec"), module)
    monkeypatch.setitem(ARCHITECTURES, "bert_nobias", module["ARCH"])   # the doc's one line
    assert_keeps_the_contract(arch_config(prepared, "bert_nobias"))
    workdir = str(tmp_path / "run")
    overrides = tiny_overrides(str(prepared), **{"model.arch": "bert_nobias",
                                                 "train.num_steps": 2})
    assert main(["train", "--config", DEMO_CONFIG, *overrides, "--workdir", workdir]) == 0
    from kjax.checkpoint.restore import restore_params
    params, step = restore_params(arch_config(prepared, "bert_nobias"), workdir)
    leaves = traverse_util.flatten_dict(params)
    assert step == 2 and not any(k[-1] == "bias" for k in leaves)
    assert all(np.isfinite(np.asarray(v)).all() for v in leaves.values())
    capsys.readouterr()
    assert main(["export", "--workdir", workdir, "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kjax: error: model.arch='bert_nobias': transformers has no class")
    assert len(err.splitlines()) == 1
