"""A single topic's own policies (Pulsar's topic-level policies): message TTL,
deduplication, retention, backlog quotas and the compaction threshold. Each
is set over HTTP on Pulsar's path, read back (its own value, and with
?applied=true what the topic enforces: its own, else its namespace's, else the
broker's), and its effect is seen by the official client."""
import time
from datetime import timedelta

import pulsar
import pytest
from pulsar import InitialPosition

from test_admin import call
from util import wait_for


def test_message_ttl_of_one_topic_expires_its_backlog(strobe):
    client = pulsar.Client(strobe.url)
    try:
        topic = "persistent://public/default/topic-ttl"
        other = "persistent://public/default/topic-ttl-other"
        path = "/admin/v2/persistent/public/default/topic-ttl"
        for t in (topic, other):
            client.subscribe(t, "s").close()
        assert call(strobe, "GET", f"{path}/messageTTL")[1] is None
        assert call(strobe, "GET", f"{path}/messageTTL?applied=true")[1] == 0
        # Pulsar's topic route takes the TTL as a query parameter.
        assert call(strobe, "POST", f"{path}/messageTTL?messageTTL=-1")[0] == 412
        assert call(strobe, "POST", f"{path}/messageTTL?messageTTL=1")[0] == 204
        assert call(strobe, "GET", f"{path}/messageTTL")[1] == 1
        for t in (topic, other):
            p = client.create_producer(t)
            for _ in range(5):
                p.send(b"old")
            p.close()
        stats = lambda t: call(strobe, "GET", f"/admin/v2/persistent/public/default/{t}/stats")[1]
        wait_for("the topic's TTL", lambda: stats("topic-ttl")["subscriptions"]["s"]["msgBacklog"] == 0)
        # The namespace has no TTL: the other topic keeps its backlog.
        assert stats("topic-ttl-other")["subscriptions"]["s"]["msgBacklog"] == 5
        assert call(strobe, "DELETE", f"{path}/messageTTL")[0] == 204
        assert call(strobe, "GET", f"{path}/messageTTL")[1] is None
    finally:
        client.close()


def test_deduplication_of_one_topic(strobe):
    client = pulsar.Client(strobe.url)
    try:
        topic = "persistent://public/default/topic-dedup"
        path = "/admin/v2/persistent/public/default/topic-dedup"
        client.create_producer(topic).close()
        assert call(strobe, "GET", f"{path}/deduplicationEnabled?applied=true")[1] is False
        assert call(strobe, "POST", f"{path}/deduplicationEnabled", b"maybe")[0] == 400
        assert call(strobe, "POST", f"{path}/deduplicationEnabled", b"true")[0] == 204
        assert call(strobe, "GET", f"{path}/deduplicationEnabled")[1] is True
        p = client.create_producer(topic, producer_name="dedup-pn")
        for _ in range(3):
            p.send(b"x")
        p.close()
        # The broker kept the producer's sequence ids: deduplication is on.
        assert client.create_producer(topic, producer_name="dedup-pn").last_sequence_id() == 2
        assert call(strobe, "DELETE", f"{path}/deduplicationEnabled")[0] == 204
        assert call(strobe, "GET", f"{path}/deduplicationEnabled?applied=true")[1] is False
    finally:
        client.close()


def test_backlog_quota_of_one_topic(fresh_strobe):
    s = fresh_strobe
    client = pulsar.Client(s.url)
    try:
        topic = "persistent://public/default/topic-quota"
        path = "/admin/v2/persistent/public/default/topic-quota"
        consumer = client.subscribe(topic, "slow", initial_position=InitialPosition.Earliest)
        assert call(s, "POST", f"{path}/backlogQuota", {"limitSize": 1, "policy": "sideways"})[0] == 400
        assert call(s, "POST", f"{path}/backlogQuota?backlogQuotaType=destination_storage",
                    {"limitSize": 4096, "policy": "producer_exception"})[0] == 204
        assert call(s, "GET", f"{path}/backlogQuotaMap")[1]["destination_storage"]["limitSize"] == 4096
        producer = client.create_producer(topic, batching_enabled=False)
        for _ in range(10):
            producer.send(b"z" * 1024)
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            client.create_producer(topic)
        # Another topic of the namespace has no quota.
        client.create_producer("persistent://public/default/topic-quota-other").close()
        assert call(s, "DELETE", f"{path}/backlogQuota?backlogQuotaType=destination_storage")[0] == 204
        assert call(s, "GET", f"{path}/backlogQuotaMap")[1] == {}
        client.create_producer(topic).close()
        consumer.close()
    finally:
        client.close()


