"""A private cluster for tests: one etcd, one shared store, N `strobe broker`
processes on loopback ports. Needs the cluster build of strobe ($STROBE_BIN,
built with `--features cluster` by tests/run-all.sh) and etcd (Debian's
etcd-server); without either the tests fail, they do not skip."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pulsar
import pytest

from conftest import free_port, strobe_binary, wait_ready


def etcd_binary():
    found = shutil.which("etcd") or ("/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None)
    if not found:
        pytest.fail("etcd is not installed (tests/run-all.sh installs Debian's etcd-server)")
    return found


class Etcd:
    def __init__(self, root, data_dir=None):
        self.port, peer = free_port(), free_port()
        self.log = open(os.path.join(root, "etcd.log"), "a")
        self.proc = subprocess.Popen(
            [etcd_binary(), "--name", "strobe-cluster-test", "--data-dir", data_dir or os.path.join(root, "etcd"),
             "--listen-client-urls", f"http://127.0.0.1:{self.port}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.port}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"strobe-cluster-test=http://127.0.0.1:{peer}"],
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
        raise RuntimeError("etcd did not start")

    @property
    def url(self):
        return f"etcd:http://127.0.0.1:{self.port}"

    def stop(self):
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.log.close()


class Broker:
    READY = "strobe broker is ready"

    def __init__(self, cluster, index):
        self.cluster = cluster
        self.index = index
        self.id = f"broker-{index}"
        self.dir = os.path.join(cluster.root, self.id)
        os.makedirs(self.dir, exist_ok=True)
        self.log_path = os.path.join(self.dir, "strobe.log")
        self.port = 0
        self.http_port = 0
        self.start()

    def start(self):
        starts = self.log_text().count(self.READY)
        log = open(self.log_path, "a")
        args = [strobe_binary(), "broker", "--metadata-store", self.cluster.etcd.url,
                "--storage", self.cluster.storage, "--broker-id", self.id,
                "--cluster-name", "test-cluster", "--data-dir", os.path.join(self.dir, "data"),
                "--broker-port", str(self.port), "--http-port", str(self.http_port),
                "--bind-address", "127.0.0.1", "--advertised-address", "127.0.0.1",
                "--metadata-session-timeout-secs", str(self.cluster.ttl)]
        config = self.cluster.config + self.cluster.broker_config.get(self.index, "")
        if config:
            cfg = os.path.join(self.dir, "strobe.toml")
            with open(cfg, "w") as f:
                f.write(config)
            args += ["--config", cfg]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, env=self.cluster.env)
        log.close()
        self.port, self.http_port = wait_ready(self.proc, self.log_text, self.READY, starts, self.id, timeout=30)

    @property
    def url(self):
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def http_url(self):
        return f"http://127.0.0.1:{self.http_port}"

    def log_text(self):
        try:
            with open(self.log_path) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def alive(self):
        return self.proc.poll() is None

    def kill9(self):
        self.proc.kill()
        self.proc.wait(timeout=10)

    def stop_signal(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def cont_signal(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def terminate(self, timeout=30):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def http(self, method, path, body=None, follow=True):
        """(status, parsed JSON or text, headers)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.http_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        opener = urllib.request.build_opener() if follow else urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(req, timeout=30) as r:
                return r.status, _parse(r.read()), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, _parse(e.read()), dict(e.headers)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def _parse(raw):
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


