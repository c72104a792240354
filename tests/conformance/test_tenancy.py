"""Issue 44: the controls operators of a shared cluster rely on, through the
official client: publish and dispatch rates, producer, consumer,
subscription and topic limits (with the errors the client surfaces), a
topic-level policy over its namespace's, and inactive topics deleted on
time. Rates are measured over 10 s after a 2 s warm-up (a limiter starts
with one period's tokens, as Pulsar's do)."""
import threading
import time

import pulsar
import pytest

from test_admin import call

WARMUP = 2.0
WINDOW = 10.0


def make_namespace(strobe, ns):
    status, body = call(strobe, "PUT", f"/admin/v2/namespaces/public/{ns}")
    assert status in (204, 409), body


def publish_for(client, topic, seconds, counts, stop, batch=100):
    """Sends as fast as the broker lets this producer, recording the time of
    each acknowledged message in `counts`."""
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=batch,
        batching_max_publish_delay_ms=5,
        max_pending_messages=300,
        block_if_queue_full=True,
    )

    def done(res, _msg_id):
        if res == pulsar.Result.Ok:
            counts.append(time.monotonic())

    end = time.monotonic() + seconds
    while time.monotonic() < end and not stop.is_set():
        producer.send_async(b"x" * 100, done)
    producer.flush()
    producer.close()


def rate_in_window(stamps, start):
    return sum(1 for t in stamps if start + WARMUP <= t < start + WARMUP + WINDOW) / WINDOW


def test_a_publish_rate_holds_a_producer_and_not_another_namespace(strobe):
    make_namespace(strobe, "slow")
    make_namespace(strobe, "fast")
    assert call(strobe, "POST", "/admin/v2/namespaces/public/slow/publishRate",
                {"publishThrottlingRateInMsg": 1000, "publishThrottlingRateInByte": -1})[0] == 204
    assert call(strobe, "GET", "/admin/v2/namespaces/public/slow/publishRate")[1] == {
        "publishThrottlingRateInMsg": 1000, "publishThrottlingRateInByte": -1}
    # Two applications, two clients: a throttled topic pauses its
    # producer's connection (as Pulsar does), so producers sharing that
    # connection wait with it.
    client = pulsar.Client(strobe.url)
    other = pulsar.Client(strobe.url)
    try:
        slow, fast = [], []
        stop = threading.Event()
        start = time.monotonic()
        threads = [
            threading.Thread(target=publish_for,
                             args=(client, "persistent://public/slow/limited", WARMUP + WINDOW, slow, stop)),
            threading.Thread(target=publish_for,
                             args=(other, "persistent://public/fast/free", WARMUP + WINDOW, fast, stop)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        limited = rate_in_window(slow, start)
        free = rate_in_window(fast, start)
        print(f"publish rate 1000/s: limited {limited:.0f} msg/s, other namespace {free:.0f} msg/s")
        assert 900 <= limited <= 1100, limited
        assert free >= 5 * limited, (free, limited)
        status, stats = call(strobe, "GET", "/metrics")
        assert status == 200
        line = [l for l in stats.splitlines()
                if l.startswith("pulsar_publish_rate_limit_times") and "limited" in l]
        assert line and float(line[0].split()[-1]) > 0, line
    finally:
        client.close()
        other.close()


def test_a_subscription_dispatch_rate_holds_one_subscription(strobe):
    make_namespace(strobe, "dispatch")
    make_namespace(strobe, "undispatched")
    topics = {"limited": "persistent://public/dispatch/backlog",
              "free": "persistent://public/undispatched/backlog"}
    client = pulsar.Client(strobe.url)
    try:
        for name, topic in topics.items():
            client.subscribe(topic, name, consumer_type=pulsar.ConsumerType.Shared).close()
            producer = client.create_producer(topic, batching_enabled=False,
                                              block_if_queue_full=True)
            for i in range(15000):
                producer.send_async(b"m%d" % i, None)
            producer.flush()
            producer.close()
        status, stats = call(strobe, "GET", "/admin/v2/persistent/public/dispatch/backlog/stats")
        assert stats["msgInCounter"] == 15000, stats
        assert call(strobe, "POST", "/admin/v2/namespaces/public/dispatch/subscriptionDispatchRate",
                    {"dispatchThrottlingRateInMsg": 1000, "dispatchThrottlingRateInByte": -1,
                     "ratePeriodInSecond": 1, "relativeToPublishRate": False})[0] == 204
        stamps = {"limited": [], "free": []}

        def receive(name):
            c = client.subscribe(topics[name], name, consumer_type=pulsar.ConsumerType.Shared)
            end = time.monotonic() + WARMUP + WINDOW
            while time.monotonic() < end:
                try:
                    m = c.receive(timeout_millis=200)
                except pulsar.Timeout:
                    continue
                stamps[name].append(time.monotonic())
                c.acknowledge(m)
            c.close()

        start = time.monotonic()
        threads = [threading.Thread(target=receive, args=(n,)) for n in topics]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        rate = rate_in_window(stamps["limited"], start)
        print(f"subscription dispatch rate 1000/s: {rate:.0f} msg/s; the other namespace's "
              f"subscription took {len(stamps['free'])} messages")
        assert 900 <= rate <= 1100, rate
        assert len(stamps["free"]) == 15000
    finally:
        client.close()


def test_limits_refuse_with_the_errors_the_client_surfaces(strobe):
    make_namespace(strobe, "limits")
    base = "/admin/v2/namespaces/public/limits"
    for path, value in [("maxProducersPerTopic", 1), ("maxConsumersPerTopic", 3),
                        ("maxConsumersPerSubscription", 2), ("maxSubscriptionsPerTopic", 2)]:
        assert call(strobe, "POST", f"{base}/{path}", value)[0] == 204
        assert call(strobe, "GET", f"{base}/{path}")[1] == value
    assert call(strobe, "POST", f"{base}/maxProducersPerTopic", -1)[0] == 412
    topic = "persistent://public/limits/t"
    client = pulsar.Client(strobe.url, operation_timeout_seconds=5)
    try:
        p1 = client.create_producer(topic)
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
        s1 = client.subscribe(topic, "a", consumer_type=pulsar.ConsumerType.Shared)
        s2 = client.subscribe(topic, "a", consumer_type=pulsar.ConsumerType.Shared)
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "a", consumer_type=pulsar.ConsumerType.Shared)
        s3 = client.subscribe(topic, "b")
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "b2")
        s3.close()
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(topic, "c")
        for c in (s1, s2):
            c.close()
        p1.close()
        # Removed, the limit is the broker's again (none).
        assert call(strobe, "DELETE", f"{base}/maxProducersPerTopic")[0] == 204
        ps = [client.create_producer(topic) for _ in range(3)]
        for p in ps:
            p.close()
    finally:
        client.close()


