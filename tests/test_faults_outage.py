"""Object-store outages (docs/RECOVERY.md): `kjax train --workdir
gs://...` against fake-gcs-server behind a gate (tests/gcs.py) that cuts
every connection and refuses new ones for the outage, while the server keeps
its objects and upload sessions, as Cloud Storage does. The retry limit is
set short (KJAX_STORE_OUTAGE_LIMIT=8 s) so that the test stays cheap; the code
path is the default one (300 s).

One run meets two outages: one shorter than the limit (the run carries on;
with one line when the waiting starts and one when the store is back if
kjax's own requests met it, silently if TensorStore's retries bridged it)
and one longer (one `kjax: error:` line naming the store and the last
complete checkpoint, exit code 75, no traceback from any thread). The same
command run again resumes from that checkpoint and finishes. kjax's own
ride-out and its two lines are also tested in-process, deterministically."""
import json
import os
import subprocess
import sys
import threading
import time

import pytest

import gcs
from conftest import DEMO_CONFIG, ROOT, tiny_overrides
from kjax import paths
from kjax.store_outage import STORE_EXIT
from waiting import Watched, finish, last_logged, start, wait_for

LIMIT = 8           # seconds: KJAX_STORE_OUTAGE_LIMIT for the runs under test
SHORT = 2           # seconds after the run met the short outage: it then ends
CUT_MAX = LIMIT + 4  # seconds: the most the short outage lasts from the cut on
STEPS = 60
EVERY = 5           # steps between checkpoints
EXTRA = {"train.num_steps": STEPS, "train.checkpoint_every": EVERY, "train.log_every": 5}
WAIT = 400          # seconds: the most one run may take here (a hang fails, not blocks)


@pytest.fixture
def store(tmp_path):
    """An emulator of this test's own (the session's one keeps serving the others)."""
    server = gcs.Emulator(f"http://127.0.0.1:{gcs._free_port()}", gated=True)
    yield server
    server.stop()


class Run:
    """`kjax train` in a subprocess talking to `store`; stderr lines timestamped."""

    def __init__(self, store, prepared, tmp_path, work):
        env = {**os.environ, "STORAGE_EMULATOR_HOST": store.url,
               "TENSORSTORE_GCS_HTTP_URL": store.url, "KJAX_STORE_OUTAGE_LIMIT": str(LIMIT),
               "KJAX_LOCAL_LOGS": str(tmp_path / "mirrors"), "PYTHONPATH": ROOT}
        cmd = [sys.executable, "-m", "kjax.cli", "train", "--config", DEMO_CONFIG,
               "--workdir", work, *tiny_overrides(str(prepared), **EXTRA)]
        self.start, self.lines, self.out = time.monotonic(), [], []
        self.process = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, cwd=str(tmp_path))
        self.pumps = [threading.Thread(target=self._read, args=(stream, into), daemon=True)
                      for stream, into in ((self.process.stderr, self.lines),
                                           (self.process.stdout, self.out))]
        for pump in self.pumps:
            pump.start()
        self.watched = Watched("kjax train", self.process,
                               lines=lambda: [line for _, line in self.lines])

    def _read(self, stream, into):
        for line in stream:
            into.append((time.monotonic(), line.rstrip("\n")))

    def wait(self, timeout: float = WAIT, what: str | None = None) -> tuple[int, str, str]:
        finish(self.watched, timeout, what)
        for pump in self.pumps:   # the pipes close with the process: all lines are in
            pump.join()
        return (self.process.returncode, "\n".join(line for _, line in self.out),
                "\n".join(line for _, line in self.lines))

    def saw(self, text: str) -> float | None:
        return next((t for t, line in self.lines if text in line), None)


def logged(tmp_path) -> int:
    """The last step process 0 logged (to its local mirror of WORKDIR/logs,
    logdir.py): the save at a checkpoint step comes right after its row."""
    import glob
    return max((last_logged(os.path.dirname(path)) for path in
                glob.glob(str(tmp_path / "mirrors" / "*" / "metrics.jsonl"))), default=0)


def wait_for_step(run: Run, tmp_path, step: int) -> None:
    wait_for(f"step {step} logged", lambda: logged(tmp_path) >= step, timeout=WAIT,
             saw=lambda: f"steps logged: {logged(tmp_path)}", procs=[run.watched])


