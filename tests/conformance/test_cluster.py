"""A cluster of three `strobe broker`s on a private etcd and a shared store,
driven by the official Python client: lookups from any broker, admin from any
broker (forwarded to a topic's owner), a broker killed with SIGKILL, and a broker frozen with SIGSTOP past
its lease (split brain). The client is the judge: every message it saw
acknowledged must be in the log."""
import os
import threading
import time

import pulsar
import pytest

from cluster_harness import Cluster, Traffic, drain


# These tests follow where topics live; the load manager moving bundles
# meanwhile is tested on its own (test_a_joining_broker_gets_bundles).
NO_BALANCER = "load_balancer_enabled = false\n"


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(n=3, ttl=4, config=NO_BALANCER)
    yield c
    c.stop()


@pytest.fixture
def fresh_cluster():
    c = Cluster(n=3, ttl=4, config=NO_BALANCER)
    yield c
    c.stop()


_n = [0]


def unique(prefix):
    _n[0] += 1
    return f"{prefix}-{os.getpid()}-{_n[0]}-{int(time.time() * 1000) % 100000}"


def all_urls(c):
    """A service URL naming every live broker (the C++ client rotates over them)."""
    return "pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in c.live())


def test_every_broker_is_registered_and_agrees(cluster):
    for b in cluster.brokers:
        status, body, _ = b.http("GET", "/admin/v2/brokers/test-cluster")
        assert status == 200, body
        assert body == sorted(x.id for x in cluster.brokers)


def test_partitions_spread_over_the_brokers_and_any_broker_reaches_them(cluster):
    name = unique("spread")
    topic = f"persistent://public/default/{name}"
    status, body, _ = cluster.brokers[1].http("PUT", f"/admin/v2/persistent/public/default/{name}/partitions", 12)
    assert status in (200, 204), body
    # Every broker sees the partitioned topic (the metadata follows etcd by watch).
    for b in cluster.brokers:
        deadline = time.time() + 5
        while True:
            status, body, _ = b.http("GET", f"/admin/v2/persistent/public/default/{name}/partitions")
            if status == 200 and body.get("partitions") == 12:
                break
            assert time.time() < deadline, (b.id, status, body)
            time.sleep(0.1)
    owners = {cluster.owner(f"{topic}-partition-{i}").id for i in range(12)}
    assert len(owners) >= 2, f"12 partitions in 4 bundles all went to {owners}"

    reader = pulsar.Client(cluster.brokers[2].url, operation_timeout_seconds=15)
    consumer = reader.subscribe(topic, "all", initial_position=pulsar.InitialPosition.Earliest)
    sent = set()
    for b in cluster.brokers:
        # Each client is given one broker only, and still reaches every partition.
        client = pulsar.Client(b.url, operation_timeout_seconds=15)
        producer = client.create_producer(topic, batching_enabled=False)
        for k in range(24):
            payload = f"{b.id}-{k}"
            producer.send(payload.encode(), partition_key=str(k))
            sent.add(payload)
        client.close()
    got = drain(consumer)
    reader.close()
    assert set(got) == sent, (len(got), len(sent))


def test_admin_answers_from_any_broker_and_topic_requests_reach_the_owner(cluster):
    """Namespaces made on one broker are seen by all; a topic's admin
    requests asked of any broker are served by its owner."""
    ns = unique("ns")
    status, body, _ = cluster.brokers[0].http("PUT", f"/admin/v2/namespaces/public/{ns}")
    assert status in (200, 204), body
    for b in cluster.brokers:
        deadline = time.time() + 5
        while True:
            status, body, _ = b.http("GET", "/admin/v2/namespaces/public")
            if status == 200 and f"public/{ns}" in body:
                break
            assert time.time() < deadline, (b.id, body)
            time.sleep(0.1)
    topic = f"persistent://public/{ns}/t"
    client = pulsar.Client(cluster.brokers[0].url, operation_timeout_seconds=15)
    producer = client.create_producer(topic)
    producer.send(b"x")
    owner = cluster.owner(topic)
    other = next(b for b in cluster.brokers if b is not owner)
    # A broker that does not own the topic forwards the request to the owner
    # (no redirect for the client to follow: urllib's PUT, curl without -L).
    status, body, headers = other.http("GET", f"/admin/v2/persistent/public/{ns}/t/stats", follow=False)
    assert status == 200, (status, body, headers)
    assert len(body["publishers"]) == 1
    status, body, _ = other.http("PUT", f"/admin/v2/persistent/public/{ns}/t/compaction", follow=False)
    assert status in (200, 204), (status, body)
    status, body, _ = owner.http("GET", f"/admin/v2/persistent/public/{ns}/t/stats")
    assert status == 200 and len(body["publishers"]) == 1, body
    client.close()


