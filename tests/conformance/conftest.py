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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StrobeProcess:
    def __init__(self, binary, extra_config=""):
        self.dir = tempfile.TemporaryDirectory(prefix="strobe-conformance-")
        self.port = free_port()
        self.http_port = free_port()
        cfg = os.path.join(self.dir.name, "strobe.toml")
        with open(cfg, "w") as f:
            f.write(extra_config)
        self.log_path = os.path.join(self.dir.name, "strobe.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [binary, "standalone", "--config", cfg, "--data-dir", os.path.join(self.dir.name, "data"),
             "--broker-port", str(self.port), "--http-port", str(self.http_port),
             "--bind-address", "127.0.0.1", "--advertised-address", "127.0.0.1"],
            stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        raise RuntimeError(f"strobe did not start: {self.log_text()}")

    @property
    def url(self):
        return f"pulsar://127.0.0.1:{self.port}"

    def log_text(self):
        with open(self.log_path) as f:
            return f.read()

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=15)
        finally:
            self.log.close()
            self.dir.cleanup()


@pytest.fixture(scope="module")
def strobe():
    binary = os.environ.get("STROBE_BIN")
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail("STROBE_BIN must name the strobe binary (tests/run-all.sh sets it)")
    s = StrobeProcess(binary)
    yield s
    s.stop()
