"""A topic's messages through the admin API: last message id, message id by
time, examine, get by id, skip_all, expire by id and for all subscriptions,
internal-info, backlog, partitioned internal stats, createMissedPartitions.
Each checked against what the official client sent and receives."""
import time
import urllib.request

import pulsar
from pulsar import InitialPosition

from test_admin import call

BASE = "/admin/v2/persistent/public/default"


def raw(strobe, path):
    """A message route's answer: (status, body bytes, headers)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{strobe.http_port}{path}", timeout=10) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def ids(msg_id):
    return (msg_id.ledger_id(), msg_id.entry_id())


def test_last_message_id_and_message_id_by_time(strobe):
    client = pulsar.Client(strobe.url)
    try:
        topic = "persistent://public/default/msg-ids"
        p = client.create_producer(topic, batching_enabled=False)
        empty = call(strobe, "GET", f"{BASE}/msg-ids/lastMessageId")[1]
        assert empty["entryId"] == -1
        first = p.send(b"m0")
        time.sleep(0.05)
        t = int(time.time() * 1000)
        time.sleep(0.05)
        second = p.send(b"m1")
        third = p.send(b"m2")
        last = call(strobe, "GET", f"{BASE}/msg-ids/lastMessageId")[1]
        assert (last["ledgerId"], last["entryId"]) == ids(third)
        by_time = call(strobe, "GET", f"{BASE}/msg-ids/messageid/{t}")[1]
        assert (by_time["ledgerId"], by_time["entryId"]) == ids(second)
        by_zero = call(strobe, "GET", f"{BASE}/msg-ids/messageid/0")[1]
        assert (by_zero["ledgerId"], by_zero["entryId"]) == ids(first)
        later = int(time.time() * 1000) + 60_000
        assert call(strobe, "GET", f"{BASE}/msg-ids/messageid/{later}")[0] == 404
    finally:
        client.close()


def test_examine_and_get_by_id(strobe):
    client = pulsar.Client(strobe.url)
    try:
        topic = "persistent://public/default/msg-examine"
        p = client.create_producer(topic, batching_enabled=False)
        sent = [p.send(f"m{i}".encode(), properties={"i": str(i)}) for i in range(4)]
        status, body, headers = raw(strobe, f"{BASE}/msg-examine/examinemessage?initialPosition=earliest&messagePosition=2")
        assert status == 200 and body == b"m1"
        assert headers["X-Pulsar-Message-ID"] == "%d:%d" % ids(sent[1])
        assert headers["X-Pulsar-PROPERTY-i"] == "1"
        assert raw(strobe, f"{BASE}/msg-examine/examinemessage")[1] == b"m3"
        assert raw(strobe, f"{BASE}/msg-examine/examinemessage?initialPosition=latest&messagePosition=3")[1] == b"m1"
        assert raw(strobe, f"{BASE}/msg-examine/examinemessage?initialPosition=earliest&messagePosition=9")[0] == 404
        assert raw(strobe, f"{BASE}/msg-examine/examinemessage?messagePosition=0")[0] == 412
        led, ent = ids(sent[2])
        assert raw(strobe, f"{BASE}/msg-examine/ledger/{led}/entry/{ent}")[1] == b"m2"
        assert raw(strobe, f"{BASE}/msg-examine/ledger/{led}/entry/{ent + 100}")[0] == 404
    finally:
        client.close()


def backlog(strobe, topic, sub):
    return call(strobe, "GET", f"{BASE}/{topic}/stats")[1]["subscriptions"][sub]["msgBacklog"]


def test_skip_all_and_expire(strobe):
    client = pulsar.Client(strobe.url)
    try:
        topic = "persistent://public/default/msg-skip"
        for sub in ("a", "b", "c"):
            client.subscribe(topic, sub, initial_position=InitialPosition.Earliest).close()
        p = client.create_producer(topic, batching_enabled=False)
        sent = [p.send(f"m{i}".encode()) for i in range(3)]
        assert backlog(strobe, "msg-skip", "a") == 3
        assert call(strobe, "POST", f"{BASE}/msg-skip/subscription/a/skip_all")[0] == 204
        assert backlog(strobe, "msg-skip", "a") == 0
        # Up to and including m1 (isExcluded false): m2 is left.
        led, ent = ids(sent[1])
        assert call(strobe, "POST", f"{BASE}/msg-skip/subscription/b/expireMessages",
                    {"ledgerId": led, "entryId": ent, "isExcluded": False})[0] == 204
        assert backlog(strobe, "msg-skip", "b") == 1
        c = client.subscribe(topic, "b")
        assert c.receive(5000).data() == b"m2"
        c.close()
        # Older than 0 seconds: everything, on every subscription.
        time.sleep(1.1)
        assert call(strobe, "POST", f"{BASE}/msg-skip/all_subscription/expireMessages/1")[0] == 204
        assert backlog(strobe, "msg-skip", "c") == 0
        c = client.subscribe(topic, "c")
        try:
            c.receive(500)
            raise AssertionError("a skipped message was delivered")
        except pulsar.Timeout:
            pass
    finally:
        client.close()


def test_internal_info_backlog_and_partitions(strobe):
    client = pulsar.Client(strobe.url)
    try:
        topic = "persistent://public/default/msg-info"
        client.subscribe(topic, "s").close()
        p = client.create_producer(topic, batching_enabled=False)
        for i in range(4):
            p.send(b"x")
        info = call(strobe, "GET", f"{BASE}/msg-info/internal-info")[1]
        assert info["entries"] == 4 and info["ledgers"] and "s" in info["cursors"]
        offline = call(strobe, "GET", f"{BASE}/msg-info/backlog")[1]
        assert offline["messageBacklog"] == 4 and offline["cursorDetails"]["s"]["cursorBacklog"] == 4

        assert call(strobe, "PUT", f"{BASE}/msg-parts/partitions", 3)[0] == 204
        assert call(strobe, "POST", f"{BASE}/msg-parts/createMissedPartitions")[0] == 204
        listed = call(strobe, "GET", BASE)[1]
        for i in range(3):
            assert f"persistent://public/default/msg-parts-partition-{i}" in listed
        stats = call(strobe, "GET", f"{BASE}/msg-parts/partitioned-internalStats")[1]
        assert stats["metadata"]["partitions"] == 3 and len(stats["partitions"]) == 3
        # A partitioned topic's messages are its partitions'.
        assert call(strobe, "GET", f"{BASE}/msg-parts/lastMessageId")[0] == 405
        assert call(strobe, "POST", f"{BASE}/msg-info/createMissedPartitions")[0] == 404
    finally:
        client.close()


def test_truncate_analyze_backlog_and_topic_properties(strobe):
    client = pulsar.Client(strobe.url)
    try:
        topic = "persistent://public/default/msg-truncate"
        path = f"{BASE}/msg-truncate"
        c = client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        p = client.create_producer(topic, batching_enabled=False)
        for i in range(3):
            p.send(f"a{i}".encode())
        got = c.receive(5000)
        c.acknowledge(got)
        deadline = time.time() + 5
        while backlog(strobe, "msg-truncate", "s") != 2 and time.time() < deadline:
            time.sleep(0.05)
        analysis = call(strobe, "POST", f"{path}/subscription/s/analyzeBacklog")[1]
        assert analysis["entries"] == 2 and analysis["messages"] == 2 and not analysis["aborted"]
        c.close()
        # A second ledger, so the first is inactive.
        assert call(strobe, "PUT", f"{path}/unload")[0] in (200, 204)
        p = client.create_producer(topic, batching_enabled=False)
        p.send(b"b0")
        before = [l["ledgerId"] for l in call(strobe, "GET", f"{path}/internalStats")[1]["ledgers"]]
        assert call(strobe, "POST", f"{path}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})[0] == 204
        assert call(strobe, "DELETE", f"{path}/truncate")[0] == 204
        after = [l["ledgerId"] for l in call(strobe, "GET", f"{path}/internalStats")[1]["ledgers"]]
        assert before[0] not in after, (before, after)
        assert backlog(strobe, "msg-truncate", "s") == 0
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        try:
            m = reader.read_next(1000)
            assert not m.data().startswith(b"a"), "a truncated message was read"
        except pulsar.Timeout:
            pass
        assert call(strobe, "DELETE", "/admin/v2/non-persistent/public/default/msg-truncate/truncate")[0] == 405

        assert call(strobe, "PUT", f"{path}/properties", {"owner": "team-a", "tier": "gold"})[0] == 204
        assert call(strobe, "GET", f"{path}/properties")[1] == {"owner": "team-a", "tier": "gold"}
        assert call(strobe, "DELETE", f"{path}/properties?key=tier")[0] == 204
        assert call(strobe, "GET", f"{path}/properties")[1] == {"owner": "team-a"}
        assert call(strobe, "DELETE", f"{path}/properties")[0] == 400
    finally:
        client.close()


def test_strobe_admin_topic_verbs(strobe):
    import json
    import os
    import subprocess

    def admin(*args):
        r = subprocess.run([os.environ["STROBE_BIN"], "admin", "--url", f"http://127.0.0.1:{strobe.http_port}", *args],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, (args, r.stderr)
        return r.stdout

    client = pulsar.Client(strobe.url)
    try:
        topic = "persistent://public/default/cli-verbs"
        client.subscribe(topic, "s").close()
        p = client.create_producer(topic, batching_enabled=False)
        sent = [p.send(f"c{i}".encode()) for i in range(3)]
        last = json.loads(admin("--json", "topics", "last-message-id", topic))
        assert (last["ledgerId"], last["entryId"]) == ids(sent[2])
        first = json.loads(admin("--json", "topics", "get-message-id", topic, "--datetime", "0"))
        assert (first["ledgerId"], first["entryId"]) == ids(sent[0])
        examined = json.loads(admin("--json", "topics", "examine-message", topic,
                                    "--initialPosition", "earliest", "--messagePosition", "2"))
        assert examined["payload"] == "c1"
        led, ent = ids(sent[2])
        by_id = json.loads(admin("--json", "topics", "get-message-by-id", topic, "-l", str(led), "-e", str(ent)))
        assert by_id["payload"] == "c2"
        analysis = json.loads(admin("--json", "topics", "analyze-backlog", topic, "-s", "s"))
        assert analysis["entries"] == 3
        admin("topics", "skip-all", topic, "-s", "s")
        assert backlog(strobe, "cli-verbs", "s") == 0
        admin("topics", "set-message-ttl", topic, "--ttl", "90")
        assert json.loads(admin("--json", "topics", "get-message-ttl", topic)) == 90
        admin("topics", "remove-message-ttl", topic)
        admin("topics", "set-retention", topic, "--time", "10", "--size", "-1")
        assert json.loads(admin("--json", "topics", "get-retention", topic))["retentionTimeInMinutes"] == 10
        admin("topics", "set-subscription-types-enabled", topic, "--types", "Shared,Failover")
        assert sorted(json.loads(admin("--json", "topics", "get-subscription-types-enabled", topic))) == ["Failover", "Shared"]
        admin("topics", "remove-subscription-types-enabled", topic)
        admin("topics", "set-max-unacked-messages-per-consumer", topic, "--maxNum", "7")
        assert json.loads(admin("--json", "topics", "get-max-unacked-messages-per-consumer", topic)) == 7
        admin("topics", "truncate", topic)
        stats = json.loads(admin("--json", "broker-stats", "topics"))
        assert any(topic in b.get("persistent", {}) for b in stats["public/default"].values())
        assert json.loads(admin("--json", "broker-stats", "load-report"))["numTopics"] >= 1
    finally:
        client.close()


def test_strobe_admin_namespace_verbs(fresh_strobe):
    import json
    import os
    import subprocess
    s = fresh_strobe

    def admin(*args):
        r = subprocess.run([os.environ["STROBE_BIN"], "admin", "--url", f"http://127.0.0.1:{s.http_port}", *args],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, (args, r.stderr)
        return r.stdout

    ns = "public/default"
    admin("namespaces", "set-subscription-types-enabled", ns, "--types", "Shared")
    assert json.loads(admin("--json", "namespaces", "get-subscription-types-enabled", ns)) == ["Shared"]
    admin("namespaces", "remove-subscription-types-enabled", ns)
    admin("namespaces", "set-delayed-delivery", ns, "--disable", "-t", "500")
    assert json.loads(admin("--json", "namespaces", "get-delayed-delivery", ns))["active"] is False
    admin("namespaces", "set-max-unacked-messages-per-consumer", ns, "-c", "9")
    assert json.loads(admin("--json", "namespaces", "get-max-unacked-messages-per-consumer", ns)) == 9
    admin("namespaces", "set-auto-topic-creation", ns, "--enable", "-t", "partitioned", "-n", "2")
    assert json.loads(admin("--json", "namespaces", "get-auto-topic-creation", ns))["defaultNumPartitions"] == 2
    admin("namespaces", "remove-auto-topic-creation", ns)
    admin("namespaces", "set-property", ns, "-k", "team", "-v", "blue")
    assert json.loads(admin("--json", "namespaces", "get-properties", ns)) == {"team": "blue"}
    admin("namespaces", "clear-properties", ns)
    client = pulsar.Client(s.url)
    try:
        topic = "persistent://public/default/cli-ns"
        client.subscribe(topic, "x").close()
        p = client.create_producer(topic)
        p.send(b"a")
        admin("namespaces", "clear-backlog", ns, "--sub", "x")
        assert backlog(s, "cli-ns", "x") == 0
        admin("namespaces", "unsubscribe", ns, "--sub", "x")
        assert "x" not in call(s, "GET", f"{BASE}/cli-ns/stats")[1]["subscriptions"]
    finally:
        client.close()