def test_retention_of_one_topic(strobe):
    client = pulsar.Client(strobe.url)
    try:
        kept, gone = "topic-retention", "topic-retention-other"
        base = "/admin/v2/persistent/public/default"
        path = f"{base}/{kept}"
        client.create_producer(f"persistent://public/default/{kept}").close()
        assert call(strobe, "GET", f"{path}/retention")[1] is None
        assert call(strobe, "GET", f"{path}/retention?applied=true")[1] == \
            {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
        assert call(strobe, "POST", f"{path}/retention",
                    {"retentionTimeInMinutes": -2, "retentionSizeInMB": 1})[0] == 412
        assert call(strobe, "POST", f"{path}/retention",
                    {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1})[0] == 204
        assert call(strobe, "GET", f"{path}/retention")[1] == \
            {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
        first = {}
        for name in (kept, gone):
            topic = f"persistent://public/default/{name}"
            consumer = client.subscribe(topic, "s")
            p = client.create_producer(topic)
            for i in range(5):
                p.send(f"r{i}".encode())
            for _ in range(5):
                consumer.acknowledge(consumer.receive(5000))
            consumer.close()
            p.close()
            first[name] = call(strobe, "GET", f"{base}/{name}/internalStats")[1]["ledgers"][0]["ledgerId"]
            # Closed and opened again: the consumed ledger is trimmed at open
            # unless retention keeps it.
            assert call(strobe, "PUT", f"{base}/{name}/unload")[0] in (200, 204)
        ledgers = lambda name: [l["ledgerId"] for l in call(strobe, "GET", f"{base}/{name}/internalStats")[1]["ledgers"]]
        wait_for("the unretained topic's trim", lambda: first[gone] not in ledgers(gone))
        assert first[kept] in ledgers(kept), "retention kept the consumed ledger"
        reader = client.create_reader(f"persistent://public/default/{kept}", pulsar.MessageId.earliest)
        assert [reader.read_next(5000).data() for _ in range(5)] == [f"r{i}".encode() for i in range(5)]
        assert call(strobe, "DELETE", f"{path}/retention")[0] == 204
    finally:
        client.close()


def test_compaction_threshold_of_one_topic(strobe):
    client = pulsar.Client(strobe.url)
    try:
        topic = "persistent://public/default/topic-compact"
        path = "/admin/v2/persistent/public/default/topic-compact"
        client.create_producer(topic).close()
        assert call(strobe, "POST", f"{path}/compactionThreshold", b"-5")[0] == 412
        assert call(strobe, "POST", f"{path}/compactionThreshold", b"1")[0] == 204
        assert call(strobe, "GET", f"{path}/compactionThreshold")[1] == 1
        assert call(strobe, "GET", f"{path}/compactionThreshold?applied=true")[1] == 1
        p = client.create_producer(topic, batching_enabled=False)
        for i in range(20):
            p.send(f"v{i}".encode(), partition_key=f"k{i % 2}")
        # Over the threshold: the broker compacts the topic by itself.
        wait_for("an automatic compaction",
                 lambda: call(strobe, "GET", f"{path}/compaction")[1].get("status") == "SUCCESS", timeout=90)
        assert call(strobe, "DELETE", f"{path}/compactionThreshold")[0] == 204
        assert call(strobe, "GET", f"{path}/compactionThreshold?applied=true")[1] == 0
    finally:
        client.close()


def test_policies_of_a_missing_topic_are_404(strobe):
    path = "/admin/v2/persistent/public/default/no-such-topic-policies"
    for route in ("messageTTL", "deduplicationEnabled", "retention", "compactionThreshold", "backlogQuotaMap"):
        status, body = call(strobe, "GET", f"{path}/{route}")
        assert status == 404 and "not found" in body["reason"], (route, status, body)


def test_subscription_types_enabled(fresh_strobe):
    s = fresh_strobe
    client = pulsar.Client(s.url)
    try:
        topic = "persistent://public/default/topic-subtypes"
        path = "/admin/v2/persistent/public/default/topic-subtypes"
        ns = "/admin/v2/namespaces/public/default"
        client.create_producer(topic).close()
        assert call(s, "POST", f"{ns}/subscriptionTypesEnabled", ["Sideways"])[0] == 400
        # The namespace allows Shared and Failover only.
        assert call(s, "POST", f"{ns}/subscriptionTypesEnabled", ["Shared", "Failover"])[0] == 204
        assert sorted(call(s, "GET", f"{ns}/subscriptionTypesEnabled")[1]) == ["Failover", "Shared"]
        assert sorted(call(s, "GET", f"{path}/subscriptionTypesEnabled?applied=true")[1]) == ["Failover", "Shared"]
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive)
        client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared).close()
        # The topic's own set wins over the namespace's.
        assert call(s, "POST", f"{path}/subscriptionTypesEnabled", ["Exclusive"])[0] == 204
        assert call(s, "GET", f"{path}/subscriptionTypesEnabled")[1] == ["Exclusive"]
        client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive).close()
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(topic, "sh2", consumer_type=pulsar.ConsumerType.Shared)
        assert call(s, "DELETE", f"{path}/subscriptionTypesEnabled")[0] == 204
        assert call(s, "DELETE", f"{ns}/subscriptionTypesEnabled")[0] == 204
        client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared).close()
    finally:
        client.close()


