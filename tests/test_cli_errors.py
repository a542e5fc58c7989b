"""Every verb's user errors: exactly one line on stderr (fd 2, threads and
library loggers included), nothing on stdout but what the verb printed
before, exit 2. Each case fails before anything compiles, so the whole file
runs in seconds. The config/checkpoint mismatch (orbax's asyncio echoes)
is covered with a real checkpoint in test_faults.py."""
import os

import pytest

from conftest import DEMO_CONFIG
from kjax.cli import main


def _cases(tmp):
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty, exist_ok=True)
    missing = os.path.join(tmp, "no_such_file.txt")
    tok = [f"--config.tokenizer.path={tmp}/tok/sp", f"--config.data.dir={tmp}/ex"]
    return {
        "unknown verb": ["pretrian", "--config", DEMO_CONFIG],
        "bad choice": ["finetune", "--task", "classification", "--train", missing,
                       "--init", "none", "--out", f"{tmp}/ft"],
        "missing argument": ["export", "--workdir", empty],
        "bad key": ["prepare", "--config", DEMO_CONFIG, "--config.data.no_such_key=1"],
        "bad value": ["train", "--config", DEMO_CONFIG, "--workdir", empty,
                      "--config.train.batch_size=-3"],
        "missing config file": ["prepare", "--config", missing],
        "tokenizer train, empty corpus": ["tokenizer", "train", "--config", DEMO_CONFIG,
                                          "--config.tokenizer.corpus=",
                                          "--config.data.corpus="],
        "tokenizer stats, no tokenizer": ["tokenizer", "stats", "--config", DEMO_CONFIG, *tok],
        "prepare, no tokenizer": ["prepare", "--config", DEMO_CONFIG, *tok],
        "train, no data": ["train", "--config", DEMO_CONFIG, "--workdir", empty, *tok],
        "train, a missing source": ["train", "--config", DEMO_CONFIG, "--workdir", empty, *tok,
                                    "--config.data.sources={'web': {'dir': '%s'}}" % missing],
        "train, a negative weight": ["train", "--config", DEMO_CONFIG, "--workdir", empty,
                                     "--config.data.sources={'web': {'dir': 'x', "
                                     "'weight': -0.5}}"],
        "train, a schedule with static masks": [
            "train", "--config", DEMO_CONFIG, "--workdir", empty, "--config.data.masking=static",
            "--config.data.mask_schedule=linear"],
        "eval, no run": ["eval", "--workdir", empty],
        "eval, no checkpoint": ["eval", "--config", DEMO_CONFIG, "--workdir", empty, *tok],
        "export, no checkpoint": ["export", "--config", DEMO_CONFIG, "--workdir", empty,
                                  "--out", f"{tmp}/hf", *tok],
        "import, no folder": ["import", "--hf", missing, "--out", f"{tmp}/imp"],
        "average, no checkpoints": ["average", "--workdir", empty, "--last", "2",
                                    "--out", f"{tmp}/avg"],
        "average, bad steps": ["average", "--workdir", empty, "--steps", "3,x",
                               "--out", f"{tmp}/avg"],
        "eval, bad weights": ["eval", "--workdir", empty, "--weights", "mean"],
        "analyze, no tokenizer": ["analyze", "--config", DEMO_CONFIG, "--workdir", empty,
                                   "--text", "나는 학교에 갔다", "--out", f"{tmp}/an", *tok],
        "analyze, no texts": ["analyze", "--config", DEMO_CONFIG, "--workdir", empty,
                              "--texts", missing, "--out", f"{tmp}/an", *tok],
        "finetune, no data": ["finetune", "--config", DEMO_CONFIG, "--task", "classify",
                              "--train", missing, "--init", "none", "--out", f"{tmp}/ft", *tok],
        "inspect, no tokenizer": ["inspect", "나는 학교에 갔다", "--config", DEMO_CONFIG, *tok],
        "knowledge stats, no corpus": ["knowledge", "stats", "--config", DEMO_CONFIG,
                                       "--config.data.corpus=" + missing, *tok],
        "config show, no run": ["config", "show", "--diff", empty],
        "config show, bad override": ["config", "show", "--config.model.hidden_sise=3"],
        "demo, a foreign workdir": ["demo", "--workdir", DEMO_CONFIG],
    }


CASES = sorted(_cases("/tmp/x"))


@pytest.mark.parametrize("case", CASES)
def test_every_user_error_is_one_line(case, tmp_path, capfd):
    argv = _cases(str(tmp_path))[case]
    code = main(argv)
    out, err = capfd.readouterr()
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    assert code == 2, (case, code, err)
    assert len(lines) == 1 and lines[0].startswith("kjax: error: "), (case, err)
    assert "Traceback" not in out, out
