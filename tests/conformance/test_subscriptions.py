"""Produce and consume with the official client on each subscription type."""
import re
import time

import pulsar
import pytest
from pulsar import ConsumerType, InitialPosition

from util import drain

TM = 10000




def test_exclusive_in_order_and_exclusive(client, topic):
    c = client.subscribe(topic, "sub", consumer_type=ConsumerType.Exclusive)
    p = client.create_producer(topic)
    for i in range(50):
        p.send(f"m-{i}".encode())
    got = [c.receive(TM) for _ in range(50)]
    assert [m.data() for m in got] == [f"m-{i}".encode() for i in range(50)]
    for m in got:
        c.acknowledge(m)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=ConsumerType.Exclusive)
    # A different type on a subscription in use is refused too.
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)


def test_shared_spreads_over_consumers(client, topic):
    c1 = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, receiver_queue_size=10)
    c2 = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, receiver_queue_size=10)
    p = client.create_producer(topic, batching_enabled=False)
    for i in range(100):
        p.send(f"m-{i}".encode())
    seen = {}
    for c in (c1, c2):
        for m in drain(c, 1000):
            seen.setdefault(m.data(), 0)
            seen[m.data()] += 1
            c.acknowledge(m)
    # Each consumer acks as it goes; anything left is picked up by another pass.
    for c in (c1, c2):
        for m in drain(c, 500):
            seen.setdefault(m.data(), 0)
            seen[m.data()] += 1
            c.acknowledge(m)
    assert sorted(seen) == sorted(f"m-{i}".encode() for i in range(100))
    assert all(n == 1 for n in seen.values()), "each message delivered once"


def test_shared_both_consumers_get_messages(client, topic):
    c1 = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, receiver_queue_size=5)
    c2 = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, receiver_queue_size=5)
    p = client.create_producer(topic, batching_enabled=False)
    for i in range(40):
        p.send(b"x")
    n1 = len(drain(c1, 1000))
    n2 = len(drain(c2, 1000))
    assert n1 > 0 and n2 > 0, (n1, n2)


def test_failover_active_consumer_and_takeover(client, topic):
    a = client.subscribe(topic, "sub", consumer_type=ConsumerType.Failover, consumer_name="a")
    b = client.subscribe(topic, "sub", consumer_type=ConsumerType.Failover, consumer_name="b")
    p = client.create_producer(topic)
    for i in range(10):
        p.send(f"m-{i}".encode())
    got_a = drain(a, 1000)
    got_b = drain(b, 300)
    assert [m.data() for m in got_a] == [f"m-{i}".encode() for i in range(10)], "a sorts first: active"
    assert got_b == []
    for m in got_a[:5]:
        a.acknowledge(m)
    a.close()
    # b takes over and gets what a did not acknowledge, in order.
    got = drain(b, 2000)
    assert [m.data() for m in got] == [f"m-{i}".encode() for i in range(5, 10)]


def test_initial_positions(client, topic):
    p = client.create_producer(topic)
    for i in range(5):
        p.send(f"old-{i}".encode())
    latest = client.subscribe(topic, "latest", initial_position=InitialPosition.Latest)
    earliest = client.subscribe(topic, "earliest", initial_position=InitialPosition.Earliest)
    p.send(b"new")
    assert [m.data() for m in drain(latest, 1000)] == [b"new"]
    assert [m.data() for m in drain(earliest, 1000)] == [f"old-{i}".encode() for i in range(5)] + [b"new"]


def test_batching_round_trip(client, topic):
    c = client.subscribe(topic, "sub")
    p = client.create_producer(topic, batching_enabled=True, batching_max_messages=100,
                               batching_max_publish_delay_ms=10)
    for i in range(1000):
        p.send_async(f"b-{i}".encode(), None, properties={"i": str(i)})
    p.flush()
    got = [c.receive(TM) for _ in range(1000)]
    assert [m.data() for m in got] == [f"b-{i}".encode() for i in range(1000)]
    assert [m.properties()["i"] for m in got[:3]] == ["0", "1", "2"]
    assert len({m.message_id().entry_id() for m in got}) < 1000, "messages arrived in batches"


def test_zero_receiver_queue(client, topic):
    c = client.subscribe(topic, "sub", receiver_queue_size=0)
    p = client.create_producer(topic)
    for i in range(3):
        p.send(f"z-{i}".encode())
    for i in range(3):
        m = c.receive()  # a zero queue allows no receive timeout
        assert m.data() == f"z-{i}".encode()
        c.acknowledge(m)


def test_unsubscribe(client, topic):
    c = client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    p = client.create_producer(topic)
    p.send(b"before")
    c.unsubscribe()
    # A new subscription of the same name starts over from its initial position.
    c = client.subscribe(topic, "sub", initial_position=InitialPosition.Latest)
    p.send(b"after")
    assert [m.data() for m in drain(c, 1000)] == [b"after"]


def test_pattern_consumer_lists_namespace_topics(client, topic):
    base = topic.rsplit("/", 1)[1]
    names = [f"persistent://public/default/{base}-pat-{i}" for i in range(3)]
    for n in names:
        client.create_producer(n).send(b"x")
    c = client.subscribe(re.compile(f"persistent://public/default/{base}-pat-.*"), "sub",
                         initial_position=InitialPosition.Earliest)
    got = drain(c, 3000)
    assert sorted(m.topic_name() for m in got) == sorted(names)


def test_invalid_topic_name_is_refused(client):
    with pytest.raises(Exception):
        client.create_producer("persistent://public/default/")


def test_non_persistent_topic_delivers_to_connected_consumers_only(client):
    topic = f"non-persistent://public/default/np-{time.time()}"
    c = client.subscribe(topic, "sub")
    p = client.create_producer(topic)
    for i in range(10):
        p.send(f"np-{i}".encode())
    assert [c.receive(TM).data() for _ in range(10)] == [f"np-{i}".encode() for i in range(10)]
    # A subscription that was not there when they were sent gets nothing of them.
    late = client.subscribe(topic, "late", initial_position=InitialPosition.Earliest)
    assert drain(late, 500) == []
    p.send(b"after")
    assert [m.data() for m in drain(late, 1000)] == [b"after"]
    assert [m.data() for m in drain(c, 1000)] == [b"after"]
