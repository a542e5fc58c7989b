"""Runs in phases (kjax/pretrain/phases.py) and what a resume may change
(kjax/pretrain/resume_policy.py): a new phase from another run's checkpoint,
phases listed in a config, continued pretraining of an imported model, and
the refusals that keep a changed config from continuing a run silently."""
import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from conftest import DEMO_CONFIG, tiny_config, tiny_overrides
from kjax.errors import KjaxError
from kjax.pretrain.trainer import train
from kjax.train.metrics import read_metrics

SHORT = {"data.max_seq_len": 32, "model.max_position_embeddings": 32,
         "data.max_predictions_per_seq": 5}


@pytest.fixture(scope="module")
def short_examples(prepared, tmp_path_factory):
    """The fixture corpus again as 32-token rows (phase 1 of a 32 → 64 run)."""
    from kjax.pretrain.prepare import prepare
    folder = tmp_path_factory.mktemp("short") / "examples"
    prepare(tiny_config(prepared, **SHORT, **{"data.dir": str(folder)}), progress=False)
    return str(folder)


def phase_one(prepared, short_examples, workdir, **extra):
    config = tiny_config(prepared, **SHORT, **{"data.dir": short_examples}, **extra)
    train(config, workdir, progress=False)
    return config


def train_rows(workdir):
    return {r["step"]: r for r in read_metrics(workdir) if r["split"] == "train"}


def test_a_phase_starts_from_the_parent_and_its_own_warmup(prepared, short_examples, tmp_path):
    """32 → 64 tokens: the position table grows (its new rows the parent's, copied),
    the first loss is phase 1's parameters on phase 2's first batch, the LR
    warms up from 0 again, and lineage.json names the parent's checkpoint."""
    from kjax.batches.loader import train_dataset
    from kjax.checkpoint.restore import restore_params
    from kjax.objectives import pretraining_loss
    from kjax.train.step import _forward
    from kjax.train.state import make_model
    from kjax.train.schedules import learning_rate_schedule
    w1, w2 = str(tmp_path / "w1"), str(tmp_path / "w2")
    c1 = phase_one(prepared, short_examples, w1)
    c2 = tiny_config(prepared, **{"init.from_run": w1, "init.new_positions": "copy",
                                  "model.dropout_rate": 0.0,
                                  "model.attention_dropout_rate": 0.0})
    train(c2, w2, progress=False)
    p1, step1 = restore_params(c1, w1)
    assert step1 == c1.train.num_steps
    expected = jax.tree.map(lambda x: x, p1)
    table = p1["embeddings"]["position_embeddings"]["embedding"]
    expected["embeddings"]["position_embeddings"]["embedding"] = np.concatenate([table, table])
    batch = next(iter(train_dataset(c2)))
    loss, _ = pretraining_loss(_forward(make_model(c2, deterministic=True), expected, batch),
                               batch, c2)
    rows = train_rows(w2)
    np.testing.assert_allclose(rows[1]["loss"], float(loss), rtol=2e-6)
    schedule = learning_rate_schedule(c2.train)
    for step, row in rows.items():
        np.testing.assert_allclose(row["learning_rate"], float(schedule(step - 1)), rtol=1e-6)
    assert rows[1]["learning_rate"] == 0.0
    lineage = json.load(open(os.path.join(w2, "lineage.json")))
    assert lineage["parent"] == w1 and lineage["parent_step"] == 6
    assert lineage["parent_checkpoint"] == os.path.join(w1, "checkpoints", "6")
    assert "embeddings/position_embeddings/embedding: 32 → 64 rows, the new ones copied" in \
        lineage["notes"]


def test_a_killed_phase_resumes_to_the_uninterrupted_losses(prepared, short_examples, tmp_path):
    """Stopped at step 3 and run again with the same command (the checkpoint is
    its own now: --init-from is not read again), phase 2 logs the losses of an
    uninterrupted phase 2."""
    w1 = str(tmp_path / "w1")
    phase_one(prepared, short_examples, w1)
    c2 = tiny_config(prepared, **{"init.from_run": w1})
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    train(c2, straight, progress=False)
    assert train(c2, resumed, progress=False, stop_at=3)["final_step"] == 3
    shutil.rmtree(os.path.join(w1, "checkpoints"))   # the parent is not read again
    train(c2, resumed, progress=False)
    a, b = train_rows(straight), train_rows(resumed)
    assert sorted(a) == sorted(b) == list(range(1, 7))
    for step in a:
        assert a[step]["loss"] == b[step]["loss"], step


def test_a_model_size_change_is_named_in_one_line(prepared, short_examples, tmp_path):
    w1 = str(tmp_path / "w1")
    phase_one(prepared, short_examples, w1)
    c2 = tiny_config(prepared, **{"init.from_run": w1, "model.intermediate_size": 96})
    with pytest.raises(KjaxError, match=r"mlp_in/bias has shape \(2, 64\) there and "
                                        r"\(2, 96\) here; .* not the model's sizes"):
        train(c2, str(tmp_path / "w2"), progress=False)


