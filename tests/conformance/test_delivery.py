"""Delayed delivery, chunking, deduplication and producer access modes."""
import time

import pulsar
import pytest
from pulsar import ConsumerType, InitialPosition, ProducerAccessMode

TM = 10000


def test_delayed_delivery_on_shared(client, topic):
    c = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    p = client.create_producer(topic)
    sent = time.time()
    p.send(b"later", deliver_after=__import__("datetime").timedelta(milliseconds=1500))
    p.send(b"now")
    first = c.receive(TM)
    assert first.data() == b"now"
    c.acknowledge(first)
    second = c.receive(TM)
    waited = time.time() - sent
    assert second.data() == b"later"
    assert waited >= 1.4, f"delivered after {waited:.2f}s"
    c.acknowledge(second)


def test_twelve_mib_message_with_chunking(client, topic):
    c = client.subscribe(topic, "sub")
    p = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    big = bytes(range(256)) * (12 * 1024 * 1024 // 256)
    p.send(big)
    m = c.receive(30000)
    assert len(m.data()) == len(big)
    assert m.data() == big
    c.acknowledge(m)


def test_a_message_over_the_limit_without_chunking_is_refused(client, topic):
    p = client.create_producer(topic, batching_enabled=False)
    with pytest.raises(pulsar.MessageTooBig):
        p.send(b"x" * (6 * 1024 * 1024))


@pytest.mark.strobe_config("deduplication_enabled = true\n")
def test_deduplication_and_last_sequence_id(fresh_strobe):
    client = pulsar.Client(fresh_strobe.url, operation_timeout_seconds=10)
    topic = "persistent://public/default/dedup"
    p = client.create_producer(topic, producer_name="dedup-producer")
    assert p.last_sequence_id() == -1
    for i in range(10):
        p.send(f"m-{i}".encode())
    assert p.last_sequence_id() == 9
    p.close()
    p = client.create_producer(topic, producer_name="dedup-producer")
    assert p.last_sequence_id() == 9, "the broker remembers the producer's sequence"
    # Re-sending old sequence ids stores nothing.
    for i in range(5, 12):
        p.send(f"m-{i}".encode(), sequence_id=i)
    c = client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    got = []
    while True:
        try:
            got.append(c.receive(1000).data())
        except pulsar.Timeout:
            break
    assert got == [f"m-{i}".encode() for i in range(12)]
    client.close()
    # And after a restart, from storage.
    fresh_strobe.restart()
    client = pulsar.Client(fresh_strobe.url, operation_timeout_seconds=10)
    p = client.create_producer(topic, producer_name="dedup-producer")
    assert p.last_sequence_id() == 11
    client.close()


def test_access_modes(client, topic):
    ex = client.create_producer(topic, producer_name="ex", access_mode=ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, producer_name="ex2", access_mode=ProducerAccessMode.Exclusive)
    with pytest.raises(Exception):
        client.create_producer(topic, producer_name="shared")
    ex.close()
    shared = client.create_producer(topic, producer_name="shared")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="ex3", access_mode=ProducerAccessMode.Exclusive)
    shared.close()


def test_wait_for_exclusive_gets_the_topic_when_it_frees(client, topic):
    first = client.create_producer(topic, producer_name="first", access_mode=ProducerAccessMode.Exclusive)
    import threading
    result = {}

    def wait():
        result["p"] = client.create_producer(topic, producer_name="second",
                                             access_mode=ProducerAccessMode.WaitForExclusive)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.5)
    assert "p" not in result, "waits while the first holds the topic"
    first.close()
    t.join(10)
    assert result["p"].producer_name() == "second"
    result["p"].send(b"ok")


def test_exclusive_with_fencing_takes_over(client, topic):
    old = client.create_producer(topic, producer_name="old", access_mode=ProducerAccessMode.Exclusive)
    new = client.create_producer(topic, producer_name="new", access_mode=ProducerAccessMode.ExclusiveWithFencing)
    new.send(b"from-new")
    time.sleep(0.3)
    with pytest.raises(Exception):
        old.send(b"from-old")


def test_producer_name_in_use_is_busy(client, topic):
    client.create_producer(topic, producer_name="same")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="same")

