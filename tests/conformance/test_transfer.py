"""Topic transfer between brokers (PIP-307) with the official Python client:
a bundle moved back and forth under a producer and a consumer loses nothing,
keeps per-key order, and the client follows the assigned broker URL without
looking the topic up again."""
import logging
import os
import threading
import time

import pulsar
import pytest

from cluster_harness import Cluster, Traffic


@pytest.fixture(scope="module")
def cluster():
    # The tests move bundles themselves: no load manager moving them too.
    c = Cluster(n=3, ttl=4, config="load_balancer_enabled = false\n")
    yield c
    c.stop()


class Collect(logging.Handler):
    """Keeps the C++ client's log lines (it logs through a Python logger)."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


# The C++ client takes the logger of the first client made in a process for
# every later one: one logger and one handler for the whole module.
_LOG = logging.getLogger("pulsar-transfer-test")
_LOG.setLevel(logging.INFO)
_LOG.propagate = False
_LINES = Collect()
_LOG.addHandler(_LINES)


def client_with_log(url):
    """A client, and the index in the shared log where its lines start."""
    return pulsar.Client(url, operation_timeout_seconds=30, logger=_LOG), len(_LINES.lines)


def lookups(broker):
    status, body, _ = broker.http("GET", "/metrics")
    assert status == 200
    for line in body.splitlines():
        if line.startswith("strobe_lookups_total"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no strobe_lookups_total on /metrics")


SUB_TYPES = {
    "exclusive": pulsar.ConsumerType.Exclusive,
    "shared": pulsar.ConsumerType.Shared,
    "failover": pulsar.ConsumerType.Failover,
    "key_shared": pulsar.ConsumerType.KeyShared,
}


@pytest.mark.parametrize("kind", list(SUB_TYPES))
def test_transfers_back_and_forth_lose_nothing(cluster, kind):
    c = cluster
    name = f"transfer-{kind}-{os.getpid()}-{int(time.time() * 1000) % 100000}"
    topic = f"persistent://public/default/{name}"
    urls = "pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in c.brokers)
    client, log_start = client_with_log(urls)
    consumer = client.subscribe(topic, "s", consumer_type=SUB_TYPES[kind],
                                initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0,
                                      max_pending_messages=100000)
    status, bundle, _ = c.brokers[0].http("GET", f"/lookup/v2/topic/persistent/public/default/{name}/bundle")
    assert status == 200, bundle
    owner = c.owner(topic)

    acked, failed, received = {}, [], []
    lock = threading.Lock()
    stop = threading.Event()

    def send():
        i = 0
        while not stop.is_set():
            payload = f"{i}"
            key = f"k{i % 10}"

            def done(res, _id, payload=payload):
                with lock:
                    if res == pulsar.Result.Ok:
                        acked[payload] = True
                    else:
                        failed.append((payload, str(res)))
            producer.send_async(payload.encode(), done, partition_key=key)
            i += 1
            time.sleep(0.005)

    def receive():
        while not stop.is_set() or True:
            try:
                m = consumer.receive(timeout_millis=3000)
            except pulsar.Timeout:
                if stop.is_set():
                    return
                continue
            with lock:
                received.append((m.partition_key(), int(m.data())))
            consumer.acknowledge(m)

    sender = threading.Thread(target=send, daemon=True)
    receiver = threading.Thread(target=receive, daemon=True)
    sender.start()
    receiver.start()
    time.sleep(1)
    before = sum(lookups(b) for b in c.brokers)
    moves = 20
    for i in range(moves):
        dst = next(b for b in c.brokers if b is not owner and b.alive())
        via = c.brokers[i % len(c.brokers)]
        status, body, _ = via.http(
            "PUT", f"/admin/v2/namespaces/public/default/{bundle}/unload?destinationBroker={dst.id}")
        assert status == 204, (status, body, c.logs())
        owner = dst
        time.sleep(0.5)
    after = sum(lookups(b) for b in c.brokers)
    stop.set()
    sender.join()
    producer.flush()
    receiver.join(timeout=30)
    with lock:
        got = {str(v) for _, v in received}
        missing = [p for p in acked if p not in got]
    assert not failed, failed[:5]
    assert not missing, f"{len(missing)} acknowledged messages not received, e.g. {missing[:5]}"
    if kind == "key_shared" or kind in ("exclusive", "failover"):
        # Per-key order of first deliveries (redeliveries after a move may repeat).
        seen, last = set(), {}
        for key, v in received:
            if v in seen:
                continue
            seen.add(v)
            assert v > last.get(key, -1), f"key {key}: {v} after {last.get(key)}"
            last[key] = v
    assert any("assignedBrokerUrl" in line for line in _LINES.lines[log_start:]), \
        "the client was never told the assigned broker"
    # The clients followed the assigned URL: no lookups while the bundle moved.
    assert after == before, f"lookups served during the transfers: {after - before}"
    print(f"\n{kind}: {len(acked)} acknowledged, {len(received)} deliveries over {moves} transfers")
    client.close()


def test_transfer_to_the_owner_or_an_unknown_broker_is_refused(cluster):
    c = cluster
    topic = f"persistent://public/default/refused-{os.getpid()}"
    client = pulsar.Client(c.brokers[0].url, operation_timeout_seconds=30)
    client.create_producer(topic).send(b"x")
    owner = c.owner(topic)
    name = topic.rsplit("/", 1)[1]
    _, bundle, _ = owner.http("GET", f"/lookup/v2/topic/persistent/public/default/{name}/bundle")
    status, body, _ = owner.http("PUT", f"/admin/v2/namespaces/public/default/{bundle}/unload?destinationBroker={owner.id}")
    assert status >= 400, body
    status, body, _ = owner.http("PUT", f"/admin/v2/namespaces/public/default/{bundle}/unload?destinationBroker=nobody")
    assert status >= 400, body
    client.close()


def test_a_transfer_of_a_bundle_no_broker_owns_changes_nothing(cluster):
    # As Pulsar's unload of an unowned bundle: a no-op, not a server error
    # (the fault campaign's transfers of a split's fresh children got 500).
    c = cluster
    ns = f"unowned-{os.getpid()}"
    status, body, _ = c.brokers[0].http("PUT", f"/admin/v2/namespaces/public/{ns}")
    assert status in (200, 204), body
    status, bundles, _ = c.brokers[0].http("GET", f"/admin/v2/namespaces/public/{ns}/bundles")
    assert status == 200, bundles
    b = bundles["boundaries"]
    bundle = f"{b[0]}_{b[1]}"
    status, body, _ = c.brokers[0].http(
        "PUT", f"/admin/v2/namespaces/public/{ns}/{bundle}/unload?destinationBroker={c.brokers[1].id}")
    assert status == 204, (status, body)
    for broker in c.brokers:
        status, owned, _ = broker.http("GET", f"/admin/v2/brokers/test-cluster/{broker.id}/ownedNamespaces")
        assert status == 200, owned
        assert not [k for k in owned if k.startswith(f"public/{ns}/")], owned
    # The bundle is placed by the next lookup as ever.
    client = pulsar.Client(c.brokers[0].url, operation_timeout_seconds=30)
    client.create_producer(f"persistent://public/{ns}/t").send(b"x")
    client.close()


def test_plain_unload_frees_the_bundle_and_clients_look_up(cluster):
    c = cluster
    topic = f"persistent://public/default/plain-{os.getpid()}"
    name = topic.rsplit("/", 1)[1]
    client = pulsar.Client("pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in c.brokers),
                           operation_timeout_seconds=30)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"before")
    owner = c.owner(topic)
    _, bundle, _ = owner.http("GET", f"/lookup/v2/topic/persistent/public/default/{name}/bundle")
    status, body, _ = c.brokers[2].http("PUT", f"/admin/v2/namespaces/public/default/{bundle}/unload")
    assert status == 204, body
    producer.send(b"after")
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    got = []
    while True:
        try:
            m = consumer.receive(timeout_millis=3000)
        except pulsar.Timeout:
            break
        got.append(m.data())
        consumer.acknowledge(m)
    assert got == [b"before", b"after"]
    client.close()


def test_a_rolling_restart_under_load_gives_the_clients_no_error():
    """SIGTERM hands a broker's bundles to the others (PIP-307) before it
    exits; restarting all three in turn loses nothing and fails no send."""
    c = Cluster(n=3, ttl=4)
    try:
        topics = [f"persistent://public/default/rolling-{os.getpid()}-{i}" for i in range(4)]
        urls = "pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in c.brokers)
        client, _ = client_with_log(urls)
        consumers = [client.subscribe(t, "s", initial_position=pulsar.InitialPosition.Earliest) for t in topics]
        producers = [client.create_producer(t, batching_enabled=False, send_timeout_millis=0,
                                            max_pending_messages=100000) for t in topics]
        # Placement is settled: from here on every move should be a transfer.
        time.sleep(1)
        settled = len(_LINES.lines)
        acked, failed = set(), []
        lock = threading.Lock()
        stop = threading.Event()

        def send():
            i = 0
            while not stop.is_set():
                for n, p in enumerate(producers):
                    payload = f"{n}-{i}"

                    def done(res, _id, payload=payload):
                        with lock:
                            if res == pulsar.Result.Ok:
                                acked.add(payload)
                            else:
                                failed.append((payload, str(res)))
                    p.send_async(payload.encode(), done)
                i += 1
                time.sleep(0.01)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        time.sleep(1)
        for b in c.brokers:
            assert b.terminate() == 0, b.log_text()[-3000:]
            b.start()
            time.sleep(1.5)
        stop.set()
        sender.join()
        for p in producers:
            p.flush()
        got = set()
        for cons in consumers:
            while True:
                try:
                    m = cons.receive(timeout_millis=3000)
                except pulsar.Timeout:
                    break
                got.add(m.data().decode())
                cons.acknowledge(m)
        assert not failed, failed[:5]
        missing = acked - got
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
        handed = sum(b.log_text().count("bundle transferred") for b in c.brokers)
        assert handed > 0, "no bundle was handed over at shutdown"
        # The clients followed the assigned URLs: no lookup during the restarts.
        during = _LINES.lines[settled:]
        assert any("assignedBrokerUrl" in line for line in during), "the client was never told the assigned broker"
        looked_up = [line for line in during if "Lookup response" in line]
        assert not looked_up, f"{len(looked_up)} lookups during the rolling restart, e.g. {looked_up[:3]}"
        print(f"\nrolling restart: {len(acked)} acknowledged, none lost, {handed} bundle transfers at shutdown")
        client.close()
    finally:
        c.stop()


def test_partitioned_topics_readers_dedup_and_non_persistent_topics_move(cluster):
    """Every bundle of a namespace moves while a deduplicating producer
    writes to a partitioned topic, a reader tails another topic and a
    non-persistent topic carries traffic: the log holds every acknowledged
    message exactly once, the reader misses nothing and keeps its order, and
    the non-persistent topic works again after the moves."""
    c = cluster
    ns = f"moving-{os.getpid()}"
    status, body, _ = c.brokers[0].http("PUT", f"/admin/v2/namespaces/public/{ns}")
    assert status in (200, 204), body
    status, body, _ = c.brokers[0].http("POST", f"/admin/v2/namespaces/public/{ns}/deduplication", True)
    assert status in (200, 204), body
    parted = f"persistent://public/{ns}/parted"
    status, body, _ = c.brokers[1].http("PUT", f"/admin/v2/persistent/public/{ns}/parted/partitions", 4)
    assert status in (200, 204), body
    tailed = f"persistent://public/{ns}/tailed"
    volatile = f"non-persistent://public/{ns}/volatile"
    urls = "pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in c.brokers)
    client = pulsar.Client(urls, operation_timeout_seconds=30)
    p_parted = client.create_producer(parted, producer_name=f"dedup-{ns}", batching_enabled=False,
                                      send_timeout_millis=0, max_pending_messages=100000)
    p_tailed = client.create_producer(tailed, batching_enabled=False, send_timeout_millis=0)
    reader = client.create_reader(tailed, pulsar.MessageId.earliest)
    p_volatile = client.create_producer(volatile, batching_enabled=False)
    c_volatile = client.subscribe(volatile, "v")
    acked, tailed_sent = set(), []
    lock = threading.Lock()
    stop = threading.Event()

    def send():
        i = 0
        while not stop.is_set():
            payload = f"m-{i}"

            def done(res, _id, payload=payload):
                if res == pulsar.Result.Ok:
                    with lock:
                        acked.add(payload)
            p_parted.send_async(payload.encode(), done, partition_key=str(i))
            p_tailed.send(f"{i}".encode())
            with lock:
                tailed_sent.append(i)
            i += 1
            time.sleep(0.005)

    read = []

    def tail():
        while not stop.is_set() or len(read) < len(tailed_sent):
            try:
                m = reader.read_next(timeout_millis=3000)
            except pulsar.Timeout:
                if stop.is_set():
                    return
                continue
            read.append(int(m.data()))

    threads = [threading.Thread(target=send, daemon=True), threading.Thread(target=tail, daemon=True)]
    for t in threads:
        t.start()
    time.sleep(1)
    # Move every bundle of the namespace to another broker, twice.
    for _ in range(2):
        for b in c.brokers:
            status, owned, _ = b.http("GET", f"/admin/v2/brokers/test-cluster/{b.id}/ownedNamespaces")
            assert status == 200, owned
            for key in [k for k in owned if k.startswith(f"public/{ns}/")]:
                bundle = key.rsplit("/", 1)[1]
                dst = c.brokers[(c.brokers.index(b) + 1) % len(c.brokers)]
                status, body, _ = b.http(
                    "PUT", f"/admin/v2/namespaces/public/{ns}/{bundle}/unload?destinationBroker={dst.id}")
                assert status == 204, (status, body)
        time.sleep(0.5)
    stop.set()
    threads[0].join()
    p_parted.flush()
    threads[1].join(timeout=30)
    # The log: every acknowledged message exactly once (deduplication held across moves).
    counts = {}
    for i in range(4):
        r = client.create_reader(f"{parted}-partition-{i}", pulsar.MessageId.earliest)
        while True:
            try:
                m = r.read_next(timeout_millis=2000)
            except pulsar.Timeout:
                break
            counts[m.data().decode()] = counts.get(m.data().decode(), 0) + 1
        r.close()
    missing = [p for p in acked if p not in counts]
    twice = [p for p, n in counts.items() if n > 1]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    assert not twice, f"{len(twice)} messages stored twice, e.g. {twice[:5]}"
    # The reader read everything, in order, across the moves.
    assert read == tailed_sent, f"reader: {len(read)} read, {len(tailed_sent)} sent"
    # The non-persistent topic carries traffic again after the moves.
    p_volatile.send(b"after")
    assert c_volatile.receive(timeout_millis=10000).data() == b"after"
    print(f"\nmoved every bundle of {ns} twice: {len(acked)} acknowledged, {len(read)} read")
    client.close()


def test_a_bundle_split_in_the_cluster_disconnects_nobody(cluster):
    """A bundle split through a broker that does not own it: the owner
    splits it (Splitting, then Deleted with both halves Owned by it in one
    transaction) and serves on, so no client is closed or looks up again and
    nothing is lost; the old bundle is gone everywhere, and a half then moves
    to another broker like any bundle."""
    c = cluster
    ns = f"split-{os.getpid()}"
    status, body, _ = c.brokers[0].http("PUT", f"/admin/v2/namespaces/public/{ns}",
                                        {"bundles": {"numBundles": 1}})
    assert status in (200, 204), body
    whole = "0x00000000_0xffffffff"
    topics = [f"persistent://public/{ns}/t{i}" for i in range(8)]
    urls = "pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in c.brokers)
    client, log_start = client_with_log(urls)
    consumers = [client.subscribe(t, "s", consumer_type=pulsar.ConsumerType.Shared,
                                  initial_position=pulsar.InitialPosition.Earliest) for t in topics]
    producers = [client.create_producer(t, batching_enabled=False, send_timeout_millis=0,
                                        max_pending_messages=100000) for t in topics]
    owner = c.owner(topics[0])
    traffic = Traffic(producers, consumers).start()
    time.sleep(1)
    before = sum(lookups(b) for b in c.brokers)
    via = next(b for b in c.brokers if b is not owner)
    status, body, _ = via.http("PUT", f"/admin/v2/namespaces/public/{ns}/{whole}/split")
    assert status == 204, (status, body, c.logs())
    # Every broker follows the boundaries by watch (a moment behind the owner's answer).
    deadline = time.time() + 5
    while True:
        status, bundles, _ = via.http("GET", f"/admin/v2/namespaces/public/{ns}/bundles")
        if status == 200 and bundles["numBundles"] == 2 or time.time() > deadline:
            break
        time.sleep(0.05)
    assert status == 200 and bundles["numBundles"] == 2, bundles
    halves = [f"{lo}_{hi}" for lo, hi in zip(bundles["boundaries"], bundles["boundaries"][1:])]
    # The owner holds both halves; nobody holds the old bundle.
    status, owned, _ = owner.http("GET", f"/admin/v2/brokers/test-cluster/{owner.id}/ownedNamespaces")
    assert status == 200, owned
    assert sorted(k for k in owned if k.startswith(f"public/{ns}/")) == sorted(f"public/{ns}/{h}" for h in halves)
    for b in c.brokers:
        status, owned, _ = b.http("GET", f"/admin/v2/brokers/test-cluster/{b.id}/ownedNamespaces")
        assert f"public/{ns}/{whole}" not in owned, (b.id, owned)
    # Longer than the brokers' one-second ownership check, which closes the
    # topics of bundles a broker does not hold.
    time.sleep(2)
    after_split = sum(lookups(b) for b in c.brokers)
    closed = [line for line in _LINES.lines[log_start:] if "Broker notification of Closed" in line]
    assert not closed, closed[:3]
    assert after_split == before, f"lookups during the split: {after_split - before}"
    # Every topic is served by the owner, looked up through any broker.
    for t in topics:
        assert c.owner(t) is owner, t
    # The old bundle is no bundle any more.
    status, body, _ = owner.http("PUT", f"/admin/v2/namespaces/public/{ns}/{whole}/unload")
    assert status == 404, (status, body)
    # One half moves to another broker like any bundle.
    status, name_bundle, _ = owner.http("GET", f"/lookup/v2/topic/persistent/public/{ns}/t0/bundle")
    assert status == 200 and name_bundle in halves, name_bundle
    dst = next(b for b in c.brokers if b is not owner)
    status, body, _ = via.http(
        "PUT", f"/admin/v2/namespaces/public/{ns}/{name_bundle}/unload?destinationBroker={dst.id}")
    assert status == 204, (status, body)
    time.sleep(1)
    assert c.owner(topics[0]) is dst
    missing = traffic.finish()
    assert not traffic.failed, traffic.failed[:5]
    assert not missing, f"{len(missing)} acknowledged messages not received, e.g. {missing[:5]}"
    splits = 0
    for b in c.brokers:
        _, body, _ = b.http("GET", "/metrics")
        splits += sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
                      if line.startswith("strobe_bundle_splits_total"))
    assert splits >= 1, "no split counted on /metrics"
    print(f"\nsplit under load: {len(traffic.acked)} acknowledged, none lost, no client closed by the split")
    client.close()


def test_a_busy_bundle_is_split_and_shed_without_clients_noticing():
    """One bundle carries all the traffic, above the split limit: its owner
    splits it (no client is closed or looks anything up) and the load
    manager then moves a busy half to the idle broker by transfer; no send
    fails and nothing is lost."""
    c = Cluster(n=2, ttl=4, config="load_balancer_interval_secs = 1\nstats_update_interval_secs = 1\n"
                                   "load_balancer_namespace_bundle_max_msg_rate = 500\n"
                                   "load_balancer_namespace_maximum_bundles = 16\n")
    try:
        ns = f"hot-{os.getpid()}"
        status, body, _ = c.brokers[0].http("PUT", f"/admin/v2/namespaces/public/{ns}",
                                            {"bundles": {"numBundles": 1}})
        assert status in (200, 204), body
        topics = [f"persistent://public/{ns}/t{i}" for i in range(6)]
        urls = "pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in c.brokers)
        client, _ = client_with_log(urls)
        producers = [client.create_producer(t, batching_enabled=False, send_timeout_millis=0,
                                            max_pending_messages=100000) for t in topics]
        consumers = [client.subscribe(t, "s") for t in topics]
        first = c.owner(topics[0])
        settled = len(_LINES.lines)
        traffic = Traffic(producers, consumers, burst=5).start()
        deadline = time.time() + 60
        while len({c.owner(t).id for t in topics}) < 2:
            assert time.time() < deadline, f"all topics still on {first.id}\n{c.logs()}"
            time.sleep(1)
        _, bundles, _ = first.http("GET", f"/admin/v2/namespaces/public/{ns}/bundles")
        missing = traffic.finish()
        assert not traffic.failed, traffic.failed[:5]
        assert not missing, f"{len(missing)} acknowledged messages not received, e.g. {missing[:5]}"
        splits = sum(b.log_text().count("load manager: splitting a busy bundle") for b in c.brokers)
        assert splits >= 1 and bundles["numBundles"] >= 2, (splits, bundles)
        during = _LINES.lines[settled:]
        looked_up = [line for line in during if "Lookup response" in line]
        assert not looked_up, f"{len(looked_up)} lookups, e.g. {looked_up[:3]}"
        print(f"\nauto split: {bundles['numBundles']} bundles after {splits} splits; "
              f"{len(traffic.acked)} acknowledged, none lost")
        client.close()
    finally:
        c.stop()