class Cluster:
    """etcd + a shared store + `n` brokers. `storage` defaults to a shared
    directory (file://); pass an s3:// URL and `env` for an S3 server.
    `etcd_dir` puts etcd's data elsewhere (a benchmark's etcd on its own disk)."""

    def __init__(self, n=3, ttl=4, storage=None, env=None, config="", broker_config=None, etcd_dir=None):
        self.tmp = tempfile.TemporaryDirectory(prefix="strobe-cluster-")
        self.root = self.tmp.name
        self.ttl = ttl
        self.config = config
        # Extra configuration of broker i (appended to `config`).
        self.broker_config = broker_config or {}
        self.env = dict(os.environ, **(env or {}))
        self.env.setdefault("STROBE_LOG", "info")
        self.storage = storage or f"file://{os.path.join(self.root, 'shared')}"
        if self.storage.startswith("file://"):
            os.makedirs(self.storage[len("file://"):], exist_ok=True)
        self.etcd = Etcd(self.root, etcd_dir)
        self.brokers = []
        try:
            for i in range(n):
                self.brokers.append(Broker(self, i))
        except Exception:
            self.stop()
            raise

    def live(self):
        return [b for b in self.brokers if b.alive()]

    def add_broker(self):
        """Starts one more broker (it joins the running cluster)."""
        b = Broker(self, len(self.brokers))
        self.brokers.append(b)
        return b

    def broker_by_url(self, url):
        for b in self.brokers:
            if b.url == url:
                return b
        raise KeyError(url)

    def lookup(self, topic, via=None):
        """The brokerUrl an HTTP lookup answers for `topic`, asked of `via` (default: the first live broker)."""
        via = via or self.live()[0]
        rest = topic.replace("://", "/")
        status, body, _ = via.http("GET", f"/lookup/v2/topic/{rest}")
        assert status == 200, (status, body)
        return body["brokerUrl"]

    def owner(self, topic, timeout=30, among=None):
        """The broker that owns `topic`, asked of every live broker (or of `among`) until they agree."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            answers = set()
            for b in among or self.live():
                try:
                    answers.add(self.lookup(topic, via=b))
                except (AssertionError, OSError):
                    answers.add(None)
            if len(answers) == 1 and None not in answers:
                url = answers.pop()
                b = self.broker_by_url(url)
                if b.alive():
                    return b
            time.sleep(0.2)
        raise AssertionError(f"the brokers never agreed on the owner of {topic}")

    def logs(self):
        return "\n".join(f"--- {b.id}\n{b.log_text()[-6000:]}" for b in self.brokers)

    def stop(self):
        for b in self.brokers:
            try:
                b.terminate()
            except Exception:
                pass
        self.etcd.stop()
        self.tmp.cleanup()


def drain(consumer, idle_ms=3000):
    """Receives and acknowledges until nothing comes for idle_ms; the payloads."""
    out = []
    while True:
        try:
            m = consumer.receive(timeout_millis=idle_ms)
        except pulsar.Timeout:
            return out
        out.append(m.data().decode())
        consumer.acknowledge(m)


class Traffic:
    """Producers sending continuously (send_async, a pause of `pause` s
    after every `burst` rounds over all of them) and consumers acknowledging
    what they receive, each in its own thread. Payloads are unique
    ("<producer index>-<round>"); `finish()` stops, flushes, drains and
    returns the acknowledged payloads no consumer received."""

    def __init__(self, producers, consumers, burst=1, pause=0.01):
        self.producers, self.consumers = producers, consumers
        self.burst, self.pause = burst, pause
        self.acked, self.failed, self.received = set(), [], set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._send, daemon=True)] + \
            [threading.Thread(target=self._receive, args=(c,), daemon=True) for c in consumers]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def _send(self):
        i = 0
        while not self.stopping.is_set():
            for n, p in enumerate(self.producers):
                payload = f"{n}-{i}"

                def done(res, _id, payload=payload):
                    with self.lock:
                        if res == pulsar.Result.Ok:
                            self.acked.add(payload)
                        else:
                            self.failed.append((payload, str(res)))
                p.send_async(payload.encode(), done)
            i += 1
            if i % self.burst == 0:
                time.sleep(self.pause)

    def _receive(self, consumer):
        while not self.stopping.is_set():
            try:
                m = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                continue
            with self.lock:
                self.received.add(m.data().decode())
            consumer.acknowledge(m)

    def finish(self):
        self.stopping.set()
        self.threads[0].join()
        for p in self.producers:
            p.flush()
        for t in self.threads[1:]:
            t.join(timeout=10)
        for c in self.consumers:
            self.received.update(drain(c, idle_ms=2000))
        with self.lock:
            return sorted(self.acked - self.received)