class Sender:
    """Sends numbered messages asynchronously at about `rate` per second and
    records which were acknowledged, and when."""

    def __init__(self, producer, prefix, rate=200):
        self.producer = producer
        self.prefix = prefix
        self.rate = rate
        self.acked = {}
        self.failed = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        i = 0
        while not self.stop.is_set():
            payload = f"{self.prefix}-{i}"
            i += 1

            def done(res, msg_id, payload=payload):
                with self.lock:
                    if res == pulsar.Result.Ok:
                        self.acked[payload] = time.time()
                    else:
                        self.failed.append((payload, str(res)))
            try:
                self.producer.send_async(payload.encode(), done)
            except Exception as e:  # the queue is full while the topic moves
                with self.lock:
                    self.failed.append((payload, repr(e)))
            time.sleep(1 / self.rate)

    def finish(self):
        self.stop.set()
        self.thread.join()
        try:
            self.producer.flush()
        except Exception:
            pass

    def acked_after(self, t):
        with self.lock:
            later = [ts for ts in self.acked.values() if ts > t]
        return min(later) if later else None


def wait_until(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_policy_set_through_one_broker_applies_on_the_owner_within_a_second(cluster):
    """Issue 44: tenancy policies are documents every broker follows by
    watch. A namespace's producer limit set through a broker that does not
    own the topic refuses the owner's next producer within a second."""
    ns = unique("tenancy")
    status, body, _ = cluster.brokers[0].http("PUT", f"/admin/v2/namespaces/public/{ns}")
    assert status in (200, 204), body
    topic = f"persistent://public/{ns}/t"
    client = pulsar.Client(all_urls(cluster), operation_timeout_seconds=15)
    try:
        first = client.create_producer(topic)
        owner = cluster.owner(topic)
        other = next(b for b in cluster.brokers if b is not owner)
        status, body, _ = other.http("POST", f"/admin/v2/namespaces/public/{ns}/maxProducersPerTopic", 1)
        assert status == 204, body
        set_at = time.monotonic()
        refused_after = None
        while time.monotonic() - set_at < 5:
            try:
                client.create_producer(topic).close()
            except pulsar.ProducerBusy:
                refused_after = time.monotonic() - set_at
                break
            time.sleep(0.02)
        print(f"limit applied on the owner {refused_after} s after it was set elsewhere")
        assert refused_after is not None and refused_after < 1.0, refused_after
        first.close()
    finally:
        client.close()


def test_kill9_of_an_owner_loses_nothing_acknowledged(fresh_cluster):
    c = fresh_cluster
    topic = f"persistent://public/default/{unique('kill9')}"
    client = pulsar.Client(all_urls(c), operation_timeout_seconds=30)
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0,
                                      max_pending_messages=100000)
    owner = c.owner(topic)
    sender = Sender(producer, "k", rate=200)
    wait_until(lambda: len(sender.acked) > 200, 20, "acks before the kill")
    killed_at = time.time()
    owner.kill9()
    wait_until(lambda: sender.acked_after(killed_at + 0.2) is not None, 60, "acks after the kill")
    gap = sender.acked_after(killed_at + 0.2) - killed_at
    print(f"\nkill -9 of the owner: traffic flowed again after {gap:.2f} s (lease TTL {c.ttl} s)")
    time.sleep(1)
    sender.finish()
    new_owner = c.owner(topic)
    assert new_owner is not owner
    reader = pulsar.Client(all_urls(c), operation_timeout_seconds=30)
    consumer = reader.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
    got = set(drain(consumer))
    missing = [p for p in sender.acked if p not in got]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}\n{c.logs()}"
    assert gap < c.ttl + 8, f"takeover took {gap:.1f} s"
    reader.close()
    client.close()


