"""Fault injection, part 2: storage faults, kill -9 and damaged inputs
(docs/RECOVERY.md).

A full disk, a read-only file system or a denied permission is one
`kjax: error:` line naming the path, the last complete step and the fix;
after the fix the same command resumes and ends bit-exactly as an
undisturbed run. Faults are injected at the file layer (an OSError with the
real errno from the write kjax or orbax makes), so the tests run without
root; as root (this CI), a tiny or read-only tmpfs gives the real thing too.
"""
import errno
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

import pytest
from etils import epath

from conftest import DEMO_CONFIG, ROOT, tiny_config, tiny_overrides
from fault_helpers import (EXTRA, checkpoints_of, purged_scalars, same_tree,  # noqa: F401
                           tensorboard_at_each_save, trained)
from kjax.checkpoint import manager
from kjax.cli import main
from kjax.errors import KjaxError
from kjax.pretrain import trainer
from kjax.train import stage_steps
from waiting import Watched, committed, last_logged, progress, run, steps_logged, wait_for

LOCAL_PATH = type(epath.Path("/"))
WAIT = 600   # seconds: the most one `kjax train` here may take (a 2-core CI VM under load)


def can_mount() -> bool:
    """Root with mount rights: the real-device variants run as well."""
    if os.geteuid() != 0:
        return False
    probe = tempfile.mkdtemp(prefix="kjax-mount-probe-")  # one per xdist worker
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", probe],
                        capture_output=True).returncode == 0
    if ok:
        subprocess.run(["umount", probe], check=True)
    os.rmdir(probe)
    return ok


MOUNT = can_mount()


def mount_tmpfs(path: str, options: str) -> None:
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path], check=True)


def unmount(path: str) -> None:
    subprocess.run(["umount", "-l", path], check=True)  # lazy: orbax may still hold a file


def remount(path: str, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", path], check=True)


def failing_probe(monkeypatch, code: int, when=lambda: True):
    """The workdir's write probe fails with `code`, as the file system would."""
    real = LOCAL_PATH.write_text

    def write_text(self, *args, **kwargs):
        if self.name.startswith(".kjax-write-probe") and when():
            raise OSError(code, os.strerror(code), str(self))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(LOCAL_PATH, "write_text", write_text)


def one_error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()
             and not line.startswith(("train:", "goodput "))]
    assert len(lines) == 1 and lines[0].startswith("kjax: error: "), lines
    return lines[0]


def no_compile(monkeypatch):
    def compiled(*args, **kwargs):
        raise AssertionError("compiled before the storage check")
    monkeypatch.setattr(stage_steps, "make_train_step", compiled)   # the trainer's steps
    monkeypatch.setattr(trainer, "init_state", compiled)


@pytest.mark.parametrize("code, says", [
    (errno.EROFS, "the file system is read-only"), (errno.EACCES, "permission denied"),
    (errno.ENOSPC, "no space left on the device")])
def test_unwritable_workdir_is_one_line_before_compiling(prepared, tmp_path, monkeypatch,
                                                        capsys, code, says):
    no_compile(monkeypatch)
    failing_probe(monkeypatch, code)
    workdir = str(tmp_path / "run")
    args = ["train", "--config", DEMO_CONFIG, "--workdir", workdir,
            *tiny_overrides(str(prepared), **EXTRA)]
    assert main(args) == 2
    line = one_error_line(capsys)
    assert f"writing {workdir}/.kjax-write-probe-" in line and says in line
    assert "no checkpoint was completed yet" in line and line.endswith("it starts afresh")
    (tmp_path / "file").write_text("")
    args[4] = str(tmp_path / "file")
    assert main(args) == 2
    assert "is a file, not a directory" in one_error_line(capsys)
    if MOUNT and code == errno.EROFS:  # the real thing: a read-only tmpfs
        monkeypatch.undo()
        no_compile(monkeypatch)
        mount_tmpfs(str(tmp_path / "ro"), "ro,size=1m")
        try:
            args[4] = workdir = str(tmp_path / "ro" / "run")
            assert main(args) == 2
            assert f"writing {workdir} failed: the file system is read-only" in \
                one_error_line(capsys)
        finally:
            unmount(str(tmp_path / "ro"))


