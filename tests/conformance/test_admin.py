"""The admin HTTP API on Pulsar's paths, with the statuses Pulsar answers."""
import json
import urllib.error
import urllib.request

import pulsar
from pulsar import InitialPosition


def call(strobe, method, path, body=None):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(f"http://127.0.0.1:{strobe.http_port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
            return r.status, (json.loads(text) if text and text[0] in "[{\"0123456789tfn" else text)
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        return e.code, (json.loads(text) if text.startswith("{") else text)


def test_tenants_and_namespaces(strobe):
    assert call(strobe, "GET", "/admin/v2/tenants")[1] == ["public"]
    assert call(strobe, "PUT", "/admin/v2/tenants/acme", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})[0] == 204
    status, body = call(strobe, "PUT", "/admin/v2/tenants/acme", {})
    assert status == 409 and "reason" in body
    assert call(strobe, "GET", "/admin/v2/tenants/acme")[1]["adminRoles"] == ["ops"]
    assert call(strobe, "PUT", "/admin/v2/namespaces/acme/orders")[0] == 204
    assert call(strobe, "PUT", "/admin/v2/namespaces/acme/orders")[0] == 409
    assert call(strobe, "PUT", "/admin/v2/namespaces/nobody/orders")[0] == 404
    assert call(strobe, "GET", "/admin/v2/namespaces/acme")[1] == ["acme/orders"]
    assert call(strobe, "PUT", "/admin/v2/namespaces/acme/bad%20name")[0] == 400
    assert call(strobe, "DELETE", "/admin/v2/tenants/acme")[0] == 409, "a tenant with namespaces stays"
    assert call(strobe, "DELETE", "/admin/v2/namespaces/acme/orders")[0] == 204
    assert call(strobe, "DELETE", "/admin/v2/tenants/acme")[0] == 204
    assert call(strobe, "GET", "/admin/v2/tenants/acme")[0] == 404


def test_namespace_policies(strobe):
    ns = "/admin/v2/namespaces/public/default"
    assert call(strobe, "POST", f"{ns}/messageTTL", b"60")[0] == 204
    assert call(strobe, "GET", f"{ns}/messageTTL")[1] == 60
    assert call(strobe, "POST", f"{ns}/retention", {"retentionTimeInMinutes": 10, "retentionSizeInMB": 5})[0] == 204
    assert call(strobe, "GET", f"{ns}/retention")[1] == {"retentionTimeInMinutes": 10, "retentionSizeInMB": 5}
    assert call(strobe, "PUT", f"{ns}/schemaCompatibilityStrategy", b'"FORWARD"')[0] == 204
    assert call(strobe, "PUT", f"{ns}/schemaCompatibilityStrategy", b'"SIDEWAYS"')[0] == 400
    assert call(strobe, "POST", f"{ns}/deduplication", b"maybe")[0] == 400
    assert call(strobe, "DELETE", f"{ns}/messageTTL")[0] == 204
    assert call(strobe, "DELETE", f"{ns}/retention")[0] == 204


def test_dedup_policy_applies_to_producers(strobe):
    assert call(strobe, "POST", "/admin/v2/namespaces/public/default/deduplication", b"true")[0] == 204
    try:
        client = pulsar.Client(strobe.url)
        topic = "persistent://public/default/admin-dedup"
        p = client.create_producer(topic, producer_name="pn")
        for i in range(3):
            p.send(b"x")
        p.close()
        assert client.create_producer(topic, producer_name="pn").last_sequence_id() == 2
        client.close()
    finally:
        call(strobe, "POST", "/admin/v2/namespaces/public/default/deduplication", b"false")


def test_partitioned_topics(strobe):
    base = "/admin/v2/persistent/public/default/admin-pt"
    assert call(strobe, "PUT", f"{base}/partitions", b"3")[0] == 204
    assert call(strobe, "PUT", f"{base}/partitions", b'"3"')[0] == 409
    assert call(strobe, "GET", f"{base}/partitions")[1] == {"partitions": 3}
    assert call(strobe, "POST", f"{base}/partitions", b"5")[0] == 204
    assert call(strobe, "POST", f"{base}/partitions", b"2")[0] == 400, "partitions only grow"
    assert call(strobe, "GET", f"{base}/partitions")[1] == {"partitions": 5}
    assert call(strobe, "PUT", "/admin/v2/persistent/public/default/admin-zero/partitions", b"0")[0] == 400
    client = pulsar.Client(strobe.url)
    p = client.create_producer("persistent://public/default/admin-pt")
    c = client.subscribe("persistent://public/default/admin-pt", "s", initial_position=InitialPosition.Earliest)
    for i in range(10):
        p.send(f"m-{i}".encode(), partition_key=f"k{i}")
    got = sorted(c.receive(10000).data() for _ in range(10))
    assert got == sorted(f"m-{i}".encode() for i in range(10))
    topics = call(strobe, "GET", "/admin/v2/namespaces/public/default/topics")[1]
    assert "persistent://public/default/admin-pt-partition-4" in topics
    client.close()


