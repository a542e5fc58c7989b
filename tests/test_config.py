"""The one config tree (kjax/config): the schema, files and overrides through
ml_collections' config_flags, the recorded config, retired keys, logical
rules from the config, and the registries' cross-section checks. The bad
configs of the command line (exit 2, one line, before compiling) are in
test_faults.py."""
import os
import re

import pytest

from conftest import DEMO_CONFIG, ROOT, tiny_config
from kjax.config import SCHEMA, apply_override, defaults, leaves, load_config, validate
from kjax.config.recorded import config_differences, write_config_file
from kjax.errors import KjaxError
from kjax.objectives import check_config


def test_every_key_has_a_meaning_and_its_default_passes_its_own_check():
    keys = leaves()
    assert len(keys) > 100 and "finetune.shake.bf_infer" in keys and "mesh.rules" in keys
    for key, node in keys.items():
        assert node.meaning and "\n" not in node.meaning, key
        assert node.fits(node.default), key
        assert node.kind in (tuple, dict) or node.accepts(node.default), key
    validate(defaults())


def test_no_dead_keys():
    """Every key is read somewhere in kjax outside the schema (attribute or item)."""
    source = ""
    for folder, _, files in os.walk(os.path.join(ROOT, "kjax")):
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith(".py") and not path.endswith(os.path.join("config", "schema.py")):
                source += open(path, encoding="utf-8").read()
    unread = [key for key in leaves() if not re.search(
        rf"""(\.{key.split('.')[-1]}\b|["']{key.split('.')[-1]}["']|\{{k\}}_weight)""", source)]
    assert not unread, unread


def test_overrides_parse_with_each_keys_type():
    c = defaults()
    apply_override(c, "--config.finetune.split=(0.5,0.5)")
    apply_override(c, "--config.shake.tag_weights={'JKB': 0.5}")
    apply_override(c, "--config.mesh.fsdp=-1")
    apply_override(c, "--config.mesh.data=2")
    assert c.finetune.split == (0.5, 0.5) and dict(c.shake.tag_weights) == {"JKB": 0.5}
    with pytest.raises(KjaxError, match=r"config key 'model.scan_layers': cannot set 'ture'"):
        apply_override(c, "--config.model.scan_layers=ture")
    with pytest.raises(KjaxError, match="must look like --config.key=value"):
        apply_override(c, "model.scan_layers=true")


def test_a_file_may_set_only_what_it_changes(tmp_path):
    partial = tmp_path / "partial.py"
    partial.write_text("def get_config():\n    return {'name': 'p', 'model': {'hidden_size': 64,"
                       " 'num_heads': 4}, 'train': {'learning_rate': 1}}\n", encoding="utf-8")
    c = load_config(str(partial), ["--config.model.num_layers=3"])
    assert (c.name, c.model.hidden_size, c.model.num_layers) == ("p", 64, 3)
    assert isinstance(c.train.learning_rate, float) and c.train.learning_rate == 1.0
    assert c.data.max_seq_len == SCHEMA["data"]["max_seq_len"].default   # the rest: defaults
    with pytest.raises(AttributeError, match='Did you mean "hidden_size"'):
        c.model.hiden_size = 3   # the loaded tree is locked: a typo is an error


def test_recorded_config_round_trips_and_names_differences(tmp_path):
    config = tiny_config(tmp_path, **{"shake.tag_weights": "{'JKB': 0.5}",
                                      "finetune.shake.sweep_infer": "(0.0,0.5)"})
    path = str(tmp_path / "kjax_config.py")
    write_config_file(config, path, "test")
    assert "c = defaults()" in open(path, encoding="utf-8").read()
    back = load_config(path)
    assert back.to_dict() == config.to_dict() and not config_differences(config, back)
    apply_override(back, "--config.train.num_steps=7")
    assert config_differences(config, back) == ["train.num_steps: 6 → 7"]


def test_retired_keys(tmp_path):
    """An old recorded config holding a removed key's old default still loads;
    setting it names what replaced it."""
    old = tmp_path / "old.py"
    old.write_text("def get_config():\n    return {'shake': {'position_variant': 'none'},\n"
                   "            'data': {'examples_per_shard': 20000}}\n", encoding="utf-8")
    assert load_config(str(old)).model.input_mode == "onehot"
    old.write_text("def get_config():\n    return {'shake': {\n"
                   "        'position_variant': 'shared_position'}}\n", encoding="utf-8")
    with pytest.raises(KjaxError, match=r"old\.py:3: config key 'shake.position_variant' was "
                                        r"removed: .*model.input_mode='shared_position'"):
        load_config(str(old))
    with pytest.raises(KjaxError, match="model.input_mode='shared_position'"):
        load_config(DEMO_CONFIG, ["--config.shake.position_variant=shared_position"])


def test_logical_rules_come_from_the_config(tmp_path):
    """MaxText style: the mesh.rules of the config place the parameters."""
    from kjax.parallel.mesh import make_mesh
    from kjax.train.state import make_model, make_optimizer, state_shardings
    config = tiny_config(tmp_path, **{"mesh.data": 2, "mesh.fsdp": 4})
    mesh = make_mesh(config)
    sharded = state_shardings(config, mesh, make_model(config, False),
                              make_optimizer(config.train))
    kernel = sharded["params"]["encoder"]["layers"]["mlp_in"]["kernel"].spec
    assert "fsdp" in tuple(kernel)
    rules = tuple(r if r[0] != "embed" else ("embed", None) for r in config.mesh.rules)
    apply_override(config, f"--config.mesh.rules={rules!r}")
    replicated = state_shardings(config, mesh, make_model(config, False),
                                 make_optimizer(config.train))
    assert "fsdp" not in tuple(replicated["params"]["encoder"]["layers"]["mlp_in"]["kernel"].spec)
    apply_override(config, "--config.mesh.rules=(('batch', 'data'),)")
    with pytest.raises(KjaxError, match="must map 'batch' to"):
        validate(config)