def test_namespace_properties_clear_backlog_and_unsubscribe(fresh_strobe):
    s = fresh_strobe
    ns = "/admin/v2/namespaces/public/default"
    assert call(s, "PUT", f"{ns}/properties", {"team": "a", "tier": "1"})[0] == 204
    assert call(s, "PUT", f"{ns}/property/owner/ops")[0] == 204
    assert call(s, "GET", f"{ns}/properties")[1] == {"team": "a", "tier": "1", "owner": "ops"}
    assert call(s, "GET", f"{ns}/property/team")[1] == "a"
    assert call(s, "DELETE", f"{ns}/property/team")[1] == "a"
    assert call(s, "DELETE", f"{ns}/properties")[0] == 204
    assert call(s, "GET", f"{ns}/properties")[1] == {}
    assert call(s, "GET", f"{ns}/replication")[1] == ["standalone"]
    assert call(s, "POST", f"{ns}/replication", ["elsewhere"])[0] == 405
    client = pulsar.Client(s.url)
    try:
        for t in ("nsops-a", "nsops-b"):
            for sub in ("keep", "drop"):
                client.subscribe(f"persistent://public/default/{t}", sub).close()
            p = client.create_producer(f"persistent://public/default/{t}")
            for _ in range(3):
                p.send(b"x")
            p.close()
        stats = lambda t: call(s, "GET", f"/admin/v2/persistent/public/default/{t}/stats")[1]["subscriptions"]
        assert call(s, "POST", f"{ns}/clearBacklog/drop")[0] == 204
        for t in ("nsops-a", "nsops-b"):
            assert stats(t)["drop"]["msgBacklog"] == 0 and stats(t)["keep"]["msgBacklog"] == 3
        assert call(s, "POST", f"{ns}/unsubscribe/drop")[0] == 204
        for t in ("nsops-a", "nsops-b"):
            assert "drop" not in stats(t)
        # Bundle by bundle: after the first, only its topics are cleared.
        b = call(s, "GET", f"{ns}/bundles")[1]["boundaries"]
        bundles = [f"{lo}_{hi}" for lo, hi in zip(b, b[1:])]
        assert call(s, "POST", f"{ns}/{bundles[0]}/clearBacklog")[0] == 204
        for bundle in bundles[1:]:
            assert call(s, "POST", f"{ns}/{bundle}/clearBacklog/keep")[0] == 204
        for t in ("nsops-a", "nsops-b"):
            assert stats(t)["keep"]["msgBacklog"] == 0
        assert call(s, "POST", f"{ns}/0x00000000_0x00000001/clearBacklog")[0] in (404, 412)
    finally:
        client.close()