def short_outage(store, run: Run, tmp_path) -> None:
    """Cuts the store as the step-10 save begins and opens it again SHORT
    seconds after kjax's own requests met the cut, or CUT_MAX seconds after
    the cut, whichever comes first (the outage's length is what is injected).
    Under load orbax is often still writing the previous save's arrays when
    the cut begins (the next save waits for it): TensorStore meets the outage
    and bridges it with its own retries (2 × LIMIT from the cut), silently,
    while kjax's requests wait behind it. Held open until they met it, such an
    outage was not short for TensorStore: it gave up and ended the run with
    the long outage's line. (kjax's own ride-out, lines included, is tested
    in-process below, where nothing else meets the cut first.)"""
    wait_for_step(run, tmp_path, 10)
    store.stop_serving()
    end = time.monotonic() + CUT_MAX
    met = wait_for("kjax's requests meeting the outage, or its longest length",
                   lambda: run.saw("is unreachable") or time.monotonic() >= end,
                   timeout=CUT_MAX + WAIT, procs=[run.watched])
    if met is not True:   # kjax met it: the store stays away SHORT seconds more
        time.sleep(max(0.0, min(SHORT, end - time.monotonic())))
    store.serve()


def messages(err: str) -> list[str]:
    return [line for line in err.splitlines()
            if line.startswith("kjax:") and "GOOGLE_AUTH_TOKEN" not in line]


@pytest.mark.slow
def test_outages_shorter_and_longer_than_the_limit(store, prepared, tmp_path, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", store.url)   # this process's reads too
    work = f"gs://{gcs.BUCKET}/outage"
    run = Run(store, prepared, tmp_path, work)
    try:
        # 1. Shorter than the limit: the run waits and carries on.
        short_at = time.monotonic()
        short_outage(store, run, tmp_path)
        # 2. Longer: from step 30 on, the store stays away until the run ends.
        wait_for_step(run, tmp_path, 30)
        store.stop_serving()
        down = time.monotonic()
        # bounded: TensorStore's retries (2 × LIMIT) at most, then exit (61 s seen under load)
        code, out, err = run.wait(2 * LIMIT + 90, "the run's exit once the store stayed away")
        stopped_after = time.monotonic() - down
    finally:
        if store.gate.listener is None:
            store.serve()
    said = messages(err)
    assert code == STORE_EXIT, f"rc {code}:\n{err[-3000:]}"
    assert "Traceback" not in err and "Error:" not in err.replace("kjax: error:", ""), err[-3000:]
    # The short outage's two lines when kjax's own requests met it (none when
    # TensorStore's retries bridged it), then the long one's waiting line and error.
    order = [kind for m in said for kind, text in (
        ("waiting", "is unreachable"), ("back", "is reachable again"), ("error", "kjax: error:"))
        if text in m]
    kjax_met_it = order[:2] == ["waiting", "back"]
    assert order == ["waiting", "back"] * kjax_met_it + ["waiting", "error"], (
        order, short_at - run.start, down - run.start,
        [(round(t - run.start, 1), line[:150]) for t, line in run.lines if "train:" not in line])
    (error,) = [m for m in said if m.startswith("kjax: error:")]
    assert error.startswith(f"kjax: error: gs://{gcs.BUCKET} was unreachable for ")
    assert f"KJAX_STORE_OUTAGE_LIMIT={LIMIT} s" in error and "Run the same command" in error
    named = int(error.split("the last complete checkpoint is step ")[1].split(" ")[0])
    assert 10 <= named < 30

    assert "(it resumes from there, or from a later save the store finished" in error
    # 3. The store is back: the same command resumes from the step named, or
    # from the one save after it (one async save at a time) when its last
    # request reached the store before the cut and the store finished it.
    code, out, err = Run(store, prepared, tmp_path, work).wait()
    assert code == 0 and "Traceback" not in err, err[-3000:]
    out = "\n" + out
    assert json.loads(out[out.rindex("\n{") + 1:])["final_step"] == STEPS
    rows = [json.loads(r) for r in paths.read_text(f"{work}/logs/metrics.jsonl").splitlines()]
    firsts = [r["step"] for r in rows if r.get("split") == "train"
              and "compile_and_first_step_time" in r]
    assert firsts in ([1, named + 1], [1, named + EVERY + 1]), (firsts, named)
    assert [r["step"] for r in rows if r.get("split") == "train"] == sorted(
        {r["step"] for r in rows if r.get("split") == "train"})   # each step once
    short = (f"kjax waited {run.saw('is reachable again') - run.saw('is unreachable'):.1f} s"
             if kjax_met_it else "TensorStore's retries bridged it")
    print(f"\nshort outage ridden out ({short}); long outage: exit "
          f"{STORE_EXIT} after "
          f"{stopped_after:.1f} s (limit {LIMIT} s); resumed from step {named}")


def test_kjax_rides_out_a_short_outage_with_one_line_each_way(store, monkeypatch):
    """kjax's own gs:// requests (kjax/store_outage.py) through an outage
    shorter than the limit: a write waits and then lands, with one line when
    the waiting starts and one when the store answers again."""
    from kjax import store_outage
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", store.url)
    monkeypatch.setenv("KJAX_STORE_OUTAGE_LIMIT", str(LIMIT))
    monkeypatch.setattr(store_outage, "OUTAGE", store_outage.Outage())
    said = []
    monkeypatch.setattr(store_outage, "_say", lambda line: said.append((time.monotonic(), line)))
    fs = store_outage.RetryingGCSFileSystem(endpoint_url=store.url, token="anon",
                                            skip_instance_cache=True)
    path = f"{gcs.BUCKET}/short/a.txt"
    fs.pipe(path, b"before")
    store.stop_serving()
    try:
        writer = threading.Thread(target=fs.pipe, args=(path, b"during"), daemon=True)
        writer.start()
        wait_for("kjax's line that the store is unreachable", lambda: bool(said), timeout=60,
                 saw=lambda: f"the write {'waits' if writer.is_alive() else 'ended'}")
        time.sleep(SHORT)   # the outage's length (what is injected): SHORT s after kjax met it
    finally:
        store.serve()
    wait_for("the write to land once the store is back", lambda: not writer.is_alive(),
             timeout=60, saw=lambda: f"kjax said {said}")
    assert fs.cat(path) == b"during"
    lines = [line for _, line in said]
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"kjax: warning: gs://{gcs.BUCKET} is unreachable ("), lines
    assert f"retrying for up to {LIMIT} s (KJAX_STORE_OUTAGE_LIMIT)" in lines[0], lines
    assert lines[1].startswith(f"kjax: gs://{gcs.BUCKET} is reachable again after "), lines
    assert SHORT <= said[1][0] - said[0][0] < LIMIT, said
    assert not store_outage.gave_up()