def test_a_topic_level_policy_overrides_its_namespaces(strobe):
    make_namespace(strobe, "override")
    topic = "persistent://public/override/t"
    path = "/admin/v2/persistent/public/override/t"
    assert call(strobe, "POST", "/admin/v2/namespaces/public/override/maxProducersPerTopic", 1)[0] == 204
    assert call(strobe, "POST", f"{path}/maxProducers", 2)[0] == 404, "no such topic yet"
    client = pulsar.Client(strobe.url, operation_timeout_seconds=5)
    try:
        p1 = client.create_producer(topic)
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
        assert call(strobe, "GET", f"{path}/maxProducers?applied=true")[1] == 1
        assert call(strobe, "POST", f"{path}/maxProducers", 2)[0] == 204
        assert call(strobe, "GET", f"{path}/maxProducers")[1] == 2
        p2 = client.create_producer(topic)
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
        assert call(strobe, "DELETE", f"{path}/maxProducers")[0] == 204
        assert call(strobe, "GET", f"{path}/maxProducers")[1] is None
        p1.close()
        p2.close()
    finally:
        client.close()


def test_a_namespace_takes_no_more_topics_than_its_limit(strobe):
    make_namespace(strobe, "few")
    assert call(strobe, "POST", "/admin/v2/namespaces/public/few/maxTopicsPerNamespace", 3)[0] == 204
    assert call(strobe, "PUT", "/admin/v2/persistent/public/few/p/partitions", 2)[0] == 204
    status, body = call(strobe, "PUT", "/admin/v2/persistent/public/few/q/partitions", 2)
    assert status == 412 and body["reason"] == "Exceed maximum number of topics in namespace."
    client = pulsar.Client(strobe.url, operation_timeout_seconds=5)
    try:
        client.create_producer("persistent://public/few/one").close()
        with pytest.raises(pulsar.NotAllowedError):
            client.create_producer("persistent://public/few/two")
    finally:
        client.close()