def resume_and_compare(trained, workdir, restarts: int = 1):
    """The same command after the fix: resumes from step 3, ends on the
    undisturbed run's exact state, each step logged once."""
    result = trainer.train(trained["config"], workdir, progress=False)
    assert result["final_step"] == 6 and result["goodput"]["restarts"] == restarts
    ckpt = checkpoints_of(workdir)
    assert same_tree(ckpt.restore(6, trained["target"])[0], trained["states"][6])
    ckpt.abandon()
    assert steps_logged(workdir) == list(range(1, 7))


def expect_fault(trained, workdir, says: str):
    with pytest.raises(KjaxError) as error:
        trainer.train(trained["config"], workdir, progress=False)
    message = str(error.value)
    assert "\n" not in message and says in message, message
    assert "the last complete checkpoint is step 3" in message
    assert message.endswith("then run the same command: it resumes from step 3")
    assert committed(f"{workdir}/checkpoints") == [3]


@pytest.mark.slow
def test_disk_full_while_saving_is_one_line_then_the_same_command_resumes(trained, prepared,
                                                                        tmp_path, monkeypatch):
    # Injected: the write of step 6's data item fails with ENOSPC inside orbax's save.
    workdir = str(tmp_path / "injected")
    real, batch = manager.ProcessJsonHandler.save, trained["config"].train.batch_size

    def save(self, directory, args=None):
        step = args.state.result()["iterator"].get("position", 0) // batch
        if step == 6:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory))
        return real(self, directory, args)
    monkeypatch.setattr(manager.ProcessJsonHandler, "save", save)
    expect_fault(trained, workdir, "no space left on the device")
    monkeypatch.undo()
    resume_and_compare(trained, workdir)
    if MOUNT:  # the real thing, from the command line: TensorStore's writes hit a full tmpfs
        workdir = str(tmp_path / "tmpfs")
        mount_tmpfs(workdir, "size=64m")
        try:
            cmd = [sys.executable, "-m", "kjax.cli", "train", "--config", DEMO_CONFIG,
                   "--workdir", workdir, *tiny_overrides(str(prepared), **EXTRA)]
            env = {**os.environ, "PYTHONPATH": ROOT}
            first = run([*cmd, "--stop-at", "3"], WAIT, env=env, cwd=ROOT)
            assert first.returncode == 0, first.stderr[-2000:]
            fill(workdir, leave=256 << 10)  # the disk fills up while step 6 is written
            cli = run(cmd, WAIT, cwd=ROOT, env=env)
            lines = [line for line in cli.stderr.replace("\r", "\n").splitlines()
                     if line.strip() and not line.startswith("train:")]
            assert cli.returncode == 2 and len(lines) == 1, cli.stderr[-3000:]
            assert lines[0].startswith(f"kjax: error: writing {workdir}/checkpoints/6 failed: "
                                       f"no space left on the device")
            assert "the last complete checkpoint is step 3" in lines[0]
            os.remove(os.path.join(workdir, "filler"))  # space freed
            resume_and_compare(trained, workdir, restarts=2)
        finally:
            unmount(workdir)


def fill(path: str, leave: int) -> None:
    st = os.statvfs(path)
    size = st.f_bavail * st.f_frsize - leave
    with open(os.path.join(path, "filler"), "wb") as f:
        for _ in range(size >> 20):
            f.write(b"\0" * (1 << 20))
        f.write(b"\0" * (size & ((1 << 20) - 1)))


