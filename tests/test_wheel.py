"""kjax as users deploy it: the built wheel, installed apart from this checkout,
run from a folder outside the repository on gs:// paths (the GCS emulator of
tests/gcs.py): prepare → train (2 processes, gloo) → SIGTERM → resume → eval
→ export. Every command checks that the kjax it runs is the wheel's."""
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile

import pytest

from conftest import ROOT, built_once, tiny_overrides
from gcs import local_gs_folders
from kjax import paths
from test_gcs import upload_demo_corpus
from test_multiprocess import free_port
import waiting
from waiting import Watched, last_logged, wait_for

TIMEOUT = 300   # seconds per command; a hang fails the test
# Runs kjax's CLI after proving where kjax was imported from (argv[1]).
RUNNER = ("import sys, kjax; assert kjax.__file__.startswith(sys.argv[1]), kjax.__file__; "
          "print('kjax from', kjax.__file__, file=sys.stderr, flush=True); "
          "from kjax.cli import main; sys.exit(main(sys.argv[2:]))")


# What setup.py builds the wheel from; the rest of the checkout is not read.
SOURCES = ("setup.py", "LICENSE", "kjax", "tpu_configs")


def build_wheel(folder) -> str:
    """The wheel, built from a copy of the sources in `folder`: setuptools
    builds in the tree it is given (build/, kjax.egg-info), and two builds in
    one tree at once break each other ('File exists: build/bdist...')."""
    source, out = os.path.join(folder, "source"), os.path.join(folder, "dist")
    os.makedirs(source)
    for name in SOURCES:
        if os.path.isdir(os.path.join(ROOT, name)):
            shutil.copytree(os.path.join(ROOT, name), os.path.join(source, name),
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(os.path.join(ROOT, name), os.path.join(source, name))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "-q", "-w", out, source],
                           capture_output=True, text=True)
    assert built.returncode == 0, f"pip wheel failed:\n{built.stdout}{built.stderr}"
    return the_wheel_in(out)


def the_wheel_in(dist) -> str:
    (name,) = [n for n in os.listdir(dist) if n.endswith(".whl")]
    return os.path.join(dist, name)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    """Built once for the run: the workers' tests share it."""
    return the_wheel_in(built_once(tmp_path_factory, "wheel", build_wheel) / "dist")


@pytest.fixture(scope="module")
def site(wheel, tmp_path_factory):
    """The wheel alone in a folder of its own (its dependencies come from this
    environment: they are not what is under test)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), wheel], check=True, capture_output=True)
    return str(target)


def test_the_wheel_holds_every_module_preset_and_data_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    source = {os.path.relpath(os.path.join(d, f), ROOT).replace(os.sep, "/")
              for d, _, files in os.walk(os.path.join(ROOT, "kjax")) for f in files
              if "__pycache__" not in d and not f.endswith(".pyc")}
    assert source and not source - names, sorted(source - names)  # every module and data file
    packages = {os.path.dirname(n) for n in source if n.endswith(".py")} - {"kjax/knowledge/data"}
    assert {f"{p}/__init__.py" for p in packages} <= names          # kjax.finetune included
    presets = [f for f in os.listdir(os.path.join(ROOT, "tpu_configs")) if f.endswith(".py")]
    assert presets and {f"kjax/tpu_configs/{f}" for f in presets} <= names
    for data in ("hypernyms.tsv", "sense_vectors.tsv", "case_frames.tsv", "README.md"):
        assert f"kjax/knowledge/data/{data}" in names
    # the repository's tooling is the checkout's, not the user's
    assert os.path.isdir(os.path.join(ROOT, "compile_checks"))
    assert not [n for n in names if "compile_checks" in n]


def setuptools_outputs() -> dict:
    """What an in-tree build writes into the checkout, with modification times."""
    build = os.path.join(ROOT, "build")
    tops = [os.path.join(ROOT, "kjax.egg-info"), os.path.join(build, "lib")]
    if os.path.isdir(build):
        tops += [os.path.join(build, d) for d in os.listdir(build) if d.startswith("bdist.")]
    found = {}
    for top in tops:
        for folder, _, files in os.walk(top):
            for f in files:
                path = os.path.join(folder, f)
                found[path] = os.stat(path).st_mtime_ns
    return found


def test_two_wheel_builds_at_once_both_succeed_and_leave_the_checkout_alone(tmp_path):
    before = setuptools_outputs()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        built = list(pool.map(build_wheel, [tmp_path / "a", tmp_path / "b"]))
    assert [zipfile.ZipFile(w).namelist() for w in built[:1]] * 2 == \
        [zipfile.ZipFile(w).namelist() for w in built]
    assert setuptools_outputs() == before   # no build/ or kjax.egg-info written here


def kjax_env(site, tmp, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JAX_PROCESS_ID")}
    return {**env, "PYTHONPATH": site, "JAX_PLATFORMS": "cpu", "KJAX_CACHE_DIR": f"{tmp}/cache",
            "KJAX_LOCAL_LOGS": f"{tmp}/mirror", **extra}   # the run's compilation cache


def start(site, tmp, args, tag, **env) -> Watched:
    return waiting.start([sys.executable, "-c", RUNNER, site, *args], tag,
                         os.path.join(tmp, f"{tag}.log"), cwd=tmp, env=kjax_env(site, tmp, **env))


def stop(started: list[Watched]) -> None:
    for proc in started:   # none outlives the test
        proc.stop()


def finish(started: list[Watched], site, tmp, codes) -> list[str]:
    """Each process's output once all have exited with `codes`; one running
    past TIMEOUT fails the test with every process's last lines."""
    deadline = time.monotonic() + TIMEOUT
    try:
        got = [waiting.finish(p, max(1.0, deadline - time.monotonic()), procs=started)
               for p in started]
    finally:
        stop(started)
    out = [open(p.log).read() for p in started]
    assert got == codes, f"{[p.name for p in started]} exited {got}:\n" + "\n".join(
        o[-3000:] for o in out)
    for o in out:   # the RUNNER's proof: this kjax is the wheel's
        assert f"kjax from {site}/kjax/__init__.py" in o and "Traceback" not in o
    return out


