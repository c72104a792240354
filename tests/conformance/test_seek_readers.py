"""Seek and readers with the official client."""
import time

import pulsar
from pulsar import ConsumerType, MessageId

TM = 10000


def produce(client, topic, n, pause=0.0):
    p = client.create_producer(topic, batching_enabled=False)
    ids, ts = [], []
    for i in range(n):
        if pause and i:
            time.sleep(pause)
        ids.append(p.send(f"m-{i}".encode()))
    return p, ids


def test_seek_by_message_id_and_time(client, topic):
    c = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    produce(client, topic, 30, pause=0.01)
    got = [c.receive(TM) for _ in range(30)]
    for m in got:
        c.acknowledge(m)
    c.seek(MessageId.earliest)
    assert c.receive(TM).data() == b"m-0"
    c.seek(got[20].message_id())
    assert c.receive(TM).data() == b"m-21"
    c.seek(got[12].publish_timestamp())
    assert c.receive(TM).data() == b"m-12"


def test_reader_from_earliest_latest_and_an_id(client, topic):
    _, ids = produce(client, topic, 10)
    r = client.create_reader(topic, MessageId.earliest)
    assert [r.read_next(TM).data() for _ in range(10)] == [f"m-{i}".encode() for i in range(10)]
    assert not r.has_message_available()
    r2 = client.create_reader(topic, ids[4])
    assert r2.read_next(TM).data() == b"m-5", "exclusive of the start id"
    r3 = client.create_reader(topic, ids[4], start_message_id_inclusive=True)
    assert r3.read_next(TM).data() == b"m-4"
    r4 = client.create_reader(topic, MessageId.latest)
    assert not r4.has_message_available()
    p = client.create_producer(topic)
    p.send(b"fresh")
    assert r4.read_next(TM).data() == b"fresh"


def test_reader_on_empty_topic_has_nothing(client, topic):
    client.create_producer(topic)
    r = client.create_reader(topic, MessageId.earliest)
    assert not r.has_message_available()
    try:
        r.read_next(300)
        raise AssertionError("read a message from an empty topic")
    except pulsar.Timeout:
        pass


def test_reader_seek(client, topic):
    produce(client, topic, 10)
    r = client.create_reader(topic, MessageId.latest)
    r.seek(MessageId.earliest)
    assert r.read_next(TM).data() == b"m-0"
    assert r.read_next(TM).data() == b"m-1"


def test_last_message_id(client, topic):
    _, ids = produce(client, topic, 3)
    c = client.subscribe(topic, "sub")
    last = c.get_last_message_id()
    assert (last.ledger_id(), last.entry_id()) == (ids[-1].ledger_id(), ids[-1].entry_id())
