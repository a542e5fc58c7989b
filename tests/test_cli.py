"""The command line: --help everywhere, and one-line errors for bad input
before anything compiles."""
import os
import subprocess
import sys

import pytest

from conftest import DEMO_CONFIG, ROOT, tiny_config, tiny_overrides
from kjax.cli import main
from kjax.config import apply_override, defaults, load_config
from kjax.errors import KjaxError

HELP_VERBS = [[], ["tokenizer"], ["tokenizer", "train"], ["prepare"], ["train"], ["eval"],
              ["demo"], ["compile"]]


@pytest.mark.parametrize("verb", HELP_VERBS)
def test_every_verb_has_help(verb, capsys):
    with pytest.raises(SystemExit) as e:
        main([*verb, "--help"])
    assert e.value.code == 0
    assert "usage: kjax" in capsys.readouterr().out


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "kjax.cli", "--help"], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0 and "tokenizer" in out.stdout


def test_unknown_config_key_is_one_line_error(capsys):
    code = main(["prepare", "--config", DEMO_CONFIG, "--config.data.no_such_key=1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "'data.no_such_key' does not exist" in err and "max_seq_len" in err


def test_overrides_are_typed():
    c = defaults()
    apply_override(c, "--config.train.learning_rate=3")
    apply_override(c, "--config.model.scan_layers=false")
    apply_override(c, "--config.data.corpus=a.txt,b.txt")
    assert c.train.learning_rate == 3.0 and c.model.scan_layers is False
    assert c.data.corpus == "a.txt,b.txt"
    with pytest.raises(KjaxError, match="cannot set"):
        apply_override(c, "--config.train.num_steps=many")


def test_invalid_values_are_rejected_at_load():
    with pytest.raises(KjaxError, match="hidden_size=30 is not divisible by model.num_heads=4"):
        load_config(DEMO_CONFIG, ["--config.model.hidden_size=30"])
    with pytest.raises(KjaxError, match="remat_policy"):
        load_config(DEMO_CONFIG, ["--config.model.remat_policy='sometimes'"])


def test_mesh_that_does_not_fit_the_devices(tmp_path):
    from kjax.parallel.mesh import make_mesh
    with pytest.raises(KjaxError, match=r"data=3 × fsdp=1 × tensor=1 = 3 but there are 8"):
        make_mesh(tiny_config(tmp_path, **{"mesh.data": 3}))
    with pytest.raises(KjaxError, match="3 does not divide 8 devices"):
        make_mesh(tiny_config(tmp_path, **{"mesh.tensor": 3}))


def test_batch_not_divisible_by_data_axes(tmp_path):
    from kjax.parallel.mesh import make_mesh
    with pytest.raises(KjaxError, match=r"batch_size=12 is not divisible by the 8 batch shards"):
        make_mesh(tiny_config(tmp_path, **{"train.batch_size": 12}))


def test_vocab_size_that_disagrees_with_the_tokenizer(prepared):
    from kjax.tokens.factory import load_tokenizer
    config = tiny_config(prepared, **{"model.vocab_size": 700})
    with pytest.raises(KjaxError, match=r"model.vocab_size=700 disagrees with the tokenizer"):
        load_tokenizer(config)


def test_train_on_data_prepared_for_another_config(prepared, tmp_path):
    from kjax.pretrain.trainer import train
    config = tiny_config(prepared, **{"data.max_seq_len": 32})
    with pytest.raises(KjaxError, match="prepared with max_seq_len=64"):
        train(config, str(tmp_path / "w"), progress=False)


def test_train_without_prepared_data(tmp_path, capsys):
    code = main(["train", "--config", DEMO_CONFIG, "--workdir", str(tmp_path / "w"),
                 *tiny_overrides(str(tmp_path))])
    assert code == 2
    assert "is not a finished `kjax prepare` output" in capsys.readouterr().err


def test_missing_tokenizer_and_corpus(tmp_path, capsys):
    assert main(["prepare", "--config", DEMO_CONFIG, *tiny_overrides(str(tmp_path))]) == 2
    assert "run `kjax tokenizer train" in capsys.readouterr().err
    assert main(["tokenizer", "train", "--config", DEMO_CONFIG, "--config.data.corpus=",
                 "--config.tokenizer.corpus="]) == 2
    assert "data.corpus is empty" in capsys.readouterr().err


def test_prepare_resumes_and_refuses_mixed_shards(prepared, tmp_path):
    from kjax.pretrain.prepare import prepare
    config = tiny_config(prepared)
    again = prepare(config, progress=False)  # every chunk was finished before
    assert again["chunks_reused"] == again["chunks"] > 0 and again["train_examples"] > 0
    changed = tiny_config(prepared, **{"data.masked_lm_prob": 0.2})
    with pytest.raises(KjaxError, match="holds shards made with another data config"):
        prepare(changed, progress=False)


def test_prepare_output_does_not_depend_on_workers(prepared, tmp_path):
    from kjax.pretrain.prepare import prepare
    outs = []
    for workers in (1, 2):
        config = tiny_config(prepared, **{"data.dir": f"{tmp_path}/w{workers}",
                                          "data.docs_per_chunk": 3})
        prepare(config, num_workers=workers, progress=False)
        shards = sorted(f for f in os.listdir(f"{tmp_path}/w{workers}") if f.endswith("record"))
        outs.append({f: open(f"{tmp_path}/w{workers}/{f}", "rb").read() for f in shards})
    assert outs[0] == outs[1] and len(outs[0]) >= 4


@pytest.mark.parametrize("name, layers, hidden, heads", [
    ("demo", 2, 128, 4), ("uknow_small", 4, 256, 4), ("roberta_small_shake", 6, 768, 12),
    ("bert_base", 12, 768, 12), ("bert_large", 24, 1024, 16)])
def test_presets_load_with_the_documented_sizes(name, layers, hidden, heads):
    config = load_config(os.path.join(ROOT, "tpu_configs", f"{name}.py"))
    m = config.model
    assert (m.num_layers, m.hidden_size, m.num_heads) == (layers, hidden, heads)
    header = open(os.path.join(ROOT, "tpu_configs", f"{name}.py"), encoding="utf-8").read(2000)
    assert "kjax " in header and "Expected" in header
