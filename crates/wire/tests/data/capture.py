#!/usr/bin/env python3
"""Captures the golden frames in this directory from the official Python client.

It starts the recording stand-in broker (`cargo run -p strobe-wire --example
record`), drives pulsar-client 3.13.0 through a producer with batching, a
Key_Shared AUTO_SPLIT consumer that acks one message of a batch (batch-index
acks on), and a Key_Shared STICKY consumer, then keeps the first frame of each
kind under a stable name. Run from the repository root:

    .venv/bin/python crates/wire/tests/data/capture.py
"""
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pulsar

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"recorder did not listen on {port}")


def newest(out, seen):
    files = sorted(glob.glob(os.path.join(out, "*.bin")))
    fresh = [f for f in files if f not in seen]
    seen.update(fresh)
    return fresh


def keep(fresh, kind, name, pred=lambda path: True):
    for f in fresh:
        if f.endswith(f"-{kind}.bin") and pred(f):
            shutil.copy(f, os.path.join(HERE, name))
            print(f"kept {os.path.basename(f)} as {name}")
            return
    sys.exit(f"no {kind} frame captured for {name}: {[os.path.basename(f) for f in fresh]}")


def main():
    port = free_port()
    out = tempfile.mkdtemp(prefix="strobe-golden-")
    rec = subprocess.Popen(["cargo", "run", "-q", "-p", "strobe-wire", "--example", "record", "--", str(port), out])
    seen = set()
    try:
        wait_port(port)
        client = pulsar.Client(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=10)
        topic = "persistent://public/default/golden"

        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_messages=3, batching_max_publish_delay_ms=1000
        )
        for i in range(3):
            producer.send_async(f"message-{i}".encode(), None, partition_key="key-0", properties={"i": str(i)})
        producer.flush()
        producer.close()
        fresh = newest(out, seen)
        keep(fresh, "Connect", "connect.bin")
        keep(fresh, "Producer", "producer.bin")
        keep(fresh, "Send", "send-batch.bin")

        auto = client.subscribe(
            topic,
            "golden-auto-split",
            consumer_type=pulsar.ConsumerType.KeyShared,
            key_shared_policy=pulsar.ConsumerKeySharedPolicy(pulsar.KeySharedMode.AutoSplit),
            batch_index_ack_enabled=True,
            receiver_queue_size=10,
        )
        msg = auto.receive(timeout_millis=10000)
        auto.acknowledge(msg)
        time.sleep(0.5)  # the client groups acks for 100 ms
        auto.close()
        fresh = newest(out, seen)
        keep(fresh, "Subscribe", "subscribe-key-shared-auto-split.bin")
        keep(fresh, "Flow", "flow.bin")
        keep(fresh, "Ack", "ack-batch-index.bin")

        sticky = client.subscribe(
            topic,
            "golden-sticky",
            consumer_type=pulsar.ConsumerType.KeyShared,
            key_shared_policy=pulsar.ConsumerKeySharedPolicy(
                pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 16383), (32768, 49151)]
            ),
        )
        sticky.close()
        fresh = newest(out, seen)
        keep(fresh, "Subscribe", "subscribe-key-shared-sticky.bin")
        client.close()
    finally:
        rec.terminate()
        rec.wait()
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
