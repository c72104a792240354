"""Topic compaction with the official client: the latest value per key,
tombstones, batches re-batched with only their latest messages, a second
compaction merged with the first, the view surviving a restart, the
compaction threshold, TableView. (read_compacted on a Shared subscription, which Pulsar
refuses, is refused by this client before it reaches the broker:
tests/admin_topics.rs checks the broker's answer.)"""
import time

import pulsar
import pytest

from test_admin import call


def compact(strobe, local):
    path = f"/admin/v2/persistent/public/default/{local}/compaction"
    assert call(strobe, "PUT", path, b"")[0] == 204
    deadline = time.time() + 20
    while time.time() < deadline:
        status = call(strobe, "GET", path)[1]
        if status["status"] != "RUNNING":
            assert status["status"] == "SUCCESS", status
            return
        time.sleep(0.1)
    raise AssertionError("compaction still running")


def read_all(client, topic, compacted=True):
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=compacted)
    out = []
    try:
        while True:
            try:
                m = reader.read_next(1500)
            except pulsar.Timeout:
                return out
            out.append((m.partition_key(), m.data()))
    finally:
        reader.close()


def test_latest_value_per_key_with_tombstones_and_batches(strobe, client):
    local = "compaction-batches"
    topic = f"persistent://public/default/{local}"
    client.subscribe(topic, "holder").close()  # keeps the data, as in Pulsar's tests
    status = call(strobe, "GET", f"/admin/v2/persistent/public/default/{local}/compaction")[1]
    assert status["status"] == "NOT_RUN"
    plain = client.create_producer(topic, batching_enabled=False)
    plain.send(b"a1", partition_key="a")
    plain.send(b"b1", partition_key="b")
    plain.send(b"no key")  # messages without a key are not kept
    batched = client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                     batching_max_publish_delay_ms=50)
    # One batch: a2 (latest a), c1 (later replaced), d1 (later deleted).
    for value, key in [(b"a2", "a"), (b"c1", "c"), (b"d1", "d")]:
        batched.send_async(value, None, partition_key=key)
    batched.flush()
    plain.send(b"c2", partition_key="c")
    plain.send(None, partition_key="d")  # tombstone
    plain.send(b"", partition_key="b")   # an empty value deletes too
    compact(strobe, local)
    assert sorted(read_all(client, topic)) == [("a", b"a2"), ("c", b"c2")]
    # Without read_compacted every message is still there.
    assert len(read_all(client, topic, compacted=False)) == 9

    # New messages after the horizon follow the compacted view, and a second
    # compaction merges them with the first.
    plain.send(b"a3", partition_key="a")
    plain.send(b"e1", partition_key="e")
    assert read_all(client, topic) == [("a", b"a2"), ("c", b"c2"), ("a", b"a3"), ("e", b"e1")]
    compact(strobe, local)
    assert sorted(read_all(client, topic)) == [("a", b"a3"), ("c", b"c2"), ("e", b"e1")]
    stats = call(strobe, "GET", f"/admin/v2/persistent/public/default/{local}/stats")[1]
    assert "__compaction" in stats["subscriptions"]


def test_compacted_view_survives_restart_and_feeds_table_view(fresh_strobe):
    s = fresh_strobe
    client = pulsar.Client(s.url)
    local = "compaction-restart"
    topic = f"persistent://public/default/{local}"
    p = client.create_producer(topic, batching_enabled=False)
    for i in range(50):
        p.send(f"v{i}".encode(), partition_key=f"k{i % 5}")
    client.close()
    compact(s, local)
    s.restart()
    client = pulsar.Client(s.url)
    try:
        got = dict(read_all(client, topic))
        assert got == {f"k{j}": f"v{45 + j}".encode() for j in range(5)}
        assert call(s, "GET", f"/admin/v2/persistent/public/default/{local}/compaction")[1]["status"] == "SUCCESS"
        tv = client.create_table_view(topic)
        deadline = time.time() + 10
        while len(tv) < 5 and time.time() < deadline:
            time.sleep(0.1)
        seen = {}
        tv.for_each(lambda k, v: seen.__setitem__(k, v))
        assert seen == got
        tv.close()
    finally:
        client.close()


@pytest.mark.strobe_config("stats_update_interval_secs = 1\n")
def test_compaction_threshold_triggers(fresh_strobe):
    s = fresh_strobe
    ns = "/admin/v2/namespaces/public/default"
    assert call(s, "POST", f"{ns}/compactionThreshold", b"10000")[0] == 204
    assert call(s, "GET", f"{ns}/compactionThreshold")[1] == 10000
    client = pulsar.Client(s.url)
    try:
        local = "compaction-threshold"
        topic = f"persistent://public/default/{local}"
        p = client.create_producer(topic, batching_enabled=False)
        for i in range(40):
            p.send(b"x" * 1000, partition_key=f"k{i % 2}")
        deadline = time.time() + 15
        status = None
        while time.time() < deadline:
            status = call(s, "GET", f"/admin/v2/persistent/public/default/{local}/compaction")[1]["status"]
            if status == "SUCCESS":
                break
            time.sleep(0.2)
        assert status == "SUCCESS"
        assert len(read_all(client, topic)) == 2
    finally:
        client.close()
    assert call(s, "DELETE", f"{ns}/compactionThreshold")[0] == 204
