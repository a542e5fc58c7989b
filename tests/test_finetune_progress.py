"""`kjax finetune --every-checkpoint` fine-tunes every saved step of
a pretraining run (seeds → mean ± std) and plots score vs pretraining step,
other runs' curves joining through --compare."""
import json
import os

import jax
import numpy as np
import pytest

from conftest import DEMO_CONFIG, tiny_config, tiny_overrides
from kjax.cli import main


def rows(n, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        y = int(rng.integers(2))
        word = ["국민", "정부"][y]
        out.append({"text": f"그리고 {word} {word} 및 {word} 등", "label": "ab"[y]})
    return out


@pytest.mark.slow
def test_every_checkpoint_fine_tunes_each_step_and_plots_the_curve(tmp_path, capsys):
    from kjax.checkpoint.manager import Checkpointer
    from kjax.parallel.mesh import make_mesh
    from kjax.tokens.factory import train_tokenizer
    from kjax.train.state import init_state, make_model, make_optimizer
    config = tiny_config(tmp_path)
    train_tokenizer(config)
    state, _ = init_state(config, make_mesh(config), make_model(config, False),
                          make_optimizer(config.train))
    ckpt = Checkpointer(str(tmp_path / "pre" / "checkpoints"), 1, 3)
    for step in (2, 5):     # two "pretraining steps" with different weights
        state["params"] = jax.tree.map(lambda x: x * 1.01, state["params"])
        ckpt.save(step, state, {"position": 0}, force=True)
    ckpt.close()
    files = []
    for name, n, seed in (("train", 32, 0), ("dev", 16, 1)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows(n, seed)),
                        encoding="utf-8")
        files.append(str(path))
    args = ["finetune", "--config", DEMO_CONFIG, *tiny_overrides(str(tmp_path)),
            "--task", "classify", "--train", files[0], "--dev", files[1],
            "--init", str(tmp_path / "pre"), "--every-checkpoint",
            "--config.finetune.epochs=1", "--config.finetune.batch_size=16",
            "--config.finetune.max_seq_len=16"]
    assert main([*args, "--seeds", "3", "--out", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    assert main([*args, "--seeds", "1,2", "--out", str(tmp_path / "b"),
                 "--compare", str(tmp_path / "a")]) == 0
    printed = capsys.readouterr().out
    with open(tmp_path / "b" / "progress.json", encoding="utf-8") as f:
        progress = json.load(f)
    assert [p["step"] for p in progress["points"]] == [2, 5]
    assert all(p["n"] == 2 for p in progress["points"])
    for p in progress["points"]:        # each point: the mean of its two seeds' runs
        scores = [json.load(open(tmp_path / "b" / f"step{p['step']}" / f"seed{s}" /
                                 "metrics.json"))["results"]["+0"]["dev"]["macro_f1"]
                  for s in (1, 2)]
        assert p["mean"] == pytest.approx(np.mean(scores))
    assert os.path.getsize(tmp_path / "b" / "progress.png") > 10_000
    assert "| 5 | +0 | +0 |" in printed and "progress.png" in printed
    assert main([*args, "--out", str(tmp_path / "c"), "--compare",
                 str(tmp_path / "nowhere")]) == 2
    assert "--compare" in capsys.readouterr().err
