"""`kjax config show`: every key of the schema, its value and meaning; --diff
lists exactly the keys where a run's recorded config differs."""
import json

from conftest import DEMO_CONFIG
from kjax.cli import main
from kjax.config import leaves, load_config
from kjax.config.recorded import record_config


def test_every_key_with_its_value_and_meaning(capsys):
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out.splitlines()
    schema = leaves()
    assert out[0] == f"{len(schema)} keys of the defaults (* : not the default)"
    body = [line for line in out[1:] if line.startswith(("  ", "* "))]
    assert len(body) == len(schema)
    for line, (dotted, key) in zip(body, schema.items()):
        name = dotted.split(".", 1)[-1]
        assert line[2:].startswith(f"{name} = {key.default!r}"[:30]), line
        assert line.endswith(f"{key.meaning} ({key.allowed()})"), line
        assert line.startswith("  ")       # the defaults: nothing marked


def test_a_config_file_with_overrides_marks_what_is_not_default(capsys):
    assert main(["config", "show", "--config", DEMO_CONFIG, "--config.train.num_steps=77",
                 "--config.train.warmup_steps=7", "--json"]) == 0
    found = {r["key"]: r for r in json.loads(capsys.readouterr().out)}
    assert len(found) == len(leaves())
    assert found["train.num_steps"]["value"] == 77 and found["model.hidden_size"]["value"] == 128
    assert found["model.hidden_size"]["meaning"] == leaves()["model.hidden_size"].meaning
    assert main(["config", "show", "--config", DEMO_CONFIG, "--config.train.num_steps=77",
                 "--config.train.warmup_steps=7"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("* num_steps = 77 ") for line in lines)


def test_diff_against_a_run_lists_only_the_changed_keys(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    record_config(load_config(DEMO_CONFIG, ["--config.model.num_layers=3",
                                            "--config.shake.variant=random"]), str(run))
    assert main(["config", "show", "--config", DEMO_CONFIG, "--diff", str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("2 keys differ between")
    assert any("num_layers = 2  (" in line and ": 3)" in line for line in out)
    assert any("variant = 'none'" in line and ": 'random')" in line for line in out)
    assert main(["config", "show", "--diff", str(tmp_path)]) == 2
    assert "no " in capsys.readouterr().err