def test_auto_topic_and_subscription_creation(fresh_strobe):
    s = fresh_strobe
    ns = "/admin/v2/namespaces/public/auto"
    assert call(s, "PUT", ns)[0] == 204
    client = pulsar.Client(s.url, operation_timeout_seconds=5)
    try:
        assert call(s, "POST", f"{ns}/autoTopicCreation", {"allowAutoTopicCreation": True, "topicType": "partitioned"})[0] == 400
        assert call(s, "POST", f"{ns}/autoTopicCreation",
                    {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3})[0] == 204
        client.create_producer("persistent://public/auto/made-partitioned").close()
        assert call(s, "GET", "/admin/v2/persistent/public/auto/made-partitioned/partitions")[1]["partitions"] == 3
        assert call(s, "POST", f"{ns}/autoTopicCreation", {"allowAutoTopicCreation": False, "topicType": "non-partitioned"})[0] == 204
        assert call(s, "GET", f"{ns}/autoTopicCreation")[1]["allowAutoTopicCreation"] is False
        with pytest.raises(Exception):
            client.create_producer("persistent://public/auto/not-made")
        assert call(s, "GET", "/admin/v2/persistent/public/auto/not-made/stats")[0] == 404
        # Another namespace keeps the broker's default.
        client.create_producer("persistent://public/default/auto-made").close()
        assert call(s, "DELETE", f"{ns}/autoTopicCreation")[0] == 204
        client.create_producer("persistent://public/auto/made-now").close()

        topic = "persistent://public/auto/subs"
        path = "/admin/v2/persistent/public/auto/subs"
        client.subscribe(topic, "existing").close()
        assert call(s, "POST", f"{ns}/autoSubscriptionCreation", {"allowAutoSubscriptionCreation": False})[0] == 204
        with pytest.raises(Exception):
            client.subscribe(topic, "new-one")
        client.subscribe(topic, "existing").close()
        assert call(s, "GET", f"{path}/autoSubscriptionCreation?applied=true")[1] == {"allowAutoSubscriptionCreation": False}
        # The topic's own say wins.
        assert call(s, "POST", f"{path}/autoSubscriptionCreation", {"allowAutoSubscriptionCreation": True})[0] == 204
        client.subscribe(topic, "new-one").close()
        assert call(s, "DELETE", f"{path}/autoSubscriptionCreation")[0] == 204
        assert call(s, "DELETE", f"{ns}/autoSubscriptionCreation")[0] == 204
        client.subscribe(topic, "another").close()
    finally:
        client.close()


