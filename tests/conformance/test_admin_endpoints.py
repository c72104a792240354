"""The admin endpoints beyond the everyday ones (test_admin.py): topic delete and
terminate, backlog quotas and their enforcement, permissions, bundles, rates and
the storage latency metrics. Each is called over HTTP on a real broker, and the
official client sees the effect where there is one."""
import re
import time
import urllib.request

import pulsar
import pytest
from pulsar import InitialPosition

from test_admin import call


def test_delete_topic_and_partitioned_topic(strobe):
    client = pulsar.Client(strobe.url)
    try:
        topic = "persistent://public/default/endpoint-delete"
        producer = client.create_producer(topic)
        producer.send(b"x")
        path = "/admin/v2/persistent/public/default/endpoint-delete"
        status, body = call(strobe, "DELETE", path)
        assert status == 412 and "producer" in body["reason"]
        producer.close()
        assert call(strobe, "DELETE", path)[0] == 204
        assert call(strobe, "DELETE", path)[0] == 404
        assert topic not in call(strobe, "GET", "/admin/v2/persistent/public/default")[1]

        ppath = "/admin/v2/persistent/public/default/endpoint-delete-p"
        assert call(strobe, "PUT", f"{ppath}/partitions", 3)[0] == 204
        p2 = client.create_producer("persistent://public/default/endpoint-delete-p")
        p2.send(b"y")
        assert call(strobe, "DELETE", ppath)[0] == 409, "a partitioned topic is deleted through /partitions"
        assert call(strobe, "DELETE", f"{ppath}/partitions")[0] == 412
        assert call(strobe, "DELETE", f"{ppath}/partitions?force=true")[0] == 204
        assert call(strobe, "GET", f"{ppath}/partitions")[1]["partitions"] == 0
        assert call(strobe, "GET", "/admin/v2/persistent/public/default/partitioned")[1] == [] or \
            "endpoint-delete-p" not in str(call(strobe, "GET", "/admin/v2/persistent/public/default/partitioned")[1])
    finally:
        client.close()


def test_terminate_topic(strobe):
    client = pulsar.Client(strobe.url)
    try:
        topic = "persistent://public/default/endpoint-terminate"
        producer = client.create_producer(topic)
        ids = [producer.send(f"m{i}".encode()) for i in range(3)]
        status, last = call(strobe, "POST", "/admin/v2/persistent/public/default/endpoint-terminate/terminate")
        assert status == 200
        assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
        with pytest.raises(Exception):
            producer.send(b"late")
        with pytest.raises(pulsar.TopicTerminated):
            client.create_producer(topic)
        # Everything sent before the end is still readable.
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        got = [reader.read_next(5000).data() for _ in range(3)]
        assert got == [b"m0", b"m1", b"m2"]
        assert not reader.has_message_available()
        ppath = "/admin/v2/persistent/public/default/endpoint-terminate-p"
        assert call(strobe, "PUT", f"{ppath}/partitions", 2)[0] == 204
        status, body = call(strobe, "POST", f"{ppath}/terminate/partitions")
        assert status == 200 and sorted(body) == ["0", "1"]
        assert call(strobe, "POST", f"{ppath}/terminate")[0] == 405
    finally:
        client.close()


