"""Fixtures for the conformance suite: a real `strobe standalone` process per test
module, on free ports with its own data directory. The binary comes from
$STROBE_BIN (tests/run-all.sh builds it); without it the suite fails, it does
not skip."""
import os
import socket
import subprocess
import tempfile
import time

import pytest


_taken = set()


def free_port():
    """A free port this run has not handed out before (a broker's two ports must differ)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _taken:
            _taken.add(port)
            return port


def strobe_binary():
    binary = os.environ.get("STROBE_BIN")
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail("STROBE_BIN must name the strobe binary (tests/run-all.sh sets it)")
    return binary


def wait_ready(proc, log_text, ready, starts, what, timeout=20):
    """Waits for the (starts+1)th `ready` line of a strobe log and returns the
    (binary, HTTP) ports it names; fails if the process exits first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        lines = [line for line in log_text().splitlines() if ready in line]
        if len(lines) > starts:
            fields = dict(f.split("=", 1) for f in lines[starts].split() if "=" in f)
            return int(fields["addr"].rsplit(":", 1)[1]), int(fields["http"].rsplit(":", 1)[1])
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start: {log_text()}")


class StrobeProcess:
    """A strobe standalone process. `restart()` keeps the data directory and ports."""

    def __init__(self, binary, extra_config="", before_start=None):
        self.binary = binary
        self.dir = tempfile.TemporaryDirectory(prefix="strobe-conformance-")
        self.data_dir = os.path.join(self.dir.name, "data")
        if before_start:
            # E.g. mounts a small file system there (tests/conformance/test_disk_full.py).
            before_start(self.data_dir)
        # 0 until the first start: the broker binds free ports itself and logs
        # them, so no port is picked here that another process could take first.
        self.port = 0
        self.http_port = 0
        self.cfg = os.path.join(self.dir.name, "strobe.toml")
        with open(self.cfg, "w") as f:
            f.write(extra_config)
        self.log_path = os.path.join(self.dir.name, "strobe.log")
        self.log = open(self.log_path, "a")
        self.start()

    READY = "strobe standalone is ready"

    def start(self):
        starts = self.log_text().count(self.READY)
        self.proc = subprocess.Popen(
            [self.binary, "standalone", "--config", self.cfg, "--data-dir", self.data_dir,
             "--broker-port", str(self.port), "--http-port", str(self.http_port),
             "--bind-address", "127.0.0.1", "--advertised-address", "127.0.0.1"],
            stdout=subprocess.DEVNULL, stderr=self.log)
        self.port, self.http_port = wait_ready(self.proc, self.log_text, self.READY, starts, "strobe")

    @property
    def url(self):
        return f"pulsar://127.0.0.1:{self.port}"

    def log_text(self):
        with open(self.log_path) as f:
            return f.read()

    def alive(self):
        return self.proc.poll() is None

    def terminate(self, timeout=15):
        """SIGTERM, and wait: the exit code."""
        self.proc.terminate()
        return self.proc.wait(timeout=timeout)

    def kill9(self):
        self.proc.kill()
        self.proc.wait(timeout=10)

    def restart(self):
        if self.proc.poll() is None:
            self.terminate()
        self.start()

    def stop(self):
        try:
            if self.proc.poll() is None:
                return self.terminate()
            return self.proc.returncode
        finally:
            self.log.close()
            self.dir.cleanup()


@pytest.fixture(scope="module")
def strobe():
    s = StrobeProcess(strobe_binary())
    yield s
    s.stop()


@pytest.fixture
def fresh_strobe(request):
    """A broker of its own for one test; `@pytest.mark.strobe_config("key = value")` adds config."""
    marker = request.node.get_closest_marker("strobe_config")
    s = StrobeProcess(strobe_binary(), marker.args[0] if marker else "")
    yield s
    s.stop()


def pytest_configure(config):
    config.addinivalue_line("markers", "strobe_config(toml): extra config for the fresh_strobe fixture")


_counter = [0]


@pytest.fixture
def topic(request):
    """A topic name unique to the test."""
    _counter[0] += 1
    return f"persistent://public/default/{request.node.name}-{os.getpid()}-{_counter[0]}"


@pytest.fixture
def client(strobe):
    import pulsar
    c = pulsar.Client(strobe.url, operation_timeout_seconds=10)
    yield c
    c.close()