def test_schema_policies_of_one_topic(fresh_strobe):
    s = fresh_strobe
    client = pulsar.Client(s.url)
    try:
        topic = "persistent://public/default/topic-schema"
        path = "/admin/v2/persistent/public/default/topic-schema"
        ns = "/admin/v2/namespaces/public/default"
        client.create_producer(topic, schema=pulsar.schema.StringSchema()).close()
        assert call(s, "GET", f"{path}/schemaCompatibilityStrategy?applied=true")[1] == "FULL"
        assert call(s, "PUT", f"{path}/schemaCompatibilityStrategy", b'"SIDEWAYS"')[0] == 400
        # ALWAYS_INCOMPATIBLE: no new schema may join the topic's.
        assert call(s, "PUT", f"{path}/schemaCompatibilityStrategy", b'"ALWAYS_INCOMPATIBLE"')[0] == 204
        assert call(s, "GET", f"{path}/schemaCompatibilityStrategy")[1] == "ALWAYS_INCOMPATIBLE"
        with pytest.raises(Exception):
            client.create_producer(topic, schema=pulsar.schema.JsonSchema(pulsar.schema.Record))
        assert call(s, "DELETE", f"{path}/schemaCompatibilityStrategy")[0] == 204
        # The namespace's older auto-update setting, when no strategy is set.
        assert call(s, "PUT", f"{ns}/schemaAutoUpdateCompatibilityStrategy", b'"Sideways"')[0] == 400
        assert call(s, "PUT", f"{ns}/schemaAutoUpdateCompatibilityStrategy", b'"Backward"')[0] == 204
        assert call(s, "GET", f"{ns}/schemaAutoUpdateCompatibilityStrategy")[1] == "Backward"
        assert call(s, "GET", f"{path}/schemaCompatibilityStrategy?applied=true")[1] == "BACKWARD"
        # Validation enforced on the topic alone: a producer without a schema is refused.
        assert call(s, "POST", f"{path}/schemaValidationEnforced", b"true")[0] == 204
        assert call(s, "GET", f"{path}/schemaValidationEnforced")[1] is True
        with pytest.raises(Exception):
            client.create_producer(topic)
        client.create_producer("persistent://public/default/topic-schema-other").close()
    finally:
        client.close()


def test_cluster_delete_is_refused(strobe):
    assert call(strobe, "DELETE", "/admin/v2/clusters/standalone")[0] == 412
    assert call(strobe, "DELETE", "/admin/v2/clusters/elsewhere")[0] == 404


def test_delayed_delivery_switched_off(strobe):
    client = pulsar.Client(strobe.url)
    try:
        topic = "persistent://public/default/topic-delayed"
        path = "/admin/v2/persistent/public/default/topic-delayed"
        c = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        p = client.create_producer(topic, batching_enabled=False)
        assert call(strobe, "GET", f"{path}/delayedDelivery?applied=true")[1]["active"] is True
        p.send(b"waits", deliver_after=timedelta(seconds=30))
        with pytest.raises(pulsar.Timeout):
            c.receive(1000)
        assert call(strobe, "POST", f"{path}/delayedDelivery", {"active": False, "tickTime": 1000})[0] == 204
        assert call(strobe, "GET", f"{path}/delayedDelivery")[1]["active"] is False
        # Off: a delivery time is ignored for what is sent from now on.
        p.send(b"at-once", deliver_after=timedelta(seconds=30))
        assert c.receive(5000).data() == b"at-once"
        assert call(strobe, "DELETE", f"{path}/delayedDelivery")[0] == 204
        p.send(b"waits-again", deliver_after=timedelta(seconds=30))
        with pytest.raises(pulsar.Timeout):
            c.receive(1000)
        ns = "/admin/v2/namespaces/public/default"
        assert call(strobe, "POST", f"{ns}/delayedDelivery", {"active": True, "tickTime": -1})[0] == 400
        assert call(strobe, "POST", f"{ns}/delayedDelivery", {"active": True, "tickTime": 500})[0] == 204
        assert call(strobe, "GET", f"{ns}/delayedDelivery")[1]["tickTime"] == 500
        assert call(strobe, "DELETE", f"{ns}/delayedDelivery")[0] == 204
    finally:
        client.close()