def test_a_late_answer_to_a_request_sent_before_the_outage_is_not_the_store_back(monkeypatch):
    """Two requests at once: one is in flight when the store goes away (its
    answer, given before the cut, arrives late), the other meets the outage.
    The late answer is no sign that the store is back: counted as one, a long
    outage would print "reachable again" in its middle. The retry that gets
    through once the store answers again is the sign."""
    import asyncio
    import aiohttp
    from kjax import store_outage
    monkeypatch.setenv("KJAX_STORE_OUTAGE_LIMIT", str(LIMIT))
    monkeypatch.setattr(store_outage, "OUTAGE", store_outage.Outage())
    said = []
    monkeypatch.setattr(store_outage, "_say", lambda line: said.append((time.monotonic(), line)))
    came_back = []

    async def scenario():
        sent, late_answer, failed, up = (asyncio.Event() for _ in range(4))

        async def in_flight():   # sent before the cut, its answer arrives late
            sent.set()
            await late_answer.wait()
            return "answered before the cut"

        async def meets_the_outage():
            if not up.is_set():
                failed.set()
                raise aiohttp.ClientConnectionError("Cannot connect to host")
            return "written"

        first = asyncio.create_task(store_outage.ride_out(in_flight, "gs://b"))
        await sent.wait()
        second = asyncio.create_task(store_outage.ride_out(meets_the_outage, "gs://b"))
        await failed.wait()   # ride_out noted it before awaiting its retry: the outage began
        late_answer.set()
        assert await first == "answered before the cut"
        came_back.append(time.monotonic())
        up.set()
        assert await second == "written"
    asyncio.run(scenario())
    lines = [line for _, line in said]
    assert len(lines) == 2 and "gs://b is unreachable" in lines[0], lines
    assert "gs://b is reachable again" in lines[1] and said[1][0] >= came_back[0], said
    assert not store_outage.gave_up()


