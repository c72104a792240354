#!/usr/bin/env python3
"""The fault campaign's workload through the official Python client.

    workload.py SERVICE_URL TOPIC HISTORY STOP_FILE

A producer with a fixed name (deduplication spans its reconnects) sends
keyed messages "9:<key>:<seq>" to the partitioned TOPIC, and a Failover and
a Shared consumer acknowledge what they get, while the faults run. Every
operation's outcome goes to HISTORY as JSON lines: {"e": "sent" | "acked" |
"failed" | "stuck", "p": payload} and {"e": "recv", "sub": ..., "p": ...}.
Once STOP_FILE exists the producer stops, waits up to 60 s for its receipts
(what has none is "stuck"), and the consumers drain until nothing has come
for 15 s. The campaign's checker reads the history beside the topic's logs.
"""

import json
import os
import sys
import threading
import time

import pulsar

URL, TOPIC, HISTORY, STOP = sys.argv[1:5]
KEYS = 8
lock = threading.Lock()
out = open(HISTORY, "w", buffering=1)


def record(**event):
    event["t"] = time.time()
    with lock:
        out.write(json.dumps(event) + "\n")


def stopped():
    return os.path.exists(STOP)


# Set once the producer has every receipt (or gave up): quiet from before
# then does not end a consumer, since the producer's last messages may be
# acknowledged, and delivered, only at its wind-down.
producer_done = threading.Event()


client = pulsar.Client(URL, operation_timeout_seconds=30, connection_timeout_ms=5000)


def retried(what, make):
    """make() until it succeeds: the faults start with the workload, and a
    broker killed under the first SUBSCRIBE or PRODUCER times it out (the
    client retries only what it already has). Gives up after 180 s."""
    deadline = time.time() + 180
    while True:
        try:
            return make()
        except Exception as e:
            record(e="error", what=f"{what}: {e}")
            if time.time() > deadline:
                raise
            time.sleep(0.5)


def consume(sub, kind):
    consumer = retried(f"subscribe {sub}", lambda: client.subscribe(
        TOPIC,
        sub,
        consumer_type=kind,
        consumer_name=f"{sub}-0",
        initial_position=pulsar.InitialPosition.Earliest,
    ))
    quiet_since = time.time()
    done_seen = False
    while True:
        try:
            msg = consumer.receive(timeout_millis=500)
        except pulsar.Timeout:
            if producer_done.is_set() and not done_seen:
                done_seen = True
                quiet_since = max(quiet_since, time.time())
            if done_seen and time.time() - quiet_since >= 15:
                break
            continue
        except Exception as e:  # the client reconnects by itself
            record(e="error", sub=sub, what=str(e))
            time.sleep(0.5)
            continue
        quiet_since = time.time()
        record(e="recv", sub=sub, p=msg.data().decode())
        try:
            consumer.acknowledge(msg)
        except Exception:
            pass
    consumer.close()


consumers = [
    threading.Thread(target=consume, args=("py-fo", pulsar.ConsumerType.Failover)),
    threading.Thread(target=consume, args=("py-sh", pulsar.ConsumerType.Shared)),
]
for t in consumers:
    t.start()

producer = retried("create the producer", lambda: client.create_producer(
    TOPIC,
    producer_name="nemesis-py",
    send_timeout_millis=0,
    block_if_queue_full=True,
    max_pending_messages=1000,
))
outstanding = set()


def receipt(payload):
    def done(res, _msg_id):
        with lock:
            outstanding.discard(payload)
        record(e="acked" if res == pulsar.Result.Ok else "failed", p=payload, r=str(res))

    return done


seq = [0] * KEYS
while not stopped():
    for key in range(KEYS):
        payload = f"9:{key}:{seq[key]}"
        with lock:
            outstanding.add(payload)
        try:
            producer.send_async(payload.encode(), receipt(payload), partition_key=f"k{key}")
        except Exception as e:
            with lock:
                outstanding.discard(payload)
            record(e="error", what=str(e))
            time.sleep(0.2)
            break
        record(e="sent", p=payload)
        seq[key] += 1
    time.sleep(0.02)

deadline = time.time() + 60
while time.time() < deadline:
    with lock:
        if not outstanding:
            break
    time.sleep(0.1)
with lock:
    left = sorted(outstanding)
for p in left:
    record(e="stuck", p=p)
producer_done.set()
for t in consumers:
    t.join()
record(e="done", stuck=len(left))
os._exit(0)