def test_stats_lookup_health_metrics(strobe):
    client = pulsar.Client(strobe.url)
    topic = "persistent://public/default/admin-stats"
    c = client.subscribe(topic, "s")
    p = client.create_producer(topic)
    for i in range(4):
        p.send(b"x" * 100)
    status, stats = call(strobe, "GET", "/admin/v2/persistent/public/default/admin-stats/stats")
    assert status == 200
    assert stats["msgInCounter"] == 4
    assert stats["storageSize"] > 400
    assert "s" in stats["subscriptions"]
    assert call(strobe, "GET", "/admin/v2/persistent/public/default/never-loaded/stats")[0] == 404
    status, lookup = call(strobe, "GET", "/lookup/v2/topic/persistent/public/default/admin-stats")
    assert status == 200 and lookup["brokerUrl"] == strobe.url
    assert call(strobe, "GET", "/admin/v2/brokers/health") == (200, "ok")
    status, text = call(strobe, "GET", "/metrics")
    assert status == 200
    assert f'pulsar_in_messages_total{{cluster="standalone",namespace="public/default",topic="{topic}"}} 4' in text
    assert "process_resident_memory_bytes" in text
    # The file backend's own counters: the sends above were synced.
    fsyncs = [l for l in text.splitlines() if l.startswith("strobe_storage_journal_fsyncs_total{")]
    assert len(fsyncs) == 1 and int(fsyncs[0].split()[-1]) > 0, fsyncs
    # ... and by duration: the buckets count every one of them, the sum is their time.
    buckets = [l for l in text.splitlines()
               if l.startswith("strobe_storage_journal_fsync_latency_") and not l.startswith("strobe_storage_journal_fsync_latency_sum")]
    assert len(buckets) == 11 and buckets[0].startswith("strobe_storage_journal_fsync_latency_le_0_1{"), buckets
    assert buckets[-1].startswith("strobe_storage_journal_fsync_latency_overflow{"), buckets
    assert sum(int(l.split()[-1]) for l in buckets) == int(fsyncs[0].split()[-1]), (buckets, fsyncs)
    total_ms = [float(l.split()[-1]) for l in text.splitlines() if l.startswith("strobe_storage_journal_fsync_latency_sum{")]
    assert len(total_ms) == 1 and total_ms[0] > 0, total_ms
    written = [l for l in text.splitlines() if l.startswith("strobe_storage_entries_written_total{")]
    assert len(written) == 1 and int(written[0].split()[-1]) >= 4, written
    client.close()


def test_http_service_url_lookup(strobe):
    # The official client given an http:// service URL looks topics up over HTTP.
    client = pulsar.Client(f"http://127.0.0.1:{strobe.http_port}")
    topic = "persistent://public/default/admin-http-lookup"
    c = client.subscribe(topic, "s")
    client.create_producer(topic).send(b"via-http")
    assert c.receive(10000).data() == b"via-http"
    client.close()


def test_message_ttl_expires_the_backlog(strobe):
    assert call(strobe, "PUT", "/admin/v2/namespaces/public/ttl")[0] == 204
    assert call(strobe, "POST", "/admin/v2/namespaces/public/ttl/messageTTL", b"1")[0] == 204
    client = pulsar.Client(strobe.url)
    topic = "persistent://public/ttl/expiring"
    c = client.subscribe(topic, "s", receiver_queue_size=1)
    c.close()
    p = client.create_producer(topic)
    for _ in range(5):
        p.send(b"old")
    import time
    deadline = time.time() + 15
    backlog = None
    while time.time() < deadline:
        backlog = call(strobe, "GET", "/admin/v2/persistent/public/ttl/expiring/stats")[1]["subscriptions"]["s"]["msgBacklog"]
        if backlog == 0:
            break
        time.sleep(0.5)
    assert backlog == 0, f"backlog {backlog} after the TTL"
    c = client.subscribe(topic, "s")
    try:
        c.receive(500)
        raise AssertionError("an expired message was delivered")
    except pulsar.Timeout:
        pass
    client.close()


