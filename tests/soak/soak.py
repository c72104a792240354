"""A soak of `strobe standalone` with the official Python client.

1,000 topics; for SOAK_SECS (default 600) worker threads churn connections (a new
client, a producer that sends a few messages, a Shared consumer that takes what is there,
a reader from the start, a Key_Shared consumer joining and leaving, all closed
again). Before and after, with no client connected, it reads the broker's
/metrics (resident memory, open files, live runtime tasks) and compares:

- resident memory back within 10% of its level after the warm-up,
- open files and live tasks back to their level after the warm-up (a small slack
  for the broker's own timers),
- no ERROR line in the broker's log,
- every acknowledged message accounted for: each send the broker confirmed is
  read back from its topic by a reader from the earliest position.

    STROBE_BIN=target/release/strobe .venv/bin/python tests/soak/soak.py
    SOAK_SECS=60 TOPICS=200 WORKERS=4 WARMUP_SECS=20 ...  (a shorter run)

Exits non-zero, saying why, when a check fails; prints the figures as JSON."""
import json
import os
import random
import sys
import threading
import time
import urllib.request

import pulsar
from pulsar import ConsumerType

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "conformance"))
from conftest import StrobeProcess, strobe_binary  # noqa: E402

SOAK_SECS = int(os.environ.get("SOAK_SECS", "600"))
TOPICS = int(os.environ.get("TOPICS", "1000"))
WORKERS = int(os.environ.get("WORKERS", "6"))
SETTLE_SECS = 10
KEY_SHARED_TOPICS = min(20, TOPICS)
DRAIN_MAX = 200
WARMUP_SECS = int(os.environ.get("WARMUP_SECS", str(min(180, SOAK_SECS // 3))))
# The C++ client's INFO lines (several per connection) would dwarf the figures.
LOGGER = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)


def metrics(strobe):
    with urllib.request.urlopen(f"http://127.0.0.1:{strobe.http_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        for name in ("process_resident_memory_bytes", "process_open_fds", "strobe_runtime_alive_tasks"):
            if line.startswith(name + " "):
                out[name] = float(line.split()[1])
    threads = len(os.listdir(f"/proc/{strobe.proc.pid}/task"))
    out["threads"] = threads
    return out


def settled(strobe):
    """Metrics once no client is connected and the broker had time to let go."""
    time.sleep(SETTLE_SECS)
    samples = []
    for _ in range(3):
        samples.append(metrics(strobe))
        time.sleep(1)
    return {k: min(s[k] for s in samples) for k in samples[0]}


class Ledger:
    """What the broker acknowledged, per topic."""

    def __init__(self):
        self.lock = threading.Lock()
        self.acked = {}
        self.counts = {"sends": 0, "received": 0, "readers": 0, "key_shared": 0, "clients": 0}
        self.errors = []

    def add(self, topic, payload):
        with self.lock:
            self.acked.setdefault(topic, set()).add(payload)
            self.counts["sends"] += 1

    def count(self, what, n=1):
        with self.lock:
            self.counts[what] += n


def topic_name(i):
    return f"persistent://public/default/soak-{i}"


def churn(strobe, ledger, worker, stop):
    rnd = random.Random(worker)
    seq = 0
    while not stop.is_set():
        client = pulsar.Client(strobe.url, operation_timeout_seconds=30, logger=LOGGER)
        ledger.count("clients")
        try:
            topic = topic_name(rnd.randrange(TOPICS))
            producer = client.create_producer(topic, batching_enabled=rnd.random() < 0.5)
            for _ in range(rnd.randint(1, 20)):
                seq += 1
                payload = f"{worker}-{seq}".encode()
                producer.send(payload, partition_key=f"k{seq % 7}")
                ledger.add(topic, payload)
            producer.close()
            # The consumer takes what is there (and what other workers left), so the
            # backlog stays small: what grows then is not per-message state.
            consumer = client.subscribe(topic, "soak", consumer_type=ConsumerType.Shared)
            for _ in range(DRAIN_MAX):
                try:
                    msg = consumer.receive(200)
                except pulsar.Timeout:
                    break
                consumer.acknowledge(msg)
                ledger.count("received")
            consumer.close()
            if rnd.random() < 0.3:
                reader = client.create_reader(topic, pulsar.MessageId.earliest)
                for _ in range(5):
                    try:
                        reader.read_next(200)
                    except pulsar.Timeout:
                        break
                reader.close()
                ledger.count("readers")
            if rnd.random() < 0.3:
                ks = client.subscribe(topic_name(rnd.randrange(KEY_SHARED_TOPICS)), "soak-ks",
                                      consumer_type=ConsumerType.KeyShared)
                for _ in range(rnd.randint(0, 10)):
                    try:
                        ks.acknowledge(ks.receive(200))
                    except pulsar.Timeout:
                        break
                ks.close()
                ledger.count("key_shared")
        except Exception as e:  # recorded, and the run fails at the end
            ledger.errors.append(f"worker {worker}: {e!r}")
            if len(ledger.errors) > 20:
                stop.set()
        finally:
            client.close()


def warm_up(strobe, ledger):
    """Loads every topic once (a message each) and creates the durable subscriptions the
    churn uses, so that memory and tasks after the warm-up include every long-lived
    object: what grows after that is state the churn leaves behind, or a leak."""
    client = pulsar.Client(strobe.url, operation_timeout_seconds=30, logger=LOGGER)
    try:
        for i in range(TOPICS):
            p = client.create_producer(topic_name(i))
            payload = f"warm-{i}".encode()
            p.send(payload)
            ledger.add(topic_name(i), payload)
            p.close()
            client.subscribe(topic_name(i), "soak", consumer_type=ConsumerType.Shared).close()
            if i < KEY_SHARED_TOPICS:
                client.subscribe(topic_name(i), "soak-ks", consumer_type=ConsumerType.KeyShared).close()
    finally:
        client.close()


def account(strobe, ledger):
    """Reads every topic from the start: every acknowledged payload must be there."""
    missing = {}
    client = pulsar.Client(strobe.url, operation_timeout_seconds=30, logger=LOGGER)
    try:
        for topic, payloads in ledger.acked.items():
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            seen = set()
            # Stops as soon as everything is found; waits 2 s for a missing one.
            while not payloads <= seen:
                try:
                    seen.add(reader.read_next(2000).data())
                except pulsar.Timeout:
                    break
            reader.close()
            lost = payloads - seen
            if lost:
                missing[topic] = sorted(x.decode() for x in lost)[:5]
    finally:
        client.close()
    return missing


def main():
    strobe = StrobeProcess(strobe_binary())
    ledger = Ledger()
    failures = []
    try:
        t0 = time.time()
        warm_up(strobe, ledger)
        # A churn round long enough for the working set (and the allocator's arenas) to
        # reach their level under this load: RSS climbs for about 100 s and then holds.
        stop = threading.Event()
        threads = [threading.Thread(target=churn, args=(strobe, ledger, w, stop)) for w in range(WORKERS)]
        for t in threads:
            t.start()
        time.sleep(WARMUP_SECS)
        stop.set()
        for t in threads:
            t.join()
        before = settled(strobe)
        warm_secs = time.time() - t0
        print(f"after warm-up ({warm_secs:.0f} s): {json.dumps(before)}", flush=True)

        stop = threading.Event()
        threads = [threading.Thread(target=churn, args=(strobe, ledger, 100 + w, stop)) for w in range(WORKERS)]
        for t in threads:
            t.start()
        t1 = time.time()
        peak = dict(before)
        while time.time() - t1 < SOAK_SECS and not stop.is_set():
            time.sleep(15)
            m = metrics(strobe)
            peak = {k: max(peak[k], m[k]) for k in peak}
            print(f"{time.time() - t1:5.0f} s: {json.dumps(m)} {json.dumps(ledger.counts)}", flush=True)
        stop.set()
        for t in threads:
            t.join()
        after = settled(strobe)
        print(f"after the soak: {json.dumps(after)}", flush=True)
        missing = account(strobe, ledger)

        rss0, rss1 = before["process_resident_memory_bytes"], after["process_resident_memory_bytes"]
        if rss1 > rss0 * 1.10:
            failures.append(f"resident memory {rss0 / 1e6:.1f} MB -> {rss1 / 1e6:.1f} MB (> +10%)")
        if after["process_open_fds"] > before["process_open_fds"] + 2:
            failures.append(f"open files {before['process_open_fds']:.0f} -> {after['process_open_fds']:.0f}")
        if after["strobe_runtime_alive_tasks"] > before["strobe_runtime_alive_tasks"] + 5:
            failures.append(
                f"live tasks {before['strobe_runtime_alive_tasks']:.0f} -> {after['strobe_runtime_alive_tasks']:.0f}")
        errors = [line for line in strobe.log_text().splitlines() if " ERROR " in line]
        if errors:
            failures.append(f"{len(errors)} ERROR lines in the broker's log, e.g. {errors[0]}")
        if ledger.errors:
            failures.append(f"{len(ledger.errors)} client errors, e.g. {ledger.errors[0]}")
        if missing:
            failures.append(f"acknowledged messages missing in {len(missing)} topics: {missing}")
        print(json.dumps({
            "soak_secs": SOAK_SECS, "topics": TOPICS, "workers": WORKERS,
            "counts": ledger.counts, "after_warm_up": before, "peak": peak, "after": after,
            "rss_change_pct": round(100 * (rss1 - rss0) / rss0, 1),
            "acknowledged": sum(len(v) for v in ledger.acked.values()), "missing_topics": len(missing),
        }, indent=1))
    finally:
        code = strobe.stop()
    if failures:
        print("SOAK FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        sys.exit(1)
    print(f"soak passed (broker exit code {code})")


if __name__ == "__main__":
    main()