def run(site, tmp, args, tag, code=0, **env) -> str:
    (out,) = finish([start(site, tmp, args, tag, **env)], site, tmp, [code])
    return out


def two(site, tmp, args, tag) -> list:
    port = free_port()
    return [start(site, tmp, args, f"{tag}-{i}", JAX_NUM_CPU_DEVICES="4",
                  JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_NUM_PROCESSES="2",
                  JAX_PROCESS_ID=str(i), JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo")
            for i in range(2)]


def local_files(root: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root)
                  for f in fs)


def last_json(out: str) -> dict:
    return json.loads(out[out.rindex("\n{") + 1:out.rindex("\n}") + 2])


@pytest.mark.slow
def test_wheel_prepare_train_two_processes_kill_resume_eval_export_on_gcs(site, gs_root,
                                                                          tmp_path):
    tmp = str(tmp_path)   # the working folder: outside the repository
    assert not tmp.startswith(ROOT)
    steps = 12
    work, out = f"{gs_root}/runs/two", f"{gs_root}/export"
    config = ["--config", "tpu_configs/demo.py",   # the preset shipped in the wheel
              *tiny_overrides("unused", **{"train.num_steps": steps,
                                           "train.checkpoint_every": 4}),
              f"--config.tokenizer.path={gs_root}/tok/sp", f"--config.data.dir={gs_root}/data",
              f"--config.data.corpus={upload_demo_corpus(gs_root)}"]
    began = time.monotonic()
    run(site, tmp, ["tokenizer", "train", *config], "tokenizer")
    meta = last_json(run(site, tmp, ["prepare", *config], "prepare"))
    assert meta["train_examples"] > 0 and paths.isfile(f"{gs_root}/data/meta.json")

    # Two processes; SIGTERM to process 1 once a step is logged: both save one step.
    procs = two(site, tmp, ["train", *config, "--workdir", work], "cut")

    def step_logged():   # process 0's local mirror of WORKDIR/logs (kjax/train/logdir.py)
        found = [os.path.join(d, "metrics.jsonl") for d, _, f in os.walk(f"{tmp}/mirror")
                 if "metrics.jsonl" in f]
        return bool(found) and any(last_logged(os.path.dirname(m)) for m in found)
    try:
        wait_for("a training step logged", step_logged, timeout=TIMEOUT, procs=procs,
                 saw=lambda: f"local log mirrors: {local_files(f'{tmp}/mirror')}")
    except BaseException:
        stop(procs)
        raise
    procs[1].process.send_signal(signal.SIGTERM)
    logs = finish(procs, site, tmp, [143, 143])
    saved = {int(o.split("after saving step ")[1].split(";")[0]) for o in logs}
    assert len(saved) == 1 and 1 <= min(saved) < steps          # both agreed on the step
    assert paths.isfile(f"{work}/kjax_config.py")                 # recorded at step 1 (gs://)

    # Resume: the same two processes, no --config (the recorded one), to the end.
    logs = finish(two(site, tmp, ["train", "--workdir", work], "resume"), site, tmp, [0, 0])
    assert all(last_json(o)["final_step"] == steps for o in logs)
    assert f"using the config recorded in {work}/kjax_config.py" in logs[0]
    goodput = paths.read_json(f"{work}/logs/goodput.json")
    assert (goodput["sessions"], goodput["restarts"], goodput["last_step"]) == (2, 1, steps)
    assert str(steps) in paths.listdir(f"{work}/checkpoints")
    data_dir = f"{work}/checkpoints/{steps}/data"
    assert {"process_0-of-2.json", "process_1-of-2.json"} <= set(paths.listdir(data_dir))

    result = last_json(run(site, tmp, ["eval", "--workdir", work], "eval",
                           JAX_NUM_CPU_DEVICES="8"))
    assert result["step"] == steps and 0 < result["mlm_loss"] < 10
    run(site, tmp, ["export", "--workdir", work, "--out", out], "export", JAX_NUM_CPU_DEVICES="8")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(paths.listdir(out))
    assert not local_gs_folders(tmp) and not os.path.exists(os.path.join(ROOT, "gs:"))
    print(f"\nwheel on gs://: SIGTERM saved step {min(saved)}, resumed to {steps}, eval MLM "
          f"loss {result['mlm_loss']:.3f}; {time.monotonic() - began:.0f} s in all")