def test_eval_export_prepare_end_in_one_line_when_the_store_is_away(prepared, tmp_path):
    """The other verbs on a gs:// store that does not answer (a port nobody
    listens on): one `kjax: error:` line naming the store, exit 75, no
    traceback, after KJAX_STORE_OUTAGE_LIMIT (1 s here)."""
    url = f"http://127.0.0.1:{gcs._free_port()}"
    env = {**os.environ, "STORAGE_EMULATOR_HOST": url, "TENSORSTORE_GCS_HTTP_URL": url,
           "KJAX_STORE_OUTAGE_LIMIT": "1", "PYTHONPATH": ROOT}
    work = f"gs://{gcs.BUCKET}/away"
    verbs = {"eval": ["eval", "--workdir", work],
             "export": ["export", "--workdir", work, "--out", str(tmp_path / "out")],
             "prepare": ["prepare", "--config", DEMO_CONFIG,
                         *tiny_overrides(str(prepared), **{"data.dir": f"{work}/examples"})]}
    procs = {verb: start([sys.executable, "-m", "kjax.cli", *argv], f"kjax {verb}",
                         str(tmp_path / f"{verb}.err"), str(tmp_path / f"{verb}.out"), env=env,
                         cwd=str(tmp_path)) for verb, argv in verbs.items()}
    codes = {verb: finish(p, WAIT, procs=list(procs.values())) for verb, p in procs.items()}
    for verb, p in procs.items():
        err = open(p.log).read()
        said = [line for line in err.splitlines() if line.startswith("kjax:")]
        assert codes[verb] == STORE_EXIT, (verb, codes[verb], err[-2000:])
        assert "Traceback" not in err, (verb, err[-2000:])
        (error,) = [line for line in said if line.startswith("kjax: error:")]
        assert error.startswith(f"kjax: error: gs://{gcs.BUCKET} was unreachable for "), error
        assert said[0].startswith(f"kjax: warning: gs://{gcs.BUCKET} is unreachable"), said


@pytest.mark.parametrize("name, value, shown", [
    ("KJAX_STORE_OUTAGE_LIMIT", "5m", ">= 0"), ("KJAX_STORE_OUTAGE_LIMIT", "-1", ">= 0"),
    ("KJAX_PEER_TIMEOUT", "0", "> 0"), ("KJAX_PEER_TIMEOUT", "nan", "> 0")])
def test_a_bad_seconds_variable_is_one_line_naming_it(monkeypatch, name, value, shown):
    from kjax.errors import KjaxError
    from kjax.parallel.watchdog import peer_timeout
    from kjax.store_outage import limit
    read = {"KJAX_STORE_OUTAGE_LIMIT": limit, "KJAX_PEER_TIMEOUT": peer_timeout}[name]
    monkeypatch.setenv(name, " 2.5 ")
    assert read() == 2.5
    monkeypatch.setenv(name, "")
    assert read() == {"KJAX_STORE_OUTAGE_LIMIT": 300.0, "KJAX_PEER_TIMEOUT": 60.0}[name]
    monkeypatch.setenv(name, value)
    with pytest.raises(KjaxError, match=rf"^{name}='{value}' is not a number of seconds {shown} "):
        read()


def test_a_read_prefetched_in_the_background_past_the_limit_logs_no_traceback(
        store, monkeypatch, caplog):
    """gcsfs reads a file through fsspec's background prefetcher, which logs
    each failed fetch with its traceback before raising it again; past the
    limit that failure is kjax's StoreUnreachable, which the command reports
    in one line: the library's log of it is dropped, other errors are not."""
    import logging
    from kjax import store_outage
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", store.url)
    monkeypatch.setenv("KJAX_STORE_OUTAGE_LIMIT", "1")
    monkeypatch.setattr(store_outage, "OUTAGE", store_outage.Outage())
    monkeypatch.setattr(store_outage, "_say", lambda line: None)
    fs = store_outage.RetryingGCSFileSystem(endpoint_url=store.url, token="anon",
                                            skip_instance_cache=True)
    path = f"{gcs.BUCKET}/prefetched/a.bin"
    fs.pipe(path, os.urandom(1 << 20))
    caplog.set_level(logging.DEBUG)
    with fs.open(path, "rb") as f:
        f.read(1000)   # the prefetcher is running
        store.stop_serving()
        try:
            with pytest.raises(store_outage.StoreUnreachable):
                f.seek(600_000)
                f.read(1000)
        finally:
            store.serve()
    fetched = [r for r in caplog.records if r.name.startswith(("fsspec", "gcsfs"))]
    assert fetched, "the read did not go through the libraries' logged paths"
    assert not [r for r in caplog.records if r.exc_info], caplog.text[-3000:]
    try:   # another exception on the same logger still shows
        raise OSError("disk on fire")
    except OSError:
        logging.getLogger("fsspec.prefetcher").exception("Exception raised during fetch.")
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [OSError]