@pytest.mark.strobe_config("backlog_quota_check_interval_secs = 1\nstats_update_interval_secs = 1\n")
def test_backlog_quota_refuses_then_evicts(fresh_strobe):
    s = fresh_strobe
    ns = "/admin/v2/namespaces/public/default"
    assert call(s, "POST", f"{ns}/backlogQuota?backlogQuotaType=destination_storage",
                {"limitSize": 4096, "policy": "producer_exception"})[0] == 204
    assert call(s, "POST", f"{ns}/backlogQuota", {"limitSize": 1, "policy": "sideways"})[0] == 400
    assert call(s, "POST", f"{ns}/backlogQuota?backlogQuotaType=message_age", {"policy": "producer_exception"})[0] == 400
    quotas = call(s, "GET", f"{ns}/backlogQuotaMap")[1]
    assert quotas["destination_storage"]["limitSize"] == 4096
    client = pulsar.Client(s.url)
    try:
        topic = "persistent://public/default/endpoint-quota"
        consumer = client.subscribe(topic, "slow", initial_position=InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        for _ in range(10):
            producer.send(b"z" * 1024)
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            client.create_producer(topic)
        stats = call(s, "GET", "/admin/v2/persistent/public/default/endpoint-quota/stats")[1]
        assert stats["backlogSize"] > 4096
        consumer.close()  # nothing prefetched: what is left is what the broker kept
        # consumer_backlog_eviction: the check skips the oldest messages.
        assert call(s, "POST", f"{ns}/backlogQuota?backlogQuotaType=destination_storage",
                    {"limitSize": 4096, "policy": "consumer_backlog_eviction"})[0] == 204
        deadline = time.time() + 10
        while time.time() < deadline:
            stats = call(s, "GET", "/admin/v2/persistent/public/default/endpoint-quota/stats")[1]
            if stats["subscriptions"]["slow"]["msgBacklog"] < 10:
                break
            time.sleep(0.2)
        assert stats["subscriptions"]["slow"]["msgBacklog"] < 10, stats
        assert stats["backlogSize"] <= 4096 + 1100
        # The newest messages are the ones kept.
        consumer = client.subscribe(topic, "slow")
        msg = consumer.receive(5000)
        assert msg.message_id().entry_id() > 0
        client.create_producer(topic).close()
        assert call(s, "DELETE", f"{ns}/backlogQuota?backlogQuotaType=destination_storage")[0] == 204
        assert call(s, "GET", f"{ns}/backlogQuotaMap")[1] == {}
    finally:
        client.close()


def test_permissions(strobe):
    ns = "/admin/v2/namespaces/public/default"
    assert call(strobe, "POST", f"{ns}/permissions/reader-role", ["consume"])[0] == 204
    assert call(strobe, "POST", f"{ns}/permissions/writer-role", ["produce", "consume"])[0] == 204
    assert call(strobe, "POST", f"{ns}/permissions/bad-role", ["juggle"])[0] == 400
    perms = call(strobe, "GET", f"{ns}/permissions")[1]
    assert perms["reader-role"] == ["consume"] and perms["writer-role"] == ["consume", "produce"]
    assert call(strobe, "DELETE", f"{ns}/permissions/reader-role")[0] == 204
    assert "reader-role" not in call(strobe, "GET", f"{ns}/permissions")[1]
    # Subscription-level roles.
    assert call(strobe, "POST", f"{ns}/permissions/subscription/audit", ["auditor"])[0] == 204
    assert call(strobe, "GET", f"{ns}/permissions/subscription")[1] == {"audit": ["auditor"]}
    assert call(strobe, "DELETE", f"{ns}/permissions/audit/auditor")[0] == 204
    # Topic-level grants add to the namespace's.
    t = "/admin/v2/persistent/public/default/endpoint-perms"
    assert call(strobe, "POST", f"{t}/permissions/topic-role", ["produce"])[0] == 204
    tp = call(strobe, "GET", f"{t}/permissions")[1]
    assert tp["topic-role"] == ["produce"] and tp["writer-role"] == ["consume", "produce"]
    assert call(strobe, "DELETE", f"{t}/permissions/topic-role")[0] == 204
    assert call(strobe, "DELETE", f"{t}/permissions/topic-role")[0] == 412
    assert call(strobe, "DELETE", f"{ns}/permissions/writer-role")[0] == 204
    # Namespace creation takes permissions in its policies, as Pulsar's test setup sends them.
    assert call(strobe, "PUT", "/admin/v2/namespaces/public/endpoint-auth",
                {"auth_policies": {"namespace_auth": {"anonymous": ["produce", "consume"]}},
                 "replication_clusters": ["standalone"]})[0] == 204
    assert call(strobe, "GET", "/admin/v2/namespaces/public/endpoint-auth/permissions")[1] == \
        {"anonymous": ["consume", "produce"]}


def test_bundles(strobe):
    assert call(strobe, "PUT", "/admin/v2/namespaces/public/endpoint-bundles", {"bundles": {"numBundles": 8}})[0] == 204
    b = call(strobe, "GET", "/admin/v2/namespaces/public/endpoint-bundles/bundles")[1]
    assert b["numBundles"] == 8 and len(b["boundaries"]) == 9
    assert b["boundaries"][0] == "0x00000000" and b["boundaries"][-1] == "0xffffffff"
    default = call(strobe, "GET", "/admin/v2/namespaces/public/default/bundles")[1]
    assert default["numBundles"] == 4
    client = pulsar.Client(strobe.url)
    try:
        topic = "persistent://public/endpoint-bundles/in-a-bundle"
        producer = client.create_producer(topic)
        producer.send(b"a")
        url = f"http://127.0.0.1:{strobe.http_port}/lookup/v2/topic/persistent/public/endpoint-bundles/in-a-bundle/bundle"
        with urllib.request.urlopen(url, timeout=10) as r:
            status, bundle = r.status, r.read().decode()
        assert status == 200 and re.fullmatch(r"0x[0-9a-f]{8}_0x[0-9a-f]{8}", bundle), bundle
        lo, hi = bundle.split("_")
        assert lo in b["boundaries"] and hi in b["boundaries"]
        # Unloading the bundle closes the producer; the client reconnects and goes on.
        assert call(strobe, "PUT", f"/admin/v2/namespaces/public/endpoint-bundles/{bundle}/unload")[0] == 204
        producer.send(b"b")
        assert call(strobe, "PUT", "/admin/v2/namespaces/public/endpoint-bundles/0x00000000_0x00000001/unload")[0] == 404
        assert call(strobe, "PUT", "/admin/v2/namespaces/public/endpoint-bundles/unload")[0] == 204
        producer.send(b"c")
        # Splitting a bundle makes two of it.
        assert call(strobe, "PUT", f"/admin/v2/namespaces/public/endpoint-bundles/{bundle}/split")[0] == 204
        after = call(strobe, "GET", "/admin/v2/namespaces/public/endpoint-bundles/bundles")[1]
        assert after["numBundles"] == 9 and lo in after["boundaries"] and hi in after["boundaries"]
    finally:
        client.close()


@pytest.mark.strobe_config("stats_update_interval_secs = 1\n")
def test_rates_and_storage_latency_metrics(fresh_strobe):
    s = fresh_strobe
    client = pulsar.Client(s.url)
    try:
        topic = "persistent://public/default/endpoint-rates"
        consumer = client.subscribe(topic, "r")
        producer = client.create_producer(topic, batching_enabled=False)
        end = time.time() + 2.5
        n = 0
        while time.time() < end:
            producer.send(b"r" * 100)
            n += 1
        # The last 1 s interval saw the sends.
        stats = call(s, "GET", "/admin/v2/persistent/public/default/endpoint-rates/stats")[1]
        assert stats["msgRateIn"] > 0 and stats["msgThroughputIn"] > 0, stats
        for _ in range(n):
            consumer.acknowledge(consumer.receive(5000))
        metrics = call(s, "GET", "/metrics")[1]
        series = {}
        for line in metrics.splitlines():
            if line.startswith("#") or topic not in line:
                continue
            name, value = line.rsplit(" ", 1)
            series[name.split("{")[0]] = float(value)
        for name in ["pulsar_rate_in", "pulsar_rate_out", "pulsar_throughput_in", "pulsar_throughput_out",
                     "pulsar_storage_backlog_size", "pulsar_storage_write_latency_le_0_5",
                     "pulsar_storage_write_latency_le_1000", "pulsar_storage_write_latency_overflow",
                     "pulsar_storage_write_latency_count", "pulsar_storage_write_latency_sum"]:
            assert name in series, (name, sorted(series))
        buckets = [v for k, v in series.items() if k.startswith("pulsar_storage_write_latency_le_")
                   or k == "pulsar_storage_write_latency_overflow"]
        assert sum(buckets) == series["pulsar_storage_write_latency_count"] == n
        assert series["pulsar_storage_write_latency_sum"] > 0
    finally:
        client.close()


@pytest.mark.strobe_config("expose_topic_level_metrics_in_prometheus = false\n")
def test_metrics_summed_per_namespace_without_topic_series(fresh_strobe):
    # Pulsar's exposeTopicLevelMetricsInPrometheus=false: one series a family for each
    # namespace, its topics' values summed, no topic label anywhere on the page.
    s = fresh_strobe
    assert call(s, "PUT", "/admin/v2/namespaces/public/other")[0] == 204
    client = pulsar.Client(s.url)
    try:
        sent = {"public/default": 0, "public/other": 0}
        for ns, topics, each in [("public/default", 3, 4), ("public/other", 2, 5)]:
            for i in range(topics):
                p = client.create_producer(f"persistent://{ns}/summed-{i}", batching_enabled=False)
                for _ in range(each):
                    p.send(b"x" * 10)
                sent[ns] += each
        page = call(s, "GET", "/metrics")[1]
        assert 'topic="' not in page, [line for line in page.splitlines() if 'topic="' in line][:3]
        series = {}
        for line in page.splitlines():
            if line.startswith("#") or "namespace=" not in line:
                continue
            name, value = line.rsplit(" ", 1)
            ns = re.search(r'namespace="([^"]*)"', name).group(1)
            series.setdefault(name.split("{")[0], {})[ns] = float(value)
        assert series["pulsar_in_messages_total"] == sent == {"public/default": 12, "public/other": 10}, series
        assert series["pulsar_producers_count"] == {"public/default": 3, "public/other": 2}
        assert series["pulsar_storage_write_latency_count"] == sent
        assert set(series["pulsar_rate_in"]) == {"public/default", "public/other"}
    finally:
        client.close()


def test_remaining_endpoints(strobe):
    """The endpoints no other test calls, each once, with Pulsar's statuses."""
    assert call(strobe, "GET", "/admin/v2/clusters")[1] == ["standalone"]
    assert call(strobe, "GET", "/admin/v2/clusters/standalone")[1]["brokerServiceUrl"].startswith("pulsar://")
    assert call(strobe, "GET", "/admin/v2/clusters/elsewhere")[0] == 404
    assert call(strobe, "PUT", "/admin/v2/clusters/standalone", {"serviceUrl": "http://x"})[0] == 204
    assert call(strobe, "GET", "/admin/v2/brokers/ready")[0] == 200
    assert call(strobe, "GET", "/admin/v2/brokers/live")[0] == 200
    assert call(strobe, "GET", "/status.html")[0] == 200
    assert call(strobe, "PUT", "/admin/v2/tenants/remaining", {"adminRoles": []})[0] == 204
    assert call(strobe, "POST", "/admin/v2/tenants/remaining", {"adminRoles": ["ops"]})[0] == 204
    assert call(strobe, "POST", "/admin/v2/tenants/nobody", {"adminRoles": ["ops"]})[0] == 404
    assert call(strobe, "GET", "/admin/v2/tenants/remaining")[1]["adminRoles"] == ["ops"]
    ns = "/admin/v2/namespaces/remaining/ns"
    assert call(strobe, "PUT", ns)[0] == 204
    assert call(strobe, "GET", ns)[1]["bundles"]["numBundles"] == 4
    assert call(strobe, "POST", f"{ns}/deduplication", b"true")[0] == 204
    assert call(strobe, "GET", f"{ns}/deduplication")[1] is True
    assert call(strobe, "DELETE", f"{ns}/deduplication")[0] == 204
    assert call(strobe, "GET", f"{ns}/retention")[1] is None
    assert call(strobe, "GET", f"{ns}/schemaCompatibilityStrategy")[1] == "UNDEFINED"
    assert call(strobe, "GET", f"{ns}/isAllowAutoUpdateSchema")[1] is True
    assert call(strobe, "POST", f"{ns}/schemaValidationEnforced", b"true")[0] == 204
    assert call(strobe, "GET", f"{ns}/schemaValidationEnforced")[1] is True
    assert call(strobe, "GET", f"{ns}/compactionThreshold")[1] is None
    assert call(strobe, "PUT", "/admin/v2/persistent/remaining/ns/pt/partitions", b'"2"')[0] == 204
    assert call(strobe, "GET", "/admin/v2/persistent/remaining/ns/partitioned")[1] == ["persistent://remaining/ns/pt"]
    assert call(strobe, "GET", "/admin/v2/non-persistent/remaining/ns")[1] == []
    assert call(strobe, "GET", "/admin/v2/namespaces/remaining/ns/topics?mode=SOMETIMES")[0] == 400
    status, body = call(strobe, "GET", "/lookup/v2/topic/persistent/remaining/ns/pt-partition-0")
    assert status == 200 and body["brokerUrl"].startswith("pulsar://")
    assert call(strobe, "GET", "/lookup/v2/topic/persistent/nobody/ns/t")[0] == 404
    # Schema endpoints not covered by test_schemas.py.
    payload = {"type": "STRING", "schema": "", "properties": {}}
    assert call(strobe, "POST", "/admin/v2/schemas/remaining/ns/st/schema", payload)[1] == {"version": 0}
    assert call(strobe, "POST", "/admin/v2/schemas/remaining/ns/st/version", payload)[1] == {"version": 0}
    assert call(strobe, "DELETE", "/admin/v2/schemas/remaining/ns/st/schema?force=true")[0] == 200
    assert call(strobe, "POST", "/admin/v2/schemas/remaining/ns/st/version", payload)[0] == 404
    assert call(strobe, "DELETE", "/admin/v2/persistent/remaining/ns/pt/partitions")[0] == 204
    assert call(strobe, "DELETE", ns)[0] == 204
    assert call(strobe, "DELETE", "/admin/v2/tenants/remaining")[0] == 204
