"""`kjax finetune`: every head learns a tiny synthetic task, the
SHAKE sweep and --seeds report what they claim, a stopped run resumes
bit-exactly, --init restores a kjax pretraining checkpoint, and the CLI
fails in one line. Readers, BIO and metrics: test_finetune_data.py."""
import json
import os
import sys

import flax
import jax
import numpy as np
import pytest

import waiting
from conftest import DEMO_CONFIG, ROOT, tiny_config, tiny_overrides
from fault_helpers import tensorboard_at_each_save
from kjax.cli import main
from kjax.errors import KjaxError
from kjax.finetune.experiment import finetune_settings
from kjax.finetune.experiment import make_tuner
from kjax.finetune.features import Encoder, make_batch
from kjax.finetune.heads import make_task_model
from kjax.finetune.run import run_one
from kjax.finetune.readers import Example
from kjax.finetune.registry import finetune_task

FILLER = ["그리고", "이", "법", "제", "조", "항", "및", "등", "의", "는", "에", "를", "수", "있다"]
KEYS = ["국민", "정부"]
NAMES = {"PS": ["철수", "영희"], "LC": ["서울", "부산"]}
FT = ["finetune.max_seq_len=32", "finetune.batch_size=16", "finetune.epochs=6",
      "finetune.learning_rate=1e-2", "finetune.patience=0", "finetune.log_every=4",
      "finetune.classifier_dropout=0.0", "finetune.checkpoint_every=1000"]


def sentence(rng, keys=(), n=5):
    words = list(rng.choice(FILLER, n))
    for k in keys:
        words.insert(rng.integers(len(words) + 1), k)
    return " ".join(words)