@pytest.mark.slow
def test_checkpoints_turning_read_only_is_one_line_then_resumes(trained, tmp_path, monkeypatch):
    real = manager.Checkpointer.save
    broken = {"on": False, "armed": True}

    def save(self, step, *args, **kwargs):
        if step == 6 and broken["armed"]:  # once: the resumed run saves step 6 again
            broken.update(on=True, armed=False)
            if MOUNT and "tmpfs" in self.directory:
                self.wait()  # remounting needs no open files
                remount(self.directory, "ro")
        return real(self, step, *args, **kwargs)
    monkeypatch.setattr(manager.Checkpointer, "save", save)
    failing_probe(monkeypatch, errno.EROFS, when=lambda: broken["on"])
    workdir = str(tmp_path / "injected")
    expect_fault(trained, workdir, "the file system is read-only")
    broken["on"] = False
    resume_and_compare(trained, workdir)
    if MOUNT:
        monkeypatch.undo()
        monkeypatch.setattr(manager.Checkpointer, "save", save)
        broken["armed"] = True
        workdir = str(tmp_path / "tmpfs")
        mount_tmpfs(f"{workdir}/checkpoints", "size=64m")
        try:
            expect_fault(trained, workdir, "the file system is read-only")
            remount(f"{workdir}/checkpoints", "rw")
            monkeypatch.undo()
            resume_and_compare(trained, workdir)
        finally:
            unmount(f"{workdir}/checkpoints")


def stopped_past_a_checkpoint(proc: Watched, workdir: str, newer_than: int):
    """The event a kill -9 between checkpoints needs: a checkpoint newer than
    `newer_than` committed and a step logged after it. Checked again with the
    process stopped (SIGSTOP), so what was seen is what the kill leaves:
    (newest committed, last logged), or None (the process runs on)."""
    def seen():
        steps = committed(f"{workdir}/checkpoints")
        return (steps[-1] if steps else 0), last_logged(workdir)
    newest, logged = seen()
    if newest <= newer_than or logged <= newest:
        return None
    proc.process.send_signal(signal.SIGSTOP)
    newest, logged = seen()
    if newest > newer_than and logged > newest:
        return newest, logged
    proc.process.send_signal(signal.SIGCONT)
    return None


