#!/usr/bin/env python3
"""The pause a bundle move causes, measured with the official Python client:
PIP-307 transfers (the client follows the assigned broker URL) side by side
with plain unloads (the client looks the topic up again), in one run on one
three-broker cluster (private etcd, shared directory).

A producer sends RATE msg/s (no batching) and a consumer receives them; the
bundle is moved MOVES times each way, one move every INTERVAL s. The pause of
a move is the longest gap between consecutive producer receipts (and between
consumer deliveries) in the window from 0.1 s before the move to INTERVAL
after it, minus the normal spacing 1/RATE.

    STROBE_BIN=target/release/strobe .venv/bin/python benches/perf/transfer.py
    MOVES=100 RATE=1000 INTERVAL=0.5 ...
    LOGS=DIR keeps the brokers' logs there (for a timeline of each move).

Needs the cluster build of strobe and etcd (tests/run-all.sh installs both).
"""
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "conformance"))

import pulsar  # noqa: E402
from cluster_harness import Cluster  # noqa: E402

MOVES = int(os.environ.get("MOVES", "100"))
RATE = float(os.environ.get("RATE", "1000"))
INTERVAL = float(os.environ.get("INTERVAL", "0.5"))


def pauses(times, events):
    out = []
    for t in events:
        window = [x for x in times if t - 0.1 <= x <= t + INTERVAL]
        gaps = [b - a for a, b in zip(window, window[1:])]
        out.append(max(0.0, (max(gaps) if gaps else INTERVAL) - 1 / RATE) * 1000)
    return out


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    c = Cluster(n=3, ttl=4)
    try:
        name = f"bench-transfer-{os.getpid()}"
        topic = f"persistent://public/default/{name}"
        urls = "pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in c.brokers)
        client = pulsar.Client(urls, operation_timeout_seconds=30)
        consumer = client.subscribe(topic, "bench", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0,
                                          max_pending_messages=100000)
        _, bundle, _ = c.brokers[0].http("GET", f"/lookup/v2/topic/persistent/public/default/{name}/bundle")
        receipts, deliveries, errors = [], [], []
        stop = threading.Event()

        def send():
            nxt = time.monotonic()
            while not stop.is_set():
                def done(res, _id):
                    if res == pulsar.Result.Ok:
                        receipts.append(time.monotonic())
                    else:
                        errors.append(str(res))
                producer.send_async(b"x" * 100, done)
                nxt += 1 / RATE
                delay = nxt - time.monotonic()
                if delay > 0:
                    time.sleep(delay)

        def receive():
            while not stop.is_set():
                try:
                    m = consumer.receive(timeout_millis=500)
                except pulsar.Timeout:
                    continue
                deliveries.append(time.monotonic())
                consumer.acknowledge(m)

        threads = [threading.Thread(target=send, daemon=True), threading.Thread(target=receive, daemon=True)]
        for t in threads:
            t.start()
        time.sleep(2)
        owner = c.owner(topic)
        events = {"transfer": [], "unload": []}
        for kind in ("transfer", "unload"):
            for i in range(MOVES):
                if kind == "transfer":
                    dst = c.brokers[(c.brokers.index(owner) + 1) % len(c.brokers)]
                    path = f"/admin/v2/namespaces/public/default/{bundle}/unload?destinationBroker={dst.id}"
                    owner = dst
                else:
                    path = f"/admin/v2/namespaces/public/default/{bundle}/unload"
                events[kind].append(time.monotonic())
                status, body, _ = c.brokers[i % 3].http("PUT", path)
                if status != 204:
                    print(f"{kind} {i}: {status} {body}", file=sys.stderr)
                time.sleep(INTERVAL)
            if kind == "transfer":
                owner = c.owner(topic)
        stop.set()
        for t in threads:
            t.join(timeout=10)
        print(f"| move ({MOVES} each, {RATE:.0f} msg/s) | receipt pause p50 / p99 / max ms | delivery pause p50 / p99 / max ms |")
        print("|---|---|---|")
        for kind in ("transfer", "unload"):
            r = pauses(receipts, events[kind])
            d = pauses(deliveries, events[kind])
            print(f"| {kind} | {statistics.median(r):.1f} / {pct(r, 0.99):.1f} / {max(r):.1f} "
                  f"| {statistics.median(d):.1f} / {pct(d, 0.99):.1f} / {max(d):.1f} |")
        print(f"errors reported to the producer: {len(errors)}; receipts {len(receipts)}, deliveries {len(deliveries)}")
        # The sources' own view of each transfer's phases (their log lines).
        phases = {"close_ms": [], "take_ms": []}
        for b in c.brokers:
            for line in b.log_text().splitlines():
                if "bundle transferred" in line and "close_ms=" in line:
                    for k in phases:
                        phases[k].append(int(line.split(f"{k}=")[1].split()[0]))
        for k, v in phases.items():
            if v:
                print(f"source {k}: p50 {statistics.median(v):.0f}, p99 {pct(v, 0.99):.0f}, max {max(v)}")
        client.close()
        if os.environ.get("LOGS"):
            os.makedirs(os.environ["LOGS"], exist_ok=True)
            for b in c.brokers:
                with open(os.path.join(os.environ["LOGS"], f"{b.id}.log"), "w") as f:
                    f.write(b.log_text())
    finally:
        c.stop()


if __name__ == "__main__":
    main()
