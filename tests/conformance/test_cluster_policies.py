"""Issue 46 in a cluster: the topic-level policy and message routes asked of a
broker that does not own the topic reach its owner (forwarded) and take effect
there when the call returns; a namespace policy set on one broker reaches the
topics another broker has loaded (through the metadata watch). Checked with
the official client against the owner."""

import pulsar
import pytest

from cluster_harness import Cluster
from util import wait_for


@pytest.fixture(scope="module")
def cluster():
    # Bundles stay where they are put: no load manager moving them mid-test.
    c = Cluster(n=2, ttl=4, config="load_balancer_enabled = false\n")
    yield c
    c.stop()


def owner_and_other(cluster, topic):
    owner = cluster.owner(topic)
    other = next(b for b in cluster.live() if b is not owner)
    return owner, other


def test_topic_policies_set_on_another_broker_hold_on_the_owner(cluster):
    topic = "persistent://public/default/cluster-topic-policies"
    path = "/admin/v2/persistent/public/default/cluster-topic-policies"
    client = pulsar.Client(cluster.brokers[0].url, operation_timeout_seconds=20)
    try:
        client.create_producer(topic).close()
        owner, other = owner_and_other(cluster, topic)
        # Asked of the broker that does not own the topic: the owner answers.
        st, body, _ = other.http("POST", f"{path}/subscriptionTypesEnabled", ["Shared"])
        assert st == 204, body
        assert other.http("GET", f"{path}/subscriptionTypesEnabled")[1] == ["Shared"]
        assert owner.http("GET", f"{path}/subscriptionTypesEnabled")[1] == ["Shared"]
        # In force on the owner when the call returned: no waiting.
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive)
        client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared).close()
        assert other.http("DELETE", f"{path}/subscriptionTypesEnabled")[0] == 204
        client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive).close()

        # A topic TTL set through the other broker expires the owner's backlog.
        p = client.create_producer(topic)
        for _ in range(5):
            p.send(b"old")
        p.close()
        stats = lambda b: b.http("GET", f"{path}/stats")[1]["subscriptions"]["ex"]["msgBacklog"]
        assert stats(other) == 5
        assert other.http("POST", f"{path}/messageTTL?messageTTL=1")[0] == 204
        assert owner.http("GET", f"{path}/messageTTL")[1] == 1
        wait_for("the TTL on the owner", lambda: stats(owner) == 0)
        assert other.http("DELETE", f"{path}/messageTTL")[0] == 204
        assert owner.http("GET", f"{path}/messageTTL?applied=true")[1] == 0
    finally:
        client.close()


def test_a_namespace_policy_set_on_one_broker_reaches_the_others_topics(cluster):
    ns = "/admin/v2/namespaces/public/default"
    topic = "persistent://public/default/cluster-ns-policies"
    client = pulsar.Client(cluster.brokers[0].url, operation_timeout_seconds=20)
    try:
        client.create_producer(topic).close()
        owner, other = owner_and_other(cluster, topic)
        assert other.http("POST", f"{ns}/subscriptionTypesEnabled", ["Failover"])[0] == 204
        try:
            def refused():
                try:
                    client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared).close()
                    return False
                except pulsar.NotAllowedError:
                    return True
            wait_for("the namespace's subscription types on the owner", refused, timeout=20)
            client.subscribe(topic, "fo", consumer_type=pulsar.ConsumerType.Failover).close()
        finally:
            assert other.http("DELETE", f"{ns}/subscriptionTypesEnabled")[0] == 204
        wait_for("the namespace's types removed on the owner",
                 lambda: owner.http("GET", f"/admin/v2/persistent/public/default/cluster-ns-policies"
                                           "/subscriptionTypesEnabled?applied=true")[1] != ["Failover"])
        client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared).close()
    finally:
        client.close()


def test_message_routes_through_another_broker(cluster):
    topic = "persistent://public/default/cluster-messages"
    path = "/admin/v2/persistent/public/default/cluster-messages"
    client = pulsar.Client(cluster.brokers[0].url, operation_timeout_seconds=20)
    try:
        consumer = client.subscribe(topic, "s")
        p = client.create_producer(topic)
        ids = [p.send(f"m{i}".encode()) for i in range(3)]
        p.close()
        owner, other = owner_and_other(cluster, topic)
        st, last, _ = other.http("GET", f"{path}/lastMessageId")
        assert st == 200, last
        assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
        assert owner.http("GET", f"{path}/lastMessageId")[1] == last
        st, body, headers = other.http("GET", f"{path}/examinemessage?initialPosition=earliest&messagePosition=1")
        assert st == 200 and body == "m0", (st, body)
        st, body, _ = other.http("GET", f"{path}/backlog")
        assert st == 200, body
        assert other.http("POST", f"{path}/subscription/s/skip_all")[0] == 204
        assert owner.http("GET", f"{path}/stats")[1]["subscriptions"]["s"]["msgBacklog"] == 0
        consumer.close()
    finally:
        client.close()