def test_max_unacked_per_consumer_and_subscription(fresh_strobe):
    s = fresh_strobe
    client = pulsar.Client(s.url)
    try:
        topic = "persistent://public/default/topic-unacked"
        path = "/admin/v2/persistent/public/default/topic-unacked"
        ns = "/admin/v2/namespaces/public/default"
        client.create_producer(topic).close()
        assert call(s, "POST", f"{path}/maxUnackedMessagesOnConsumer", b"-1")[0] == 412
        assert call(s, "POST", f"{path}/maxUnackedMessagesOnConsumer", b"2")[0] == 204
        assert call(s, "GET", f"{path}/maxUnackedMessagesOnConsumer")[1] == 2
        c = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        p = client.create_producer(topic, batching_enabled=False)
        for i in range(6):
            p.send(f"m{i}".encode())
        held = [c.receive(5000), c.receive(5000)]
        with pytest.raises(pulsar.Timeout):
            c.receive(1000)
        c.acknowledge(held[0])
        c.receive(5000)  # one more once one is acknowledged
        assert call(s, "DELETE", f"{path}/maxUnackedMessagesOnConsumer")[0] == 204
        c.close()

        # The subscription as a whole: 3 between two consumers.
        assert call(s, "POST", f"{ns}/maxUnackedMessagesPerSubscription", b"3")[0] == 204
        assert call(s, "GET", f"{path}/maxUnackedMessagesOnSubscription?applied=true")[1] == 3
        c1 = client.subscribe(topic, "t", consumer_type=pulsar.ConsumerType.Shared,
                              initial_position=InitialPosition.Earliest, receiver_queue_size=10)
        c2 = client.subscribe(topic, "t", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10)
        got = 0
        for c in (c1, c2):
            while True:
                try:
                    c.receive(1000)
                    got += 1
                except pulsar.Timeout:
                    break
        assert got == 3, got
        assert call(s, "DELETE", f"{ns}/maxUnackedMessagesPerSubscription")[0] == 204
    finally:
        client.close()


def test_encryption_required_and_bundle_delete(fresh_strobe):
    s = fresh_strobe
    ns = "/admin/v2/namespaces/public/crypt"
    assert call(s, "PUT", ns)[0] == 204
    client = pulsar.Client(s.url, operation_timeout_seconds=5)
    try:
        assert call(s, "POST", f"{ns}/encryptionRequired", b"true")[0] == 204
        assert call(s, "GET", f"{ns}/encryptionRequired")[1] is True
        with pytest.raises(Exception):
            client.create_producer("persistent://public/crypt/plain")
        assert call(s, "POST", f"{ns}/encryptionRequired", b"false")[0] == 204
        client.create_producer("persistent://public/crypt/plain").close()

        b = call(s, "GET", f"{ns}/bundles")[1]["boundaries"]
        bundles = [f"{lo}_{hi}" for lo, hi in zip(b, b[1:])]
        topics = call(s, "GET", "/admin/v2/broker-stats/topics")[1]["public/crypt"]
        full = [x for x in bundles if x in topics][0]
        assert call(s, "DELETE", f"{ns}/{full}")[0] == 409
        assert call(s, "DELETE", f"{ns}/{full}?force=true")[0] == 204
        assert "persistent://public/crypt/plain" not in call(s, "GET", "/admin/v2/persistent/public/crypt")[1]
        assert call(s, "DELETE", f"{ns}/0x00000000_0x00000001")[0] in (404, 412)
    finally:
        client.close()


