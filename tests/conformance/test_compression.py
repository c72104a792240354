"""Pulsar's four codecs (LZ4, ZLIB, ZSTD, SNAPPY) with the official client: the
broker passes compressed batches through Key_Shared unchanged, and compaction
looks inside them, re-batching what it keeps in the batch's own codec."""
import threading
import time

import pulsar
import pytest
from pulsar import ConsumerType

from test_compaction import compact, read_all

CODECS = {
    "lz4": pulsar.CompressionType.LZ4,
    "zlib": pulsar.CompressionType.ZLib,
    "zstd": pulsar.CompressionType.ZSTD,
    "snappy": pulsar.CompressionType.SNAPPY,
}


def value(key, n):
    # Long and repetitive enough that every codec really compresses it.
    return f"{key}-{n}-".encode() * 20


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_compaction_looks_inside_compressed_batches(strobe, client, codec):
    local = f"compression-compaction-{codec}"
    topic = f"persistent://public/default/{local}"
    client.subscribe(topic, "holder").close()
    batched = client.create_producer(topic, compression_type=CODECS[codec], batching_enabled=True,
                                     batching_max_messages=10, batching_max_publish_delay_ms=50)
    plain = client.create_producer(topic, compression_type=CODECS[codec], batching_enabled=False)
    # One compressed batch: a (kept), c (replaced later), d (deleted later), so
    # compaction must re-batch it with `a` alone, compressed again.
    for key in ["a", "c", "d"]:
        batched.send_async(value(key, 1), None, partition_key=key)
    batched.flush()
    plain.send(value("b", 1), partition_key="b")
    plain.send(value("c", 2), partition_key="c")
    plain.send(None, partition_key="d")   # tombstone
    plain.send(b"", partition_key="b")    # an empty value, compressed, deletes too
    # A second batch whose messages all survive: kept byte for byte.
    for key in ["e", "f"]:
        batched.send_async(value(key, 1), None, partition_key=key)
    batched.flush()
    compact(strobe, local)
    got = read_all(client, topic)
    assert sorted(got) == [("a", value("a", 1)), ("c", value("c", 2)),
                           ("e", value("e", 1)), ("f", value("f", 1))], got
    # Nothing is lost without read_compacted. (The C++ client cannot inflate its own
    # ZLIB-compressed empty values, "Failed to decompress zlib buffer: -2 ...
    # uncompressed size: 0", and discards those two; the broker keeps them.)
    expected = 7 if codec == "zlib" else 9
    assert len(read_all(client, topic, compacted=False)) == expected
    batched.close()
    plain.close()


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_key_shared_delivers_compressed_batches_in_key_order(strobe, client, codec):
    topic = f"persistent://public/default/compression-key-shared-{codec}"
    received = {}
    lock = threading.Lock()

    def listener(name):
        def on_message(consumer, msg):
            with lock:
                received.setdefault(name, []).append((msg.partition_key(), msg.data()))
            consumer.acknowledge(msg)
        return on_message

    consumers = [client.subscribe(topic, "ks", consumer_type=ConsumerType.KeyShared,
                                  consumer_name=f"c{i}", message_listener=listener(f"c{i}"))
                 for i in range(2)]
    producer = client.create_producer(topic, compression_type=CODECS[codec],
                                      batching_enabled=True,
                                      batching_type=pulsar.BatchingType.KeyBased,
                                      batching_max_messages=20, batching_max_publish_delay_ms=10)
    keys = [f"k{i}" for i in range(10)]
    for n in range(30):
        for key in keys:
            producer.send_async(value(key, n), None, partition_key=key)
    producer.flush()
    deadline = time.time() + 20
    while time.time() < deadline:
        with lock:
            if sum(len(v) for v in received.values()) >= 300:
                break
        time.sleep(0.05)
    with lock:
        total = sum(len(v) for v in received.values())
        assert total == 300, f"{total} of 300 delivered"
        owner = {}
        for name, msgs in received.items():
            per_key = {}
            for key, data in msgs:
                per_key.setdefault(key, []).append(data)
                assert owner.setdefault(key, name) == name, f"{key} went to two consumers"
            for key, datas in per_key.items():
                assert datas == [value(key, n) for n in range(30)], f"{key} out of order"
    producer.close()
    for c in consumers:
        c.close()