@pytest.mark.strobe_config("broker_delete_inactive_topics_frequency_seconds = 1\n")
def test_inactive_topics_go_on_time_and_a_backlog_keeps_one(fresh_strobe):
    s = fresh_strobe
    make_namespace(s, "gc")
    assert call(s, "POST", "/admin/v2/namespaces/public/gc/inactiveTopicPolicies", {
        "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
        "maxInactiveDurationSeconds": 3, "deleteWhileInactive": True})[0] == 204
    client = pulsar.Client(s.url)
    try:
        client.create_producer("persistent://public/gc/bare").close()
        c = client.subscribe("persistent://public/gc/subscribed", "keep")
        c.close()
        listed = lambda: call(s, "GET", "/admin/v2/persistent/public/gc")[1]
        assert "persistent://public/gc/bare" in listed()
        deadline = time.monotonic() + 15
        while "persistent://public/gc/bare" in listed() and time.monotonic() < deadline:
            time.sleep(0.25)
        gone_after = 15 - (deadline - time.monotonic())
        assert "persistent://public/gc/bare" not in listed()
        assert gone_after >= 2.5, f"deleted after {gone_after:.1f} s, before its 3 s"
        assert "persistent://public/gc/subscribed" in listed(), "a subscription keeps it"

        # Caught-up mode: a backlog keeps the topic; once read, it goes.
        assert call(s, "POST", "/admin/v2/namespaces/public/gc/inactiveTopicPolicies", {
            "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
            "maxInactiveDurationSeconds": 2, "deleteWhileInactive": True})[0] == 204
        topic = "persistent://public/gc/backlog"
        c = client.subscribe(topic, "reader")
        c.close()
        p = client.create_producer(topic)
        p.send(b"unread")
        p.close()
        time.sleep(5)
        assert topic in listed(), "its subscription has not read everything"
        c = client.subscribe(topic, "reader")
        c.acknowledge(c.receive(timeout_millis=5000))
        c.close()
        deadline = time.monotonic() + 15
        while topic in listed() and time.monotonic() < deadline:
            time.sleep(0.25)
        assert topic not in listed()
        assert "persistent://public/gc/subscribed" not in listed(), "caught up too, so it went"
    finally:
        client.close()


def test_a_consumer_that_subscribes_too_often_is_refused(strobe):
    make_namespace(strobe, "churn")
    assert call(strobe, "POST", "/admin/v2/namespaces/public/churn/subscribeRate",
                {"subscribeThrottlingRatePerConsumer": 2, "ratePeriodInSecond": 30})[0] == 204
    topic = "persistent://public/churn/t"
    client = pulsar.Client(strobe.url, operation_timeout_seconds=5)
    try:
        for _ in range(2):
            client.subscribe(topic, "s", consumer_name="looping").close()
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(topic, "s", consumer_name="looping")
        # Another consumer is not charged for it.
        client.subscribe(topic, "s", consumer_name="other").close()
        _, metrics = call(strobe, "GET", "/metrics")
        line = [l for l in metrics.splitlines()
                if l.startswith("strobe_subscribe_rate_limit_times") and "churn" in l]
        assert line and float(line[0].split()[-1]) >= 1, line
    finally:
        client.close()


def test_strobe_admin_sets_reads_and_removes_the_policies(strobe):
    import json
    import os
    import subprocess

    def admin(*args):
        r = subprocess.run([os.environ["STROBE_BIN"], "admin", "--url", f"http://127.0.0.1:{strobe.http_port}",
                            "--json", *args], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout) if r.stdout.strip() else None

    make_namespace(strobe, "cli")
    admin("namespaces", "set-publish-rate", "public/cli", "--msg-publish-rate", "500")
    assert admin("namespaces", "get-publish-rate", "public/cli") == {
        "publishThrottlingRateInMsg": 500, "publishThrottlingRateInByte": -1}
    admin("namespaces", "set-max-consumers-per-subscription", "public/cli", "-c", "4")
    assert admin("namespaces", "get-max-consumers-per-subscription", "public/cli") == 4
    admin("namespaces", "set-inactive-topic-policies", "public/cli", "--enable-delete-while-inactive",
          "--max-inactive-duration", "5m", "--delete-mode", "delete_when_subscriptions_caught_up")
    assert admin("namespaces", "get-inactive-topic-policies", "public/cli") == {
        "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
        "maxInactiveDurationSeconds": 300, "deleteWhileInactive": True}
    admin("namespaces", "remove-publish-rate", "public/cli")
    assert admin("namespaces", "get-publish-rate", "public/cli") is None
    client = pulsar.Client(strobe.url)
    try:
        client.create_producer("persistent://public/cli/t").close()
    finally:
        client.close()
    admin("topics", "set-dispatch-rate", "public/cli/t", "--msg-dispatch-rate", "100")
    assert admin("topics", "get-dispatch-rate", "public/cli/t")["dispatchThrottlingRateInMsg"] == 100
    assert admin("topics", "get-max-producers", "public/cli/t", "--applied") == 0
    admin("topics", "remove-dispatch-rate", "public/cli/t")
    assert admin("topics", "get-dispatch-rate", "public/cli/t") is None