def test_subscription_operations(strobe):
    client = pulsar.Client(strobe.url)
    topic = "persistent://public/default/admin-subs"
    base = "/admin/v2/persistent/public/default/admin-subs"
    p = client.create_producer(topic, batching_enabled=False)
    assert call(strobe, "PUT", f"{base}/subscription/made-by-admin", {"ledgerId": -1, "entryId": -1})[0] == 204
    assert call(strobe, "PUT", f"{base}/subscription/made-by-admin")[0] == 409
    ids = [p.send(f"m-{i}".encode(), properties={"i": str(i)}) for i in range(10)]
    assert "made-by-admin" in call(strobe, "GET", f"{base}/subscriptions")[1]
    # Peek does not consume: the 3rd unacknowledged message, with its metadata in headers.
    req = urllib.request.Request(f"http://127.0.0.1:{strobe.http_port}{base}/subscription/made-by-admin/position/3")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.read() == b"m-2"
        assert r.headers["X-Pulsar-PROPERTY-i"] == "2"
        assert r.headers["X-Pulsar-Message-ID"] == f"{ids[2].ledger_id()}:{ids[2].entry_id()}"
    assert call(strobe, "POST", f"{base}/subscription/made-by-admin/skip/4")[0] == 204
    stats = call(strobe, "GET", f"{base}/stats")[1]
    assert stats["subscriptions"]["made-by-admin"]["msgBacklog"] == 6
    c = client.subscribe(topic, "made-by-admin")
    assert c.receive(10000).data() == b"m-4"
    # Reset by message id: consumers are disconnected and resume there.
    assert call(strobe, "POST", f"{base}/subscription/made-by-admin/resetcursor",
                {"ledgerId": ids[1].ledger_id(), "entryId": ids[1].entry_id()})[0] == 204
    # (what the client had prefetched may come first; then the reset position)
    seen = []
    while b"m-1" not in seen:
        seen.append(c.receive(10000).data())
    assert seen[-1] == b"m-1" and len(seen) <= 7, seen
    assert call(strobe, "DELETE", f"{base}/subscription/made-by-admin")[0] == 412, "busy while consumed"
    c.close()
    assert call(strobe, "POST", f"{base}/subscription/made-by-admin/expireMessages/0")[0] == 204
    assert call(strobe, "GET", f"{base}/stats")[1]["subscriptions"]["made-by-admin"]["msgBacklog"] == 0
    assert call(strobe, "DELETE", f"{base}/subscription/made-by-admin")[0] == 204
    assert "made-by-admin" not in call(strobe, "GET", f"{base}/subscriptions")[1]
    internal = call(strobe, "GET", f"{base}/internalStats")[1]
    assert internal["numberOfEntries"] == 10
    assert call(strobe, "PUT", f"{base}/unload")[0] == 204
    p.send(b"after-unload")  # the producer reconnects to the reloaded topic
    client.close()


def test_key_shared_consumer_stats(strobe):
    from pulsar import ConsumerKeySharedPolicy, ConsumerType, KeySharedMode
    client = pulsar.Client(strobe.url)
    topic = "persistent://public/default/admin-ks-stats"
    for i, rng in enumerate([(0, 32767), (32768, 65535)]):
        client.subscribe(topic, "ks", consumer_type=ConsumerType.KeyShared, consumer_name=f"c{i}",
                         key_shared_policy=ConsumerKeySharedPolicy(KeySharedMode.Sticky, sticky_ranges=[rng]))
    stats = call(strobe, "GET", "/admin/v2/persistent/public/default/admin-ks-stats/stats")[1]
    consumers = {c["consumerName"]: c for c in stats["subscriptions"]["ks"]["consumers"]}
    assert consumers["c0"]["keyHashRanges"] == ["[0, 32767]"]
    assert consumers["c1"]["keyHashRanges"] == ["[32768, 65535]"]
    assert consumers["c0"]["drainingHashesCount"] == 0
    client.close()


def test_partitioned_stats(strobe):
    assert call(strobe, "PUT", "/admin/v2/persistent/public/default/admin-pstats/partitions", b"2")[0] == 204
    client = pulsar.Client(strobe.url)
    p = client.create_producer("persistent://public/default/admin-pstats")
    for i in range(6):
        p.send(b"x", partition_key=str(i))
    st = call(strobe, "GET", "/admin/v2/persistent/public/default/admin-pstats/partitioned-stats")[1]
    assert st["metadata"]["partitions"] == 2 and st["msgInCounter"] == 6
    client.close()


def test_strobe_admin_command_line(strobe):
    import os
    import subprocess

    def admin(*args):
        return subprocess.run([os.environ["STROBE_BIN"], "admin", "--url", f"http://127.0.0.1:{strobe.http_port}", *args],
                              capture_output=True, text=True, timeout=30)

    assert "public" in admin("tenants", "list").stdout.split()
    assert admin("namespaces", "create", "public/cli").returncode == 0
    assert admin("namespaces", "set-retention", "public/cli", "--time", "5", "--size", "-1").returncode == 0
    out = admin("--json", "namespaces", "policies", "public/cli")
    assert json.loads(out.stdout)["retention_policies"] == {"retentionTimeInMinutes": 5, "retentionSizeInMB": -1}
    assert admin("topics", "create-partitioned-topic", "public/cli/t", "-p", "2").returncode == 0
    again = admin("topics", "create-partitioned-topic", "public/cli/t", "-p", "2")
    assert again.returncode != 0 and "409" in again.stderr
    assert json.loads(admin("--json", "topics", "list", "public/cli").stdout) == [
        "persistent://public/cli/t-partition-0", "persistent://public/cli/t-partition-1"]
    assert "partitions  2" in admin("topics", "partitioned-metadata", "public/cli/t").stdout