def test_a_frozen_owner_acknowledges_nothing_once_another_broker_took_over(fresh_cluster):
    c = fresh_cluster
    status, body, _ = c.brokers[0].http("POST", "/admin/v2/namespaces/public/default/deduplication", True)
    assert status in (200, 204), body
    topic = f"persistent://public/default/{unique('freeze')}"
    owner = c.owner(topic)
    others = [b for b in c.brokers if b is not owner]
    # Client A reaches the cluster through the owner alone, client B through all.
    client_a = pulsar.Client(owner.url, operation_timeout_seconds=30)
    client_b = pulsar.Client(all_urls(c), operation_timeout_seconds=30)
    pa = client_a.create_producer(topic, producer_name="frozen-a", batching_enabled=False,
                                  send_timeout_millis=0, max_pending_messages=100000)
    pb = client_b.create_producer(topic, producer_name="frozen-b", batching_enabled=False,
                                  send_timeout_millis=0, max_pending_messages=100000)
    sa, sb = Sender(pa, "a", rate=100), Sender(pb, "b", rate=100)
    wait_until(lambda: len(sa.acked) > 50 and len(sb.acked) > 50, 20, "acks before the freeze")
    owner.stop_signal()
    frozen_at = time.time()
    try:
        # Past the lease, another broker takes the topic when a third client uses it.
        time.sleep(c.ttl + 1.5)
        client_c = pulsar.Client("pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in others),
                                 operation_timeout_seconds=30)
        pc = client_c.create_producer(topic, producer_name="fresh-c", batching_enabled=False)
        for i in range(50):
            pc.send(f"c-{i}".encode())
        new_owner = c.owner(topic, among=others)
        assert new_owner is not owner
    finally:
        owner.cont_signal()
    resumed_at = time.time()
    # The resumed broker must fail or drop what it still holds; clients move on.
    wait_until(lambda: sa.acked_after(resumed_at) is not None and sb.acked_after(resumed_at) is not None,
               60, "both producers acknowledged again after the resume")
    time.sleep(1)
    sa.finish()
    sb.finish()
    print(f"\nfrozen {resumed_at - frozen_at:.1f} s; a failed {len(sa.failed)}, b failed {len(sb.failed)}")
    reader = pulsar.Client("pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in others),
                           operation_timeout_seconds=30)
    consumer = reader.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
    got = drain(consumer)
    counts = {}
    for p in got:
        counts[p] = counts.get(p, 0) + 1
    acked = list(sa.acked) + list(sb.acked) + [f"c-{i}" for i in range(50)]
    missing = [p for p in acked if p not in counts]
    twice = [p for p, n in counts.items() if n > 1]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}\n{c.logs()}"
    assert not twice, f"{len(twice)} messages in the log twice, e.g. {twice[:5]}"
    # The resumed broker noticed it lost the topic and registered again.
    log = owner.log_text()
    evidence = [l for l in log.splitlines() if any(k in l for k in ("fenced", "Fenced", "owns nothing", "no longer owns", "registered"))]
    print("\n".join(evidence[-12:]))
    assert "no longer owns" in log or "fenced" in log.lower(), log[-3000:]
    wait_until(lambda: owner.log_text().count("registered") >= 2, 10, "the resumed broker registering again")
    for cl in (client_a, client_b, client_c, reader):
        cl.close()


def test_sigterm_releases_bundles_at_once(fresh_cluster):
    c = fresh_cluster
    topic = f"persistent://public/default/{unique('term')}"
    client = pulsar.Client(all_urls(c), operation_timeout_seconds=30)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"before")
    owner = c.owner(topic)
    stopped_at = time.time()
    assert owner.terminate() == 0, owner.log_text()[-3000:]
    producer.send(b"after")
    took = time.time() - stopped_at
    print(f"\nSIGTERM of the owner: the next send was acknowledged after {took:.2f} s")
    # Released bundles move without waiting for the lease to expire.
    assert took < c.ttl, f"{took:.1f} s"
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    assert drain(consumer) == ["before", "after"]
    client.close()


def s3_env():
    endpoint = os.environ.get("STROBE_TEST_S3_ENDPOINT")
    if not endpoint:
        pytest.fail("STROBE_TEST_S3_ENDPOINT must name an S3 server (tests/run-all.sh starts moto)")
    return endpoint


def test_a_cluster_on_s3_serves_and_survives_a_broker_loss():
    import urllib.request
    endpoint = s3_env()
    bucket = unique("strobe-cluster").lower()
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=10).close()
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "test"),
        "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
        "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        "AWS_ALLOW_HTTP": "true",
    }
    c = Cluster(n=3, ttl=4, storage=f"s3://{bucket}/strobe", env=env, config=NO_BALANCER)
    try:
        topic = f"persistent://public/default/{unique('s3')}"
        client = pulsar.Client(all_urls(c), operation_timeout_seconds=30)
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0)
        for i in range(100):
            producer.send(f"m-{i}".encode())
        owner = c.owner(topic)
        owner.kill9()
        for i in range(100, 150):
            producer.send(f"m-{i}".encode())
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        got = drain(consumer)
        assert sorted(set(got)) == sorted(f"m-{i}" for i in range(150)), c.logs()
        client.close()
    finally:
        c.stop()