def test_strobe_admin_topic_quota_auto_subscription_schema_and_cluster_verbs(fresh_strobe):
    """The pulsar-admin verbs for the remaining topic-level policies and the
    clusters, each followed by its effect or by the API's own reading."""
    import json
    import os
    import subprocess
    s = fresh_strobe

    def admin(*args, ok=True):
        r = subprocess.run([os.environ["STROBE_BIN"], "admin", "--url", f"http://127.0.0.1:{s.http_port}",
                            "--json", *args], capture_output=True, text=True, timeout=30)
        assert (r.returncode == 0) == ok, (args, r.stdout, r.stderr)
        return json.loads(r.stdout) if ok and r.stdout.strip() else r.stderr

    topic = "persistent://public/default/cli-more"
    client = pulsar.Client(s.url, operation_timeout_seconds=5)
    try:
        client.create_producer(topic).close()
        # Backlog quota: a producer_exception quota of 1 KiB refuses a producer over it.
        admin("topics", "set-backlog-quota", topic, "--limit-size", "1024", "-p", "producer_exception")
        assert admin("topics", "get-backlog-quotas", topic)["destination_storage"]["policy"] == "producer_exception"
        admin("namespaces", "set-backlog-quota", "public/default", "--limit-time", "3600",
              "-p", "producer_request_hold")
        applied = admin("topics", "get-backlog-quotas", topic, "--applied")
        assert set(applied) == {"destination_storage", "message_age"}, applied
        client.subscribe(topic, "holder").close()
        p = client.create_producer(topic)
        for _ in range(4):
            p.send(b"x" * 600)
        p.close()
        wait_for("the quota refusing a producer", lambda: _refused(client, topic))
        admin("topics", "remove-backlog-quota", topic)
        admin("namespaces", "remove-backlog-quota", "public/default", "--backlog-quota-type", "message_age")
        assert admin("topics", "get-backlog-quotas", topic) == {}
        client.create_producer(topic).close()

        # Auto subscription creation off for the topic: a new subscription is refused.
        admin("topics", "set-auto-subscription-creation", topic, "--disable")
        assert admin("topics", "get-auto-subscription-creation", topic) == {"allowAutoSubscriptionCreation": False}
        with pytest.raises(Exception):
            client.subscribe(topic, "brand-new")
        client.subscribe(topic, "holder").close()
        admin("topics", "remove-auto-subscription-creation", topic)
        assert admin("topics", "get-auto-subscription-creation", topic, "--applied") == {
            "allowAutoSubscriptionCreation": True}
        client.subscribe(topic, "brand-new").close()

        # Schema policies.
        admin("topics", "set-schema-compatibility-strategy", topic, "-s", "always_incompatible")
        assert admin("topics", "get-schema-compatibility-strategy", topic) == "ALWAYS_INCOMPATIBLE"
        admin("topics", "remove-schema-compatibility-strategy", topic)
        assert admin("topics", "get-schema-compatibility-strategy", topic) is None
        admin("topics", "set-schema-validation-enforced", topic, "--enable")
        assert admin("topics", "get-schema-validation-enforced", topic) is True
        assert "give exactly one" in admin("topics", "set-schema-validation-enforced", topic, ok=False)
    finally:
        client.close()

    assert admin("clusters", "list") == ["standalone"]
    assert admin("clusters", "get", "standalone")["brokerServiceUrl"] == s.url
    admin("clusters", "create", "standalone", "--url", f"http://127.0.0.1:{s.http_port}")
    admin("clusters", "update", "standalone", "--broker-url", s.url)
    assert "412" in admin("clusters", "delete", "standalone", ok=False)
    assert "404" in admin("clusters", "get", "elsewhere", ok=False)
    assert "400" in admin("clusters", "create", "elsewhere", ok=False)


def _refused(client, topic):
    try:
        client.create_producer(topic).close()
        return False
    except pulsar.ProducerBlockedQuotaExceededException:
        return True


def test_a_ttl_set_on_an_idle_topic_expires_its_backlog(strobe):
    """The subscriptions' expiry check runs only while the topic has a TTL:
    one set on a topic where nothing else happens must still wake them."""
    client = pulsar.Client(strobe.url)
    try:
        topic = "persistent://public/default/topic-ttl-idle"
        path = "/admin/v2/persistent/public/default/topic-ttl-idle"
        client.subscribe(topic, "idle").close()
        p = client.create_producer(topic)
        for _ in range(3):
            p.send(b"old")
        p.close()
        time.sleep(2)
        backlog = lambda: call(strobe, "GET", f"{path}/stats")[1]["subscriptions"]["idle"]["msgBacklog"]
        assert backlog() == 3
        assert call(strobe, "POST", f"{path}/messageTTL?messageTTL=1")[0] == 204
        # Nothing is asked of the subscription meanwhile (a stats call wakes
        # it too): only the TTL's own nudge can start its check.
        time.sleep(7)
        assert backlog() == 0
        assert call(strobe, "DELETE", f"{path}/messageTTL")[0] == 204
    finally:
        client.close()