@pytest.mark.slow
def test_each_step_is_logged_once_after_repeated_kill_9(prepared, tmp_path):
    """kill -9 twice between checkpoints, then a run to the end: metrics.jsonl
    and TensorBoard hold steps 1..N once each (they held repeats before). Each
    kill comes once a newer checkpoint is committed and steps were logged
    after it (the rows a resume must drop), whatever the machine's speed."""
    steps, workdir = 40, str(tmp_path / "run")
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "8"}
    cmd = [sys.executable, "-m", "kjax.cli", "train", "--config", DEMO_CONFIG, "--workdir",
           workdir, *tiny_overrides(str(prepared), **{"train.num_steps": steps,
                                                     "train.checkpoint_every": 5})]
    newest = 0
    for kill in (1, 2):
        log = str(tmp_path / f"session-{kill}.log")
        with open(log, "w") as out:
            proc = Watched(f"kjax train (session {kill})", subprocess.Popen(
                cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT), log)
        try:
            newest, logged = wait_for(
                f"a checkpoint newer than step {newest} and a step logged after it",
                lambda: stopped_past_a_checkpoint(proc, workdir, newest), timeout=WAIT,
                saw=lambda: progress(workdir), procs=[proc])
        finally:
            proc.stop()   # SIGKILL (stopped or not)
        assert committed(f"{workdir}/checkpoints")[-1] == newest < logged == last_logged(workdir)
    done = run(cmd, WAIT, "kjax train (to the end)", env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert steps_logged(workdir) == list(range(1, steps + 1))
    assert purged_scalars(f"{workdir}/tensorboard", "train/loss") == list(range(1, steps + 1))
    assert json.load(open(f"{workdir}/goodput.json"))["restarts"] == 2


def test_the_steps_a_checkpoint_covers_are_in_tensorboard_before_it_is_saved(
        prepared, tmp_path, monkeypatch):
    """A run resumed from a checkpoint never logs the steps before it again, so
    they must be in the event files, not in the writer's memory, before the
    save: kill -9 after it lost them (steps 1-5 gone, once in ten under load)."""
    workdir = str(tmp_path / "run")
    seen = tensorboard_at_each_save(monkeypatch, f"{workdir}/tensorboard")
    trainer.train(tiny_config(prepared), workdir, progress=False)   # saves at 3 and 6
    assert seen == {3: [1, 2, 3], 6: [1, 2, 3, 4, 5, 6]}


# ---- damaged inputs ------------------------------------------------------------

def damaged_corpus(tmp_path) -> tuple[str, str]:
    from kjax.text.corpus import demo_corpus_files
    text = open(demo_corpus_files()[0], encoding="utf-8").read()
    packed = gzip.compress(text.encode())
    truncated, plain = tmp_path / "cut.txt.gz", tmp_path / "plain.txt.gz"
    truncated.write_bytes(packed[: len(packed) // 2])
    plain.write_text(text[:300], encoding="utf-8")
    return str(truncated), str(plain)


def test_damaged_gz_corpora_are_skipped_and_named_or_refused(prepared, tmp_path):
    """Beside good files, a truncated .gz and a plain file named .gz are read up
    to the damage, counted and named by `tokenizer train` and `prepare`; with
    nothing good left, one line names them."""
    from kjax.pretrain.prepare import prepare
    from kjax.tokens.factory import train_tokenizer
    truncated, plain = damaged_corpus(tmp_path)
    config = tiny_config(prepared, **{"data.corpus": f"konlpy,{truncated},{plain}",
                                      "tokenizer.path": f"{tmp_path}/tok/sp",
                                      "data.dir": f"{tmp_path}/examples"})
    _, stats = train_tokenizer(config)
    assert stats.skipped["damaged .gz (rest of file)"] == 2
    summary = stats.summary()
    assert f"{truncated}: truncated gzip stream after line " in summary
    assert f"{plain}: not gzip data (a plain file named .gz? rename it) from its first " \
           f"byte" in summary
    meta = prepare(config, progress=False)
    assert meta["skipped_lines"]["damaged .gz (rest of file)"] == 2
    assert truncated in meta["corpus"] and plain in meta["corpus"] and meta["train_examples"] > 0
    alone = {"data.corpus": plain, "data.dir": f"{tmp_path}/examples2"}
    for run, tokenizer in ((train_tokenizer, "tok2"), (prepare, "tok")):
        with pytest.raises(KjaxError, match=rf"data.corpus: no usable sentence was read; "
                                            rf"damaged files: {re.escape(plain)}: not gzip"):
            run(tiny_config(prepared, **alone, **{"tokenizer.path": f"{tmp_path}/{tokenizer}/sp"}))


@pytest.mark.parametrize("content, where", [
    ("# ok\n일가_02/NNG\t가족\n칫솔/NNG\t도\x00구\n", r":3: NUL byte at column 9"),
    ("# comment with \x00\n일가_02/NNG\t가족\n", r":1: NUL byte at column 16"),
    ("일가_02/NNG\t가족\n\ufeff칫솔/NNG\t도구\n", r":2: byte-order mark \(U\+FEFF\) at column 1"),
    ("\ufeff일가_02/NNG\t가족\n# a\ufeff in a comment\n", r":2: byte-order mark .* column 4")])
def test_nul_bytes_and_mid_file_boms_in_knowledge_files_name_file_and_line(tmp_path, content,
                                                                          where):
    from kjax.knowledge import ResourceError, load_hypernyms
    path = tmp_path / "h.tsv"
    path.write_bytes(content.encode("utf-8"))
    with pytest.raises(ResourceError, match=rf"^{re.escape(str(path))}{where}"):
        load_hypernyms(str(path))
    path.write_bytes("\ufeff일가_02/NNG\t가족\n".encode("utf-8"))  # a leading BOM is fine
    assert len(load_hypernyms(str(path))) == 1