def test_a_joining_broker_gets_bundles_without_clients_noticing():
    """The load manager moves bundles to brokers that join (by PIP-307
    transfers): producers see no error and nothing is lost."""
    c = Cluster(n=1, ttl=4, config="load_balancer_interval_secs = 1\n")
    try:
        topics = [f"persistent://public/default/join-{os.getpid()}-{i}" for i in range(12)]
        client = pulsar.Client(c.brokers[0].url, operation_timeout_seconds=30)
        producers = [client.create_producer(t, batching_enabled=False, send_timeout_millis=0) for t in topics]
        for p in producers:
            p.send(b"before")
        assert {c.owner(t).id for t in topics} == {"broker-0"}
        c.add_broker()
        c.add_broker()
        deadline = time.time() + 30
        while True:
            for i, p in enumerate(producers):
                p.send(f"during-{i}".encode())
            owners = {c.owner(t).id for t in topics}
            if len(owners) == 3:
                break
            assert time.time() < deadline, f"owners still {owners}\n{c.logs()}"
            time.sleep(0.5)
        for p in producers:
            p.send(b"after")
        consumer = client.subscribe(topics, "s", initial_position=pulsar.InitialPosition.Earliest)
        got = drain(consumer)
        assert got.count("before") == 12 and got.count("after") == 12, got
        moved = sum(b.log_text().count("bundle transferred") for b in c.brokers)
        print(f"\n{moved} bundles moved to the joining brokers; owners now {sorted(owners)}")
        client.close()
    finally:
        c.stop()


def test_the_load_manager_sheds_a_busy_broker_by_message_rate():
    """Two brokers own two bundles each, but only one broker's bundles carry
    traffic: the load manager moves one of its busy bundles to the other
    broker (by transfer: no send fails, nothing is lost), and the two busy
    bundles end on different brokers and stay there."""
    # No grace period: the count rule's own moves must not pin the busy bundles.
    c = Cluster(n=2, ttl=4, config="load_balancer_interval_secs = 1\nstats_update_interval_secs = 1\n"
                                   "load_balancer_shedding_grace_period_minutes = 0\n")
    try:
        ns = f"rates-{os.getpid()}"
        status, body, _ = c.brokers[0].http("PUT", f"/admin/v2/namespaces/public/{ns}",
                                            {"bundles": {"numBundles": 4}})
        assert status in (200, 204), body
        by_bundle = {}
        for i in range(200):
            name = f"t{i}"
            status, bundle, _ = c.brokers[0].http(
                "GET", f"/lookup/v2/topic/persistent/public/{ns}/{name}/bundle")
            assert status == 200, bundle
            by_bundle.setdefault(bundle, f"persistent://public/{ns}/{name}")
            if len(by_bundle) == 4:
                break
        assert len(by_bundle) == 4, by_bundle
        client = pulsar.Client(all_urls(c), operation_timeout_seconds=30)
        topics = list(by_bundle.values())
        producers = {t: client.create_producer(t, batching_enabled=False, send_timeout_millis=0,
                                               max_pending_messages=100000) for t in topics}
        consumers = {t: client.subscribe(t, "s") for t in topics}
        # Bundle counts settle at two each (placement and the count rule).
        deadline = time.time() + 30
        while True:
            owners = {t: c.owner(t).id for t in topics}
            counts = sorted(list(owners.values()).count(b.id) for b in c.brokers)
            if counts == [2, 2]:
                break
            assert time.time() < deadline, f"owners {owners}\n{c.logs()}"
            time.sleep(0.5)
        busy_broker = owners[topics[0]]
        busy = [t for t in topics if owners[t] == busy_broker]
        traffic = Traffic([producers[t] for t in busy], [consumers[t] for t in busy], burst=10).start()
        deadline = time.time() + 40
        while len({c.owner(t).id for t in busy}) < 2:
            assert time.time() < deadline, f"the busy bundles stayed on {busy_broker}\n{c.logs()}"
            time.sleep(0.5)
        moves = sum(b.log_text().count("load manager: moving a bundle") for b in c.brokers)
        # Settled: the busy bundles stay apart (equal loads never swap back).
        time.sleep(6)
        assert len({c.owner(t).id for t in busy}) == 2
        missing = traffic.finish()
        assert not traffic.failed, traffic.failed[:5]
        assert not missing, f"{len(missing)} acknowledged messages not received, e.g. {missing[:5]}"
        later = sum(b.log_text().count("load manager: moving a bundle") for b in c.brokers)
        assert later - moves <= 1, f"{later - moves} more moves after the busy bundles parted\n{c.logs()}"
        print(f"\nshed by rate: {len(traffic.acked)} acknowledged, none lost; {later} moves in all")
        client.close()
    finally:
        c.stop()



