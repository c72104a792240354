"""Acknowledgements, redelivery and negative acks with the official client."""
import pulsar
from pulsar import ConsumerType, InitialPosition

from util import drain

TM = 10000




def test_acked_messages_are_not_redelivered_after_reconnect(client, topic):
    c = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    p = client.create_producer(topic)
    for i in range(10):
        p.send(f"m-{i}".encode())
    got = [c.receive(TM) for _ in range(10)]
    for m in got[:6]:
        c.acknowledge(m)
    c.close()
    c = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    assert sorted(m.data() for m in drain(c, 1500)) == sorted(f"m-{i}".encode() for i in range(6, 10))


def test_cumulative_ack(client, topic):
    c = client.subscribe(topic, "sub", consumer_type=ConsumerType.Exclusive)
    p = client.create_producer(topic)
    for i in range(10):
        p.send(f"m-{i}".encode())
    got = [c.receive(TM) for _ in range(10)]
    c.acknowledge_cumulative(got[6])
    c.close()
    c = client.subscribe(topic, "sub", consumer_type=ConsumerType.Exclusive)
    assert [m.data() for m in drain(c, 1500)] == [b"m-7", b"m-8", b"m-9"]


def test_cumulative_ack_refused_on_shared(client, topic):
    c = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    p = client.create_producer(topic)
    p.send(b"x")
    m = c.receive(TM)
    try:
        c.acknowledge_cumulative(m)
    except Exception:
        pass  # the client itself refuses it on Shared
    c.acknowledge(m)


def test_negative_ack_redelivers_with_count(client, topic):
    c = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared,
                         negative_ack_redelivery_delay_ms=200)
    p = client.create_producer(topic)
    p.send(b"nack-me")
    m = c.receive(TM)
    assert m.redelivery_count() == 0
    c.negative_acknowledge(m)
    m2 = c.receive(TM)
    assert m2.data() == b"nack-me"
    assert m2.redelivery_count() == 1
    c.negative_acknowledge(m2)
    m3 = c.receive(TM)
    assert m3.redelivery_count() == 2
    c.acknowledge(m3)
    assert drain(c, 700) == []


def test_redeliver_unacknowledged(client, topic):
    c = client.subscribe(topic, "sub", consumer_type=ConsumerType.Exclusive)
    p = client.create_producer(topic)
    for i in range(3):
        p.send(f"m-{i}".encode())
    first = [c.receive(TM).data() for _ in range(3)]
    c.redeliver_unacknowledged_messages()
    again = [c.receive(TM) for _ in range(3)]
    assert [m.data() for m in again] == first
    assert all(m.redelivery_count() >= 1 for m in again)


def test_unacked_messages_of_a_closed_shared_consumer_go_to_the_other(client, topic):
    a = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, receiver_queue_size=100)
    p = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        p.send(f"m-{i}".encode())
    got = drain(a, 1000)
    assert len(got) == 20
    b = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    a.close()
    assert sorted(m.data() for m in drain(b, 2000)) == sorted(f"m-{i}".encode() for i in range(20))


def test_batch_index_ack_survives_resubscribe(client, topic):
    # As the upstream test_batch_index_ack: ack some messages of a batch, reconnect,
    # and only the unacked ones come back.
    c = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, batch_index_ack_enabled=True)
    p = client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                               batching_max_publish_delay_ms=1000)
    for i in range(10):
        p.send_async(f"m-{i}".encode(), None)
    p.flush()
    got = [c.receive(TM) for _ in range(10)]
    assert len({m.message_id().entry_id() for m in got}) == 1, "one batch"
    for m in got[:5]:
        c.acknowledge(m)
    import time
    time.sleep(0.5)  # acks are grouped for 100 ms
    c.close()
    c = client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, batch_index_ack_enabled=True)
    assert sorted(m.data() for m in drain(c, 1500)) == [f"m-{i}".encode() for i in range(5, 10)]


def test_repeated_ack_is_quiet(client, topic, strobe):
    c = client.subscribe(topic, "sub")
    p = client.create_producer(topic)
    p.send(b"x")
    m = c.receive(TM)
    for _ in range(20):
        c.acknowledge(m)
    import time
    time.sleep(0.3)
    assert "WARN" not in strobe.log_text().split(topic)[-1]


def _unload(strobe, topic):
    """Unloads the topic: loaded again at its next use, in a new ledger, its cursors from the store."""
    import urllib.request
    path = "/admin/v2/" + topic.replace("://", "/") + "/unload"
    req = urllib.request.Request(f"http://127.0.0.1:{strobe.http_port}{path}", data=b"", method="PUT")
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status in (200, 204)


def test_cumulative_ack_inside_a_batch_at_a_ledgers_first_entry(strobe, client, topic):
    """Without batch-index acks the client acks cumulatively the entry before the batch's:
    at a ledger's first entry, `(ledger, -1)` (all ones on the wire). It means everything
    before that ledger; taken as an entry id, it acked the whole batch, and the six messages
    after the one acked were lost."""
    c = client.subscribe(topic, "sub", consumer_type=ConsumerType.Exclusive)
    p = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        p.send(f"a-{i}".encode())
    first = [c.receive(TM) for _ in range(3)]
    p.close()
    _unload(strobe, topic)
    b = client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                               batching_max_publish_delay_ms=1000)
    for i in range(10):
        b.send_async(f"b-{i}".encode(), None)
    b.flush()
    # The unacked a's may come again after the consumer's reconnect; then the batch.
    got = []
    while not got or got[-1].data() != b"b-9":
        got.append(c.receive(TM))
    bs = [m for m in got if m.data().startswith(b"b-")]
    assert [m.data() for m in bs] == [f"b-{i}".encode() for i in range(10)]
    b3 = bs[3].message_id()
    assert b3.ledger_id() > first[0].message_id().ledger_id() and b3.entry_id() == 0, \
        "the batch opens a new ledger"
    c.acknowledge_cumulative(bs[3])
    c.close()
    _unload(strobe, topic)
    c = client.subscribe(topic, "sub", consumer_type=ConsumerType.Exclusive)
    # The batch's entry is not acked whole: all of it comes again, as with Pulsar; nothing before it.
    assert [m.data() for m in drain(c, 1500)] == [f"b-{i}".encode() for i in range(10)]