def test_the_changed_shapes_and_data_in_the_same_workdir_are_refused(
        prepared, short_examples, trained_run, tmp_path):
    """A new user's sequence: 6 steps at 64 tokens, then the same workdir with
    32-token shards and more steps: one line, exit 2, nothing written."""
    workdir = str(tmp_path / "run")
    shutil.copytree(trained_run, workdir)
    before = {p: os.path.getmtime(os.path.join(r, p)) for r, _, files in os.walk(workdir)
              for p in files}
    overrides = tiny_overrides(str(prepared), **SHORT, **{"data.dir": short_examples,
                                                          "train.num_steps": 10})
    out = subprocess.run([sys.executable, "-m", "kjax.cli", "train", "--config", DEMO_CONFIG,
                          "--workdir", workdir, *overrides], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr[-1500:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kjax: error: ")
    assert "data.max_seq_len: 64 → 32" in lines[0] and "--init-from" in lines[0]
    after = {p: os.path.getmtime(os.path.join(r, p)) for r, _, files in os.walk(workdir)
             for p in files}
    assert after == before


def test_num_steps_may_grow_only_where_the_curve_has_no_jump(prepared, trained_run, tmp_path):
    """Linear decay laid over num_steps: refused with the LR it would jump to;
    a constant schedule: extended, the run continues."""
    workdir = str(tmp_path / "run")
    shutil.copytree(trained_run, workdir)
    with pytest.raises(KjaxError, match=r"train.num_steps 6 → 9 would move the learning rate"):
        train(tiny_config(prepared, **{"train.num_steps": 9}), workdir, progress=False)
    constant = {"train.schedule": "constant"}
    flat = str(tmp_path / "flat")
    train(tiny_config(prepared, **constant), flat, progress=False)
    result = train(tiny_config(prepared, **constant, **{"train.num_steps": 8}), flat,
                   progress=False)
    assert result["final_step"] == 8
    # settings that change no number pass
    train(tiny_config(prepared, **constant, **{"train.num_steps": 8, "train.log_every": 2}),
          flat, progress=False)


def test_phases_listed_in_a_config_run_in_order_and_resume(prepared, short_examples, tmp_path):
    """One command runs both phases; stopped in phase 2 and run again, it skips
    the finished phase 1 and continues phase 2."""
    config = tiny_config(prepared, **SHORT, **{"data.dir": short_examples})
    config.phases = (
        {"name": "short", "overrides": {"train.num_steps": 4}},
        {"name": "long", "overrides": {"data.max_seq_len": 64, "data.dir": f"{prepared}/examples",
                                       "model.max_position_embeddings": 64,
                                       "data.max_predictions_per_seq": 10}})
    workdir = str(tmp_path / "phased")
    first = train(config, workdir, progress=False, stop_at=3)
    assert first["phase"] == "short" and first["final_step"] == 3
    train(config, workdir, progress=False, stop_at=5)    # short ends at 4, long stops at 5
    done = train(config, workdir, progress=False)
    assert done["phase"] == "long" and done["final_step"] == 6
    lineage = json.load(open(os.path.join(workdir, "phases", "long", "lineage.json")))
    assert lineage["parent"] == os.path.join(workdir, "phases", "short")
    assert lineage["parent_step"] == 4
    assert os.path.isfile(os.path.join(workdir, "kjax_config.py"))
    with pytest.raises(KjaxError, match=r"phases\[1\] \(long\): config key 'data.nope' does not exist"):
        config.phases = ({"name": "a", "overrides": {}},
                         {"name": "long", "overrides": {"data.nope": 1}})
        train(config, str(tmp_path / "bad"), progress=False)


def test_continued_pretraining_of_an_imported_model(prepared, trained_run, tmp_path):
    """kjax export → transformers folder → kjax import → a new phase from it:
    the lineage says the parent was imported."""
    from kjax.cli import main
    overrides = tiny_overrides(str(prepared))
    hf, imported = str(tmp_path / "hf"), str(tmp_path / "imported")
    assert main(["export", "--config", DEMO_CONFIG, *overrides, "--workdir", trained_run,
                 "--out", hf]) == 0
    assert main(["import", "--hf", hf, "--out", imported, *overrides]) == 0
    workdir = str(tmp_path / "continued")
    assert main(["train", "--config", DEMO_CONFIG, *overrides, "--workdir", workdir,
                 "--init-from", imported]) == 0
    lineage = json.load(open(os.path.join(workdir, "lineage.json")))
    assert lineage["parent"] == imported
    assert lineage["parent_imported_from"] == os.path.abspath(hf)   # import.json's, not prose
    rows = train_rows(workdir)
    assert rows[1]["loss"] < 7.0   # the imported (trained) weights, not a fresh init's ~7.1
    from kjax.pretrain.trainer import evaluate
    assert evaluate(tiny_config(prepared), workdir)["started"] == (
        f"from {imported} at step 0 (imported from {hf} by `kjax import`)")
    card_dir = str(tmp_path / "card")
    assert main(["export", "--config", DEMO_CONFIG, *overrides, "--workdir", workdir,
                 "--out", card_dir]) == 0
    card = open(os.path.join(card_dir, "README.md"), encoding="utf-8").read()
    assert f"- started from {imported} at step 0 (imported from {hf} by `kjax import`)" in card
    # the imported run itself came from the exported run: its card line has no parent
    assert card.count("- started from") == 1


def test_continued_pretraining_on_new_text_with_the_imported_vocabulary(prepared, trained_run,
                                                                        tmp_path):
    """A transformers folder whose vocabulary has kjax's special ids prepares new
    text with its own tokenizer (tokenizer.scheme='imported'), and `kjax train
    --init-from` continues it on that text with no --config: the import's own."""
    import math
    from kjax.cli import main
    from kjax.config import load_config
    from kjax.examples import records
    overrides = tiny_overrides(str(prepared))
    hf, imported = str(tmp_path / "hf"), str(tmp_path / "imported")
    assert main(["export", "--config", DEMO_CONFIG, *overrides, "--workdir", trained_run,
                 "--out", hf]) == 0
    # a transformers BERT folder like any other (no kjax keys): its tokenizer.json is taken
    hf_config = json.load(open(os.path.join(hf, "config.json")))
    json.dump({k: v for k, v in hf_config.items() if not k.startswith("kjax_")},
              open(os.path.join(hf, "config.json"), "w"))
    assert main(["import", "--hf", hf, "--out", imported, *overrides]) == 0
    config_file = os.path.join(imported, "kjax_config.py")
    assert load_config(config_file).tokenizer.scheme == "imported"
    data = str(tmp_path / "chatterbot")
    new_text = ["--config.data.corpus=chatterbot-ko", f"--config.data.dir={data}"]
    assert main(["prepare", "--config", config_file, *new_text]) == 0
    assert records.read_meta(data)["train_examples"] > 0
    workdir = str(tmp_path / "continued")
    assert main(["train", "--workdir", workdir, "--init-from", imported, *new_text,
                 "--config.train.num_steps=2", "--config.train.checkpoint_every=2"]) == 0
    first = train_rows(workdir)[1]
    vocab = load_config(config_file).model.vocab_size
    assert math.isfinite(first["loss"]) and first["mlm_loss"] < math.log(vocab)  # not a fresh model's
    assert json.load(open(os.path.join(workdir, "lineage.json")))["parent"] == imported


def test_the_phase_presets_phases_check_and_compile_by_name(tmp_path):
    """tpu_configs/bert_base_phases.py and modern_base.py list their phases;
    `kjax compile --phase` and the compile cases pick one by name."""
    from kjax.config import load_config
    from kjax.pretrain.phases import phase_config, phase_configs
    root = os.path.dirname(DEMO_CONFIG)
    bert = load_config(os.path.join(root, "bert_base_phases.py"))
    long = phase_config(bert, "seq512")
    assert (long.data.max_seq_len, long.train.microbatches, long.train.num_steps) == \
        (512, 2, 100_000)
    assert long.phases == () and bert.data.max_seq_len == 128
    modern = [c for _, c in phase_configs(load_config(os.path.join(root, "modern_base.py")))]
    assert [c.model.rope_theta for c in modern] == [10_000.0, 160_000.0, 160_000.0]
    assert [c.train.schedule for c in modern] == ["constant", "constant", "wsd"]
    assert modern[1].train.batch_size * 8192 == modern[0].train.batch_size * 1024
    with pytest.raises(KjaxError, match=r"--phase seq9: the config lists no such phase "
                                        r"\(phases: seq128, seq512\)"):
        phase_config(bert, "seq9")


def test_a_phase_without_config_takes_its_parents(trained_run, tmp_path):
    """`kjax train --workdir W2 --init-from W1` with no --config: the config W1
    recorded, the overrides on top (the issue's command as written)."""
    from kjax.cli import main
    from kjax.config import load_config
    from kjax.config.recorded import recorded_config_path
    workdir = str(tmp_path / "p2")
    assert main(["train", "--workdir", workdir, "--init-from", trained_run,
                 "--config.train.num_steps=2", "--config.train.checkpoint_every=2"]) == 0
    assert json.load(open(os.path.join(workdir, "lineage.json")))["parent"] == trained_run
    mine = load_config(recorded_config_path(workdir))
    parent = load_config(recorded_config_path(trained_run))
    assert (mine.train.num_steps, mine.init.from_run) == (2, trained_run)
    assert (mine.data.dir, mine.model.hidden_size) == (parent.data.dir, parent.model.hidden_size)
