"""A full disk (issue 48): the broker turns read-only instead of fencing topics or failing
its metadata store for good (the storage's own handling of ENOSPC, below the watermark too,
is tested in crates/ledger/tests/no_space.rs and crates/metadata/tests/no_space.rs). Producers get ProducerBlockedQuotaExceededException within
seconds and no reconnect storm, consumers drain, writes resume by themselves once space is
free, and every acknowledged message is there afterwards, before and after a restart.

The data directory is a 300 MB tmpfs (the journal preallocates 3 x 64 MiB of it): the test
command runs as root; without root this fails, it does not skip."""
import os
import subprocess
import threading
import time

import pulsar
import pytest

from cluster_harness import Cluster
from conftest import StrobeProcess, strobe_binary
from test_admin import call
from util import wait_for

MB = 1 << 20


def mount_tmpfs(size):
    def mount(path):
        if os.geteuid() != 0:
            pytest.fail("test_disk_full mounts a tmpfs: run it as root (the CI test command does)")
        os.makedirs(path, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], check=True)
    return mount


@pytest.fixture
def small_disk(request):
    marker = request.node.get_closest_marker("strobe_config")
    s = StrobeProcess(strobe_binary(), marker.args[0] if marker else "", before_start=mount_tmpfs("300m"))
    yield s
    try:
        s.terminate() if s.alive() else None
    finally:
        subprocess.run(["umount", "-l", s.data_dir], check=False)
        s.stop()


def metrics(s):
    """The strobe_ samples of a broker's /metrics, by name."""
    out = {}
    for line in call(s, "GET", "/metrics")[1].splitlines():
        if line.startswith("strobe_") and " " in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def fill(path):
    """Writes zeros until the file system is full (dd stops at ENOSPC)."""
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M"], capture_output=True)


class Load:
    """Producers and consumers on several topics; what was acknowledged and received, by key."""

    def __init__(self, url, prefix, size, pause):
        self.client = pulsar.Client(url, operation_timeout_seconds=15)
        self.topics = topics = [f"persistent://public/default/{prefix}-{i}" for i in range(4)]
        self.payload = os.urandom(size)
        self.pause = pause
        self.acked = {t: set() for t in topics}
        self.received = {t: set() for t in topics}
        self.errors = {t: [] for t in topics}
        self.last_ok = {t: 0.0 for t in topics}
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        # A subscription that never acknowledges, so that retention keeps every message to check.
        for t in topics:
            self.client.subscribe(t, "audit", initial_position=pulsar.InitialPosition.Earliest).close()
        self.producers = [threading.Thread(target=self.produce, args=(t,)) for t in topics]
        self.consumers = [threading.Thread(target=self.consume, args=(t,)) for t in topics]
        for c in self.consumers:
            c.start()
        for p in self.producers:
            p.start()

    def produce(self, t):
        p = self.client.create_producer(t, batching_enabled=False, send_timeout_millis=15000)
        i = 0
        while not self.stop_producing.is_set():
            key = f"{i}"
            try:
                p.send(self.payload, properties={"k": key})
                self.acked[t].add(key)
                self.last_ok[t] = time.time()
            except Exception as e:  # noqa: BLE001 - the test records whatever the client raises
                self.errors[t].append((time.time(), type(e).__name__))
                time.sleep(0.1)
            i += 1
            time.sleep(self.pause)
        p.close()

    def consume(self, t):
        c = self.client.subscribe(t, "drain", initial_position=pulsar.InitialPosition.Earliest)
        while not self.stop_consuming.is_set():
            try:
                m = c.receive(300)
            except pulsar.Timeout:
                continue
            self.received[t].add(m.properties()["k"])
            c.acknowledge(m)
        c.close()

    def stop(self):
        self.stop_producing.set()
        for p in self.producers:
            p.join(timeout=60)

    def drained(self):
        return all(self.acked[t] <= self.received[t] for t in self.topics)

    def close(self):
        self.stop()
        self.stop_consuming.set()
        for c in self.consumers:
            c.join(timeout=30)
        self.client.close()


def missing_from_audit(url, topic, want):
    """The keys of `want` the audit subscription does not hold (received, not acknowledged):
    read until every one came, or nothing came for 2 s."""
    client = pulsar.Client(url, operation_timeout_seconds=15)
    try:
        consumer = client.subscribe(topic, "audit")
        missing = set(want)
        while missing:
            try:
                missing.discard(consumer.receive(2000).properties()["k"])
            except pulsar.Timeout:
                break
        return missing
    finally:
        client.close()


def check_recovered(s, load):
    """Every acknowledged message reads back, now and after a restart; a new topic takes a producer."""
    for t in load.topics:
        missing = missing_from_audit(s.url, t, load.acked[t])
        assert not missing, f"{t}: {len(missing)} acknowledged messages missing"
    s.restart()
    for t in load.topics:
        missing = missing_from_audit(s.url, t, load.acked[t])
        assert not missing, f"{t} after a restart: {len(missing)} acknowledged messages missing"
    client = pulsar.Client(s.url, operation_timeout_seconds=15)
    try:
        client.create_producer("persistent://public/default/disk-full-after-restart").send(b"x")
    finally:
        client.close()