def one_topic_per_bundle(c, ns, n):
    """A namespace of `n` bundles and a topic name in each: {bundle: topic}."""
    status, body, _ = c.brokers[0].http("PUT", f"/admin/v2/namespaces/public/{ns}",
                                        {"bundles": {"numBundles": n}})
    assert status in (200, 204), body
    by_bundle = {}
    for i in range(400):
        status, bundle, _ = c.brokers[0].http(
            "GET", f"/lookup/v2/topic/persistent/public/{ns}/t{i}/bundle")
        assert status == 200, bundle
        by_bundle.setdefault(bundle, f"persistent://public/{ns}/t{i}")
        if len(by_bundle) == n:
            return by_bundle
    raise AssertionError(f"no topic in every bundle: {by_bundle}")


def bundle_counts(c, by_bundle):
    """Each bundle's owner, and the sorted count of bundles per broker."""
    owners = {b: c.owner(t).id for b, t in by_bundle.items()}
    return owners, sorted(list(owners.values()).count(b.id) for b in c.brokers)


def test_the_load_manager_leaves_an_operators_transfer_in_place():
    """An operator moves a bundle onto the broker that already owns as many
    as the other, so bundle counts become uneven (3 against 1). The load
    manager evens them again, but by moving another bundle: the operator's
    stays where it was put for the shedding grace period. And it moves
    nothing until the imbalance held for its hit-count threshold of rounds."""
    c = Cluster(n=2, ttl=4, config="load_balancer_interval_secs = 1\nstats_update_interval_secs = 1\n"
                                   "load_balancer_shedding_condition_hit_count_threshold = 5\n")
    try:
        ns = f"grace-{os.getpid()}"
        by_bundle = one_topic_per_bundle(c, ns, 4)
        client = pulsar.Client(all_urls(c), operation_timeout_seconds=30)
        producers = [client.create_producer(t, batching_enabled=False, send_timeout_millis=0)
                     for t in by_bundle.values()]
        for p in producers:
            p.send(b"placed")
        deadline = time.time() + 40
        while True:
            owners, counts = bundle_counts(c, by_bundle)
            if counts == [2, 2]:
                break
            assert time.time() < deadline, f"owners {owners}\n{c.logs()}"
            time.sleep(0.5)
        # The load manager's own moves are in their grace period too: the
        # operator moves a bundle to the broker holding the most bundles no
        # transfer brought, so that one of those can even the counts.
        lines = [line for b in c.brokers for line in b.log_text().splitlines()
                 if "bundle transferred here" in line]
        settled = {b for b in by_bundle if any(f"{ns}/{b}" in line for line in lines)}
        dst = max(c.brokers, key=lambda x: sum(1 for b, o in owners.items()
                                                if o == x.id and b not in settled))
        src = c.brokers[1] if dst is c.brokers[0] else c.brokers[0]
        placed = next(b for b, o in owners.items() if o == src.id)
        # Every other bundle carries a little traffic, so the operator's is
        # the coldest: the one the count rule would move back without the
        # grace period.
        stop = threading.Event()

        def trickle():
            while not stop.is_set():
                for b, p in zip(by_bundle, producers):
                    if b != placed:
                        p.send_async(b"warm", None)
                time.sleep(0.05)

        warm = threading.Thread(target=trickle, daemon=True)
        warm.start()
        time.sleep(3)
        moves_before = sum(b.log_text().count("load manager: moving a bundle") for b in c.brokers)
        status, body, _ = src.http(
            "PUT", f"/admin/v2/namespaces/public/{ns}/{placed}/unload?destinationBroker={dst.id}")
        assert status in (200, 204), body
        assert c.owner(by_bundle[placed]).id == dst.id
        # Five rounds of one second must see the imbalance before a move.
        time.sleep(2)
        moves = sum(b.log_text().count("load manager: moving a bundle") for b in c.brokers)
        assert moves == moves_before, f"a move within 2 s of the imbalance\n{c.logs()}"
        deadline = time.time() + 30
        while True:
            owners, counts = bundle_counts(c, by_bundle)
            assert owners[placed] == dst.id, f"the operator's bundle was moved\n{c.logs()}"
            if counts == [2, 2]:
                break
            assert time.time() < deadline, f"counts stayed uneven: {owners}\n{c.logs()}"
            time.sleep(0.5)
        time.sleep(4)
        assert c.owner(by_bundle[placed]).id == dst.id, c.logs()
        stop.set()
        warm.join()
        for p in producers:
            p.send(b"after")
        print(f"\nthe operator's bundle stayed on {dst.id}; another one moved to {src.id}")
        client.close()
    finally:
        c.stop()
