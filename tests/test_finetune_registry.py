"""Fine-tuning tasks are a registry (kjax/finetune/registry.py);
docs/ARCHITECTURE.md's worked example of a new task runs end to end, and
touches only its own module and the registry's list."""
import json
import os
import re

import numpy as np
import pytest

from conftest import DEMO_CONFIG, ROOT, tiny_overrides
from kjax.errors import KjaxError
from kjax.finetune.registry import TASKS, finetune_task, register
from test_finetune import env  # noqa: F401  (the module's fixture: tokenizer + task files)


def test_every_registered_task_keeps_the_contract():
    assert list(TASKS) == ["classify", "pair", "regress", "ner", "qa", "choice", "wic"]
    for name, task in TASKS.items():
        assert task.name == name and task.primary in task.metric_names, name
        assert finetune_task(name) is task and finetune_task(task) is task
    outputs = {name: task.num_outputs(5) for name, task in TASKS.items()}
    assert outputs == {"classify": 5, "pair": 5, "regress": 1, "ner": 5, "qa": 2, "choice": 1,
                       "wic": 5}
    with pytest.raises(KjaxError, match=r"--task 'nli'; choose one of classify, pair, "):
        finetune_task("nli")
    with pytest.raises(ValueError, match="taken"):
        register(TASKS["pair"])


def worked_example() -> str:
    """The python block of docs/ARCHITECTURE.md's "Adding a fine-tuning task"."""
    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
        page = f.read()
    section = page[page.index("## Adding a fine-tuning task"):]
    section = section[:section.index("\n## ", 4)] if "\n## " in section[4:] else section
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_the_worked_example_of_a_new_task_runs(env, tmp_path, capsys):  # noqa: F811
    """The page's module defines `paraphrase` and the registry lists it;
    `kjax finetune --task paraphrase` trains its one-logit head on pairs and
    scores it by F1."""
    from kjax.cli import main
    block = worked_example()
    # the task's own module imports no registry (no circle): the registry lists it
    assert "registry" not in block and "register" not in block
    module = {"__name__": "kjax.finetune.paraphrase"}
    exec(compile(block, "ARCHITECTURE.md", "exec"), module)
    register(module["Paraphrase"]())    # the doc's one line in kjax/finetune/registry.py
    try:
        run_paraphrase(main, env, tmp_path, capsys)
    finally:
        TASKS.pop("paraphrase", None)     # the registry as the other tests know it


def run_paraphrase(main, env, tmp_path, capsys):  # noqa: F811
    task = TASKS["paraphrase"]
    assert task.num_outputs(2) == 1 and task.primary == "f1"
    train, dev = env["files"]["pair"]      # labels a/b: b is the positive class
    out = str(tmp_path / "para")
    assert main(["finetune", "--config", DEMO_CONFIG, *tiny_overrides(str(env["tmp"])),
                 "--task", "paraphrase", "--train", train, "--dev", dev, "--init", "none",
                 "--out", out, "--config.finetune.epochs=6", "--config.finetune.batch_size=16",
                 "--config.finetune.max_seq_len=32", "--config.finetune.learning_rate=1e-2",
                 "--config.finetune.classifier_dropout=0.0",
                 "--config.finetune.checkpoint_every=1000"]) == 0
    printed = capsys.readouterr().out
    with open(os.path.join(out, "metrics.json"), encoding="utf-8") as f:
        result = json.load(f)
    dev_scores = result["results"]["+0"]["dev"]
    assert result["select_metric"] == "f1" and set(dev_scores) == {"accuracy", "f1"}
    assert dev_scores["accuracy"] >= 0.85 and dev_scores["f1"] >= 0.85, dev_scores
    with open(os.path.join(out, "predictions_dev.jsonl"), encoding="utf-8") as f:
        preds = [json.loads(line) for line in f]
    assert {p["pred"] for p in preds} <= {"a", "b"}
    gold = [p["gold"] for p in preds]
    assert np.mean([p["pred"] == g for p, g in zip(preds, gold)]) == dev_scores["accuracy"]
    assert "dev f1" in printed
    assert main(["finetune", "--config", DEMO_CONFIG, *tiny_overrides(str(env["tmp"])),
                 "--task", "paraphrase", "--train", train, "--init", "none", "--out", out,
                 "--config.finetune.max_seq_len=32",
                 "--config.finetune.select_metric=macro_f1"]) == 2
    assert "not a paraphrase metric; choose one of accuracy, f1" in capsys.readouterr().err