def synthetic(task, n, seed):
    """Label = which keyword (repeated thrice) a sentence holds; pair: the
    keyword of sentence b (a is filler); regress: how many times
    국민 occurs; ner: names (PS) and cities (LC) among filler words."""
    rng, rows = np.random.default_rng(seed), []
    for _ in range(n):
        y = int(rng.integers(2))
        if task == "classify":
            rows.append({"text": sentence(rng, [KEYS[y]] * 3), "label": "ab"[y]})
        elif task == "pair":
            rows.append({"text": sentence(rng), "text_b": sentence(rng, [KEYS[y]] * 3),
                         "label": "ab"[y]})
        elif task == "regress":
            k = int(rng.integers(4))
            rows.append({"text": sentence(rng, ["국민"] * k), "text_b": sentence(rng),
                         "score": float(k)})
        else:
            text, spans = "", []
            for w in sentence(rng, ["@PS", "@LC"]).split():
                text += " " if text else ""
                if w.startswith("@"):
                    name = NAMES[w[1:]][rng.integers(2)]
                    spans.append([len(text), len(text) + len(name), w[1:]])
                    w = name
                text += w
            rows.append({"text": text, "entities": spans})
    return rows


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return str(path)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A trained tiny tokenizer, the config that reads it, and the task files."""
    from kjax.tokens.factory import load_tokenizer, train_tokenizer
    tmp = tmp_path_factory.mktemp("finetune")
    config = tiny_config(tmp)
    train_tokenizer(config)
    files = {task: (write_jsonl(tmp / f"{task}_train.jsonl", synthetic(task, 64, 0)),
                    write_jsonl(tmp / f"{task}_dev.jsonl", synthetic(task, 32, 1)))
             for task in ("classify", "pair", "regress", "ner")}
    return {"tmp": tmp, "config": config, "tokenizer": load_tokenizer(config), "files": files}


_RUNS = {}


def learned(env, task):
    """(tuner, metrics.json, out dir) of one run per task, shared by the tests."""
    if task not in _RUNS:
        ft = finetune_settings(FT)
        tuner = make_tuner(env["config"], ft, task, *env["files"][task], init="none",
                           tokenizer=env["tokenizer"])
        out = str(env["tmp"] / f"run_{task}")
        _RUNS[task] = tuner, run_one(tuner, 0, 0.0, [0.0], out, progress=False), out
    return _RUNS[task]


# Every fine-tuning run compiles its steps and writes an orbax checkpoint:
# 40-110 s each on a loaded 2-core machine, so they are `slow` (CI runs them).
SLOW = pytest.mark.slow


@SLOW
@pytest.mark.parametrize("task,metric,floor", [
    ("classify", "macro_f1", 0.9), ("pair", "accuracy", 0.85), ("regress", "pearson", 0.8),
    ("ner", "entity_f1", 0.8)])
def test_each_head_learns_its_synthetic_task(env, task, metric, floor):
    tuner, result, out = learned(env, task)
    dev, baseline = result["results"]["+0"]["dev"], result["baseline"]["dev"]
    assert dev[metric] >= floor, (task, dev)
    assert baseline[metric] is None or baseline[metric] < 0.65      # chance: the task is not free
    assert result["steps"] == result["total_steps"] == 24 and result["resumed_from_step"] is None
    for name in ("metrics.json", "metrics.jsonl", "learning_curve.png", "predictions_dev.jsonl"):
        assert os.path.isfile(os.path.join(out, name)), name
    with open(os.path.join(out, "predictions_dev.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert len(rows) == 32 and {"guid", "gold", "pred"} <= set(rows[0])
    if task == "ner":   # entities as [start, end, type, surface] on the dev text
        assert all(r["text"][s:e] == surface for r in rows for s, e, _, surface in r["gold"])


@SLOW
def test_a_stopped_run_resumes_bit_exactly(env, tmp_path, monkeypatch):
    tuner, straight, out = learned(env, "classify")
    resumed = str(tmp_path / "resumed")
    tensorboard = tensorboard_at_each_save(monkeypatch, os.path.join(resumed, "tensorboard"))
    first = run_one(tuner, 0, 0.0, [0.0], resumed, progress=False, stop_at=10)
    assert first["message"].startswith("stopped at step 10")
    assert sorted(os.listdir(os.path.join(resumed, "checkpoints"))) == ["10"]
    logged = [r["step"] for r in map(json.loads, open(os.path.join(resumed, "metrics.jsonl")))
              if r["split"] == "train"]
    assert tensorboard == {10: logged} and logged[-1] == 10   # in the files before the save
    with pytest.raises(KjaxError, match=r"resumed holds a run with other settings \(seed: 0 → 3\)"):
        run_one(tuner, 3, 0.0, [0.0], resumed, progress=False)
    second = run_one(tuner, 0, 0.0, [0.0], resumed, progress=False)  # what a rerun does
    assert second["resumed_from_step"] == 10 and second["steps"] == 24
    assert second["results"] == straight["results"]
    with open(os.path.join(out, "predictions_dev.jsonl")) as a, \
            open(os.path.join(resumed, "predictions_dev.jsonl")) as b:
        assert a.read() == b.read()
    rows = lambda d: {r["step"]: r for r in map(json.loads, open(os.path.join(d, "metrics.jsonl")))
                      if r["split"] == "train" and r["step"] > 10}  # noqa: E731
    straight_rows, resumed_rows = rows(out), rows(resumed)      # the rerun also logs step 11
    assert straight_rows and all(resumed_rows[k] == v for k, v in straight_rows.items())


@SLOW
def test_sweep_and_seeds_from_the_cli(env, tmp_path, capsys):
    train, dev = env["files"]["classify"]
    out = str(tmp_path / "sweep")
    rc = main(["finetune", "--config", DEMO_CONFIG, *tiny_overrides(str(env["tmp"])),
               "--task", "classify", "--train", train, "--dev", dev, "--init", "none",
               "--out", out, "--seeds", "1,2", "--sweep", "--config.finetune.epochs=1",
               "--config.finetune.batch_size=16", "--config.finetune.max_seq_len=32",
               "--config.finetune.shake.variant=random", "--config.finetune.shake.p=0.5",
               "--config.finetune.shake.sweep_train=(-0.5,0.25)",
               "--config.finetune.shake.sweep_infer=(0,0.5)"])
    printed = capsys.readouterr().out
    assert rc == 0
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    combos = [(r["bf_train"], r["bf_infer"], r["seeds"]) for r in summary["rows"]]
    assert summary["attention_tiles"] == {}   # the CPU: no flash call's tiles to choose
    assert combos == [(-0.5, 0.0, 2), (-0.5, 0.5, 2), (0.25, 0.0, 2), (0.25, 0.5, 2)]
    assert "| -0.5 | +0.5 |" in printed and "±" in printed and "baseline (no model)" in printed
    for row in summary["rows"]:   # mean ± sample std over the two seeds' own metrics.json
        runs = []
        for seed in (1, 2):
            run_dir = os.path.join(out, f"ft{row['bf_train']:+g}", f"seed{seed}")
            with open(os.path.join(run_dir, "metrics.json")) as f:
                result = json.load(f)
            assert result["attention_tiles"] == {}
            runs.append(result["results"][f"{row['bf_infer']:+g}"]["dev"]["accuracy"])
            assert os.path.isfile(os.path.join(run_dir, f"predictions_dev_bf{row['bf_infer']:+g}"
                                               f".jsonl"))
        stat = row["dev"]["accuracy"]
        assert stat["mean"] == pytest.approx(np.mean(runs))
        assert stat["std"] == pytest.approx(np.std(runs, ddof=1)) and stat["n"] == 2


def test_shaking_changes_the_logits_only_where_b_says(env):
    """bf is the model's (fine-tune and inference independently); B comes with
    the batch. Random-variant B is reproducible per (seed, epoch, row)."""
    from kjax.finetune.experiment import shake_settings
    config, tok = env["config"], env["tokenizer"]
    ft = finetune_settings(FT + ["finetune.shake.variant=random", "finetune.shake.p=1.0"])
    feats = Encoder(tok, finetune_task("classify"), ["a"], 32).encode(
        [Example(str(i), sentence(np.random.default_rng(i)), label="a") for i in range(4)])
    cfg = shake_settings(config, ft)
    batch = make_batch(feats, [0, 1, 2, 3], cfg, (5, 0, 1))
    again, other = make_batch(feats, [0, 1, 2, 3], cfg, (5, 0, 1)), make_batch(
        feats, [0, 1, 2, 3], cfg, (5, 0, 2))
    assert np.asarray(batch["shake"], np.float32).sum() > 0
    assert np.array_equal(batch["shake"], again["shake"])
    assert not np.array_equal(batch["shake"], other["shake"])
    inputs = [batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")]
    plain = make_task_model(config, "ner", 3, 0.0, True, 0.0)    # per-token logits
    params = flax.linen.meta.unbox(jax.jit(plain.init)(jax.random.key(0), *inputs,
                                                       shake=batch["shake"])["params"])
    # At init the scores are ~0, and so is |score · B|: sharpen them so bf shows.
    sharpen = lambda path, x: x * 30 if jax.tree_util.keystr(path).endswith(  # noqa: E731
        ("['query']['kernel']", "['key']['kernel']")) else x
    params = jax.tree_util.tree_map_with_path(sharpen, params)
    apply = lambda bf, b: jax.jit(make_task_model(config, "ner", 3, bf, True, 0.0).apply)(
        {"params": params}, *inputs, shake=b)  # noqa: E731
    logits = {bf: apply(bf, batch["shake"]) for bf in (0.0, 2.0)}
    change = np.abs(logits[2.0] - logits[0.0]).max() / np.abs(logits[0.0]).max()
    assert change > 1e-3, change
    # bf 0 ignores B, and a B of zeros leaves the logits alone whatever bf.
    np.testing.assert_array_equal(logits[0.0], apply(0.0, np.ones_like(batch["shake"])))
    np.testing.assert_allclose(apply(2.0, np.zeros_like(batch["shake"])), logits[0.0], rtol=1e-6)


def test_pos_shaking_lines_sentencepiece_up_with_kiwi(env):
    from kjax.finetune.experiment import shake_settings
    ft = finetune_settings(FT)
    enc = Encoder(env["tokenizer"], finetune_task("pair"), ["a"], 32, pos_from_kiwi=True)
    feats = enc.encode([Example("g", "나는 너를 학교에서 보았다", "철수가 밥을 먹었다", "a")])
    assert feats.units["tags"][0].max() > 0 and 0.5 < feats.aligned_tokens <= 1
    b = np.asarray(make_batch(feats, [0], shake_settings(env["config"], ft))["shake"], np.float32)
    queries, keys = np.nonzero(b[0])
    assert len(queries) >= 3          # 는→나, 를→너, 가→철수 … (METHODS §1.3)
    n_a = int(np.argmax(feats.token_type_ids[0]))          # where sentence b starts
    assert all((q < n_a) == (k < n_a) for q, k in zip(queries, keys))   # never across sentences


@SLOW
def test_init_restores_a_kjax_pretraining_checkpoint(env, tmp_path):
    from kjax.checkpoint.manager import Checkpointer
    from kjax.parallel.mesh import make_mesh
    from kjax.train.state import init_state, make_model, make_optimizer
    config = env["config"]
    mesh = make_mesh(config)
    state, _ = init_state(config, mesh, make_model(config, False), make_optimizer(config.train))
    ckpt = Checkpointer(str(tmp_path / "pre" / "checkpoints"), 1, 1)
    ckpt.save(7, state, {"position": 0}, force=True)
    ckpt.close()
    ft = finetune_settings(FT)
    tuner = make_tuner(config, ft, "ner", *env["files"]["ner"], init=str(tmp_path / "pre"),
                       tokenizer=env["tokenizer"])
    bert = jax.device_get(tuner.init_state(0)["params"]["bert"])
    pre = jax.device_get(state["params"])
    assert set(bert) <= set(pre) and "nsp" not in bert
    for a, b in zip(jax.tree.leaves(bert), jax.tree.leaves({k: pre[k] for k in bert})):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(KjaxError, match=r"--init .*nowhere: no such file or directory"):
        make_tuner(config, ft, "ner", *env["files"]["ner"], init=str(tmp_path / "nowhere"),
                   tokenizer=env["tokenizer"]).pretrained_bert()


def test_cli_bad_inputs_are_one_line_errors(env, tmp_path, capsys):
    base = ["finetune", "--config", DEMO_CONFIG, *tiny_overrides(str(env["tmp"])), "--init",
            "none", "--out", str(tmp_path / "o"), "--config.finetune.max_seq_len=32"]
    assert main([*base, "--task", "pair", "--train", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("kjax: error: data file") and "missing.json" in err
    train, _ = env["files"]["classify"]
    bad = write_jsonl(tmp_path / "dev.jsonl", [{"text": "국민", "label": "a"},
                                              {"text": "정부", "label": "c"}])
    assert main([*base, "--task", "classify", "--train", train, "--dev", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{bad}:2: label 'c' never occurs in the training data" in err
    assert main([*base, "--task", "classify", "--train", train,
                 "--config.finetune.shake.variant=pos2"]) == 2
    assert "finetune.shake.variant='pos2'; choose pos or random" in capsys.readouterr().err


@SLOW
def test_killed_cli_run_resumes(env, tmp_path):
    """A real SIGKILL mid-run; the rerun continues from the last checkpoint."""
    train, dev = env["files"]["ner"]
    out = str(tmp_path / "killed")
    cmd = [sys.executable, "-m", "kjax.cli", "finetune", "--config", DEMO_CONFIG,
           *tiny_overrides(str(env["tmp"])), "--task", "ner", "--train", train, "--dev", dev,
           "--init", "none", "--out", out, "--config.finetune.epochs=40",   # 2 steps each
           "--config.finetune.max_seq_len=32", "--config.finetune.checkpoint_every=4",
           "--config.finetune.eval_every=40"]
    # One device: a loaded machine can stall the 8 fake devices' all-reduce (XLA aborts
    # after 40 s), and resuming does not depend on the mesh.
    environ = {**os.environ, "JAX_NUM_CPU_DEVICES": "1", "JAX_PLATFORMS": "cpu"}
    ckpts = os.path.join(out, "checkpoints")
    proc = waiting.start(cmd, "kjax finetune", str(tmp_path / "killed.log"), cwd=ROOT, env=environ)
    try:   # the kill follows the first committed checkpoint closely
        waiting.wait_for("a committed checkpoint", lambda: bool(waiting.committed(ckpts)),
                         timeout=400, procs=[proc])
    finally:
        proc.stop()   # SIGKILL
    steps = waiting.committed(ckpts)
    assert steps and max(steps) < 80, "the run finished before it could be killed"
    done = waiting.run(cmd, 400, "kjax finetune (resumed)", cwd=ROOT, env=environ)
    assert done.returncode == 0, done.stderr[-2000:]
    with open(os.path.join(out, "metrics.json")) as f:
        result = json.load(f)
    assert result["resumed_from_step"] in steps and result["steps"] == result["total_steps"] == 80