@pytest.mark.parametrize("overrides, message", [
    ({"model.input_mode": "eojeol"}, r"model.input_mode='eojeol'; choose one of onehot, "
                                     r"shared_position, multihot, merged"),
    ({"model.input_mode": "multihot", "train.mlm_loss": "eq9"},
     r"model.input_mode='multihot' needs tokenizer.scheme 'multihot', not 'sentencepiece'"),
    ({"train.mlm_loss": "softmax"}, r"train.mlm_loss='softmax'; choose one of ce, eq9"),
    ({"knowledge.verb_weight": 1.0}, r"knowledge.verb_weight=1.0 needs morpheme positions, "
                                     r"which model.input_mode='onehot' does not have"),
    ({"model.input_mode": "shared_position"}, r"'shared_position' needs tokenizer.scheme "
                                              r"'morph-sp' or 'multihot'"),
    ({"shake.boost_prem": 0.3, "tokenizer.scheme": "morph-sp"}, r"0\.3.*float8"),
])
def test_cross_section_checks_ask_the_registries(tmp_path, overrides, message):
    config = tiny_config(tmp_path, **overrides)    # loads: each section on its own is fine
    with pytest.raises(KjaxError, match=message) as error:
        check_config(config)
    assert "\n" not in str(error.value)


def test_a_config_file_rewritten_within_the_second_loads_its_new_values(tmp_path, monkeypatch):
    """Where Python writes bytecode (its default), a .pyc is trusted while the
    source's size and whole-second mtime match: a config file is read without
    one, so the rewrite is seen and no __pycache__ is left beside it."""
    import sys
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    path = tmp_path / "kjax_config.py"
    for layers in (2, 3):   # same size, same second
        path.write_text("from kjax.config import defaults\n\n\ndef get_config():\n"
                        f"    c = defaults()\n    c.model.num_layers = {layers}\n    return c\n")
        os.utime(path, (1_700_000_000, 1_700_000_000))
        assert load_config(str(path)).model.num_layers == layers
    assert os.listdir(tmp_path) == ["kjax_config.py"] and sys.dont_write_bytecode is False


def test_the_model_takes_the_schemas_defaults():
    """One source per default: EncoderConfig's fields default to the schema's
    model.* keys, except the three it holds in a resolved form."""
    import dataclasses
    from kjax.config.schema import MODEL
    from kjax.model.config import EncoderConfig
    resolved = {"scan_unroll": (1, -1), "attention_tiles": ((), {}), "shake_factor": ((), 0.0)}
    for field in dataclasses.fields(EncoderConfig):
        if field.name in resolved:
            assert (field.default, MODEL[field.name].default) == resolved[field.name]
        elif field.name in MODEL:
            assert field.default == MODEL[field.name].default, field.name
    built = EncoderConfig.from_config(defaults().model)   # auto passes through, unbuildable
    assert built.scan_unroll == -1
    assert dataclasses.replace(built, shake_factor=(), scan_unroll=1) == EncoderConfig()
    assert built.shake_factor == (0.0,) * built.num_layers


def test_one_override_function_types_every_kind_of_override(tmp_path):
    """kjax.config.apply_overrides takes the command line's strings and a
    phase's or the compile checks' {key: value}, each typed by its key: an int
    becomes a float, a list a tuple; a wrong type, an unknown or retired key is
    one line (a phase's named by `where`). aot.with_overrides is it on a copy."""
    from kjax.config import apply_overrides
    from kjax.errors import KjaxError
    from kjax.pretrain.aot import with_overrides
    c = defaults()
    apply_overrides(c, {"train.learning_rate": 3, "mesh.rules": [("batch", "data")],
                        "data.dir": "gs://b/ex", "shake.tag_weights": {"JKB": 0.5}})
    assert c.train.learning_rate == 3.0 and isinstance(c.train.learning_rate, float)
    assert c.mesh.rules == (("batch", "data"),) and c.data.dir == "gs://b/ex"
    assert dict(c.shake.tag_weights) == {"JKB": 0.5}
    for bad, message in (({"train.num_steps": "many"}, "'train.num_steps' = 'many' is a str"),
                         ({"data.nope": 1}, "config key 'data.nope' does not exist"),
                         ({"model": 1}, "'model' is a section"),
                         ({"model.attention_auto_flash": True}, "was removed")):
        with pytest.raises(KjaxError, match=f"^phases\\[0\\] \\(a\\): .*{message}") as e:
            apply_overrides(defaults(), bad, where="phases[0] (a): ")
        assert "\n" not in str(e.value)
    base = defaults()
    assert with_overrides(base, **{"train.batch_size": 64}).train.batch_size == 64
    assert base.train.batch_size == 128   # a copy
    with pytest.raises(KjaxError, match="'train.batch_size' = 64.0 is a float"):
        with_overrides(base, **{"train.batch_size": 64.0})


def test_a_value_inside_the_config_files_folder(tmp_path):
    """`{run}/...` names a path inside the folder of the config file that holds
    it (what a run records for the files it keeps): resolved wherever the file
    lies, and only there."""
    from kjax.config.recorded import write_config_file
    config = defaults()
    config.tokenizer.path = "{run}/tokenizer/sp"
    for folder in ("a", "b/c"):
        path = tmp_path / folder / "kjax_config.py"
        write_config_file(config, str(path), "moved")
        assert load_config(str(path)).tokenizer.path == str(tmp_path / folder / "tokenizer" / "sp")
    assert load_config(str(path), ["--config.data.dir={run}/ex"]).data.dir == \
        str(tmp_path / "b" / "c" / "ex")