def resumed(brokers, load, since):
    """Space is free since `since`: the brokers take writes, every producer sends again by
    itself (its client reconnects with its backoff), and the consumers drain once it stops."""
    wait_for("the brokers to take writes",
             lambda: all(metrics(b)["strobe_broker_read_only"] == 0 for b in brokers), timeout=20)
    wait_for("every producer to send again",
             lambda: all(load.last_ok[t] > since for t in load.topics), timeout=70)
    load.stop()
    wait_for("consumers to drain", load.drained, timeout=30)


@pytest.mark.strobe_config("disk_check_interval_ms = 200\n")
def test_a_full_disk_refuses_producers_keeps_consumers_and_recovers_when_space_is_freed(small_disk):
    s = small_disk
    load = Load(s.url, "disk-full", size=4096, pause=0.01)
    topics = load.topics
    try:
        wait_for("every producer to store messages", lambda: all(len(load.acked[t]) >= 20 for t in topics))
        filler = os.path.join(s.data_dir, "filler")
        filled_at = time.time()
        fill(filler)
        # Producers get the error within seconds, as the exception the clients surface.
        wait_for("every producer to get the error", lambda: all(load.errors[t] for t in topics), timeout=10)
        for t in topics:
            first = load.errors[t][0]
            assert first[1] == "ProducerBlockedQuotaExceededException", load.errors[t][:3]
            assert first[0] - filled_at < 8, f"{t}: first error {first[0] - filled_at:.1f} s after the fill"
        status, body = call(s, "GET", "/admin/v2/brokers/health")
        assert status == 503 and "read-only" in body["reason"] and "file descriptors open" in body["reason"], body
        m = metrics(s)
        assert m["strobe_broker_read_only"] == 1 and m["strobe_disk_usage_ratio"] >= 0.95, m
        # No reconnect storm: the clients back off between attempts.
        before = metrics(s)["strobe_broker_read_only_refusals_total"]
        time.sleep(4)
        refused = metrics(s)["strobe_broker_read_only_refusals_total"] - before
        assert refused < 50, f"{refused} producer refusals in 4 s from 4 producers"
        # A new topic's producer is refused with the error too, not left to time out.
        client = pulsar.Client(s.url, operation_timeout_seconds=10)
        try:
            with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
                client.create_producer("persistent://public/default/disk-full-new")
        finally:
            client.close()
        # Consumers drain what was acknowledged.
        wait_for("consumers to drain", load.drained, timeout=20)
        # The fill met writes in flight (ENOSPC), which fenced nothing.
        assert "refuses service" not in s.log_text()
        assert "stops accepting writes" not in s.log_text()
        assert "store failed earlier" not in s.log_text()
        # Space freed: the broker takes writes again and the producers resume by themselves.
        freed_at = time.time()
        os.remove(filler)
        resumed([s], load, freed_at)
        assert call(s, "GET", "/admin/v2/brokers/health") == (200, "ok")
        # The topic refused before is created now, without a restart.
        client = pulsar.Client(s.url, operation_timeout_seconds=15)
        try:
            client.create_producer("persistent://public/default/disk-full-new").send(b"x")
        finally:
            client.close()
    finally:
        load.close()
    check_recovered(s, load)


def test_a_full_shared_store_turns_every_broker_read_only_and_writes_resume(tmp_path):
    # Two cluster brokers on a file:// shared store on a 64 MB tmpfs: each watches it.
    shared = str(tmp_path / "shared")
    mount_tmpfs("64m")(shared)
    cluster = None
    try:
        cluster = Cluster(n=2, ttl=4, storage=f"file://{shared}",
                          config="load_balancer_enabled = false\ndisk_check_interval_ms = 200\n")
        brokers = cluster.brokers
        load = Load(brokers[0].url, "shared-full", size=4096, pause=0.01)
        try:
            wait_for("every producer to store messages", lambda: all(len(load.acked[t]) >= 20 for t in load.topics))
            owners = {cluster.owner(t).id for t in load.topics}
            filler = os.path.join(shared, "filler")
            fill(filler)
            wait_for("every broker to turn read-only",
                     lambda: all(metrics(b)["strobe_broker_read_only"] == 1 for b in brokers), timeout=10)
            wait_for("every producer to get the error", lambda: all(load.errors[t] for t in load.topics), timeout=15)
            assert {e[1] for t in load.topics for e in load.errors[t]} == {"ProducerBlockedQuotaExceededException"}
            wait_for("consumers to drain", load.drained, timeout=20)
            freed_at = time.time()
            os.remove(filler)
            resumed(brokers, load, freed_at)
        finally:
            load.close()
        for t in load.topics:
            missing = missing_from_audit(brokers[0].url, t, load.acked[t])
            assert not missing, f"{t}: {len(missing)} acknowledged messages missing"
        # The topics were spread over both brokers, or the test proved less than it says.
        assert len(owners) == 2, owners
    finally:
        if cluster:
            cluster.stop()
        subprocess.run(["umount", "-l", shared], check=False)
