"""Advertised listeners (Pulsar's advertisedListeners) with the official
Python client: two brokers, each advertising `internal` (its own port) and
`external` (a TCP forwarder in front of it, standing for a port published by
Docker or a NAT). A client that names the external listener is only ever sent
to forwarders, one that names none to the brokers' own ports; an unknown name
is refused; and a PIP-307 transfer names the destination on the listener the
client's connection uses."""
import socket
import threading
import time

import pulsar
import pytest

import cluster_harness
from cluster_harness import Broker, Cluster
from conftest import free_port


class Forwarder:
    """Forwards a local port to a broker's port, counting connections and
    keeping what the broker sent (to find the URLs it named)."""

    def __init__(self, target_port):
        self.target = target_port
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.down = bytearray()
        self.lock = threading.Lock()
        self.open = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.connections += 1
                self.open += [client, upstream]
            threading.Thread(target=self.pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self.pump, args=(upstream, client, True), daemon=True).start()

    def pump(self, src, dst, keep):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if keep:
                    with self.lock:
                        self.down += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def sent_since(self, mark):
        with self.lock:
            return bytes(self.down[mark:])

    def mark(self):
        with self.lock:
            return len(self.down)

    def close(self):
        self.sock.close()
        with self.lock:
            for s in self.open:
                s.close()


class ListenerBroker(Broker):
    """A harness broker on ports chosen up front, advertising `internal`
    (its own port) and `external` (its forwarder)."""

    def start(self):
        if not self.port:
            self.port, self.http_port = free_port(), free_port()
            self.forwarder = Forwarder(self.port)
        self.cluster.config = ("load_balancer_enabled = false\n"
                               f'advertised_listeners = "internal:pulsar://127.0.0.1:{self.port},'
                               f'external:pulsar://127.0.0.1:{self.forwarder.port}"\n')
        super().start()

    @property
    def external_url(self):
        return f"pulsar://127.0.0.1:{self.forwarder.port}"


@pytest.fixture(scope="module")
def cluster():
    plain = cluster_harness.Broker
    cluster_harness.Broker = ListenerBroker
    try:
        c = Cluster(n=2, ttl=4)
    finally:
        cluster_harness.Broker = plain
    yield c
    c.stop()
    for b in c.brokers:
        b.forwarder.close()


_n = [0]


def unique(prefix):
    _n[0] += 1
    return f"{prefix}-{_n[0]}-{int(time.time() * 1000) % 100000}"


def external_client(c, **kw):
    return pulsar.Client(c.brokers[0].external_url, listener_name="external", operation_timeout_seconds=30, **kw)


def internal_client(c):
    return pulsar.Client(c.brokers[0].url, operation_timeout_seconds=30)


def drain(consumer, want, timeout=30):
    got = set()
    deadline = time.time() + timeout
    while not want <= got and time.time() < deadline:
        try:
            m = consumer.receive(timeout_millis=1000)
        except pulsar.Timeout:
            continue
        got.add(m.data().decode())
        consumer.acknowledge(m)
    return got


def test_http_lookups_answer_the_named_listener(cluster):
    c = cluster
    rest = f"persistent/public/default/{unique('http')}"
    owner = c.owner("persistent://public/default/x")  # the brokers agree on owners
    assert owner is not None
    for via in c.brokers:
        status, body, _ = via.http("GET", f"/lookup/v2/topic/{rest}")
        assert status == 200, body
        b = c.broker_by_url(body["brokerUrl"])
        status, ext, _ = via.http("GET", f"/lookup/v2/topic/{rest}?listenerName=external")
        assert status == 200, ext
        assert ext["brokerUrl"] == b.external_url, (body, ext)
        req = cluster_harness.urllib.request.Request(f"{via.http_url}/lookup/v2/topic/{rest}",
                                                     headers={"X-Pulsar-ListenerName": "external"})
        with cluster_harness.urllib.request.urlopen(req, timeout=10) as r:
            assert cluster_harness.json.loads(r.read())["brokerUrl"] == b.external_url
        status, err, _ = via.http("GET", f"/lookup/v2/topic/{rest}?listenerName=nope")
        assert status != 200 and "do not have nope listener" in str(err), (status, err)


def test_clients_get_the_urls_of_their_listener(cluster):
    c = cluster
    name = unique("spread")
    topic = f"persistent://public/default/{name}"
    status, body, _ = c.brokers[1].http("PUT", f"/admin/v2/persistent/public/default/{name}/partitions", 16)
    assert status in (200, 204), body
    owners = {c.owner(f"{topic}-partition-{i}").id for i in range(16)}
    assert len(owners) == 2, owners

    def round_trip(client, prefix, want):
        """Sends 200 messages over `client`; its new subscription gets all of `want` and them."""
        before = [b.forwarder.connections for b in c.brokers]
        consumer = client.subscribe(topic, prefix, initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        sent = {f"{prefix}-{i}" for i in range(200)}
        for p in sent:
            producer.send(p.encode(), partition_key=p)
        assert drain(consumer, want | sent) >= want | sent
        client.close()
        return sent, [(before[i], b.forwarder.connections) for i, b in enumerate(c.brokers)]

    # Named listener: every connection goes through a forwarder, to both brokers.
    sent, conns = round_trip(external_client(c), "e", set())
    assert all(after > before for before, after in conns), conns
    # No listener named: the internal URLs, never a forwarder.
    _, conns = round_trip(internal_client(c), "i", sent)
    assert all(after == before for before, after in conns), conns


def test_an_unknown_listener_is_refused(cluster):
    client = pulsar.Client(cluster.brokers[0].url, listener_name="nope", operation_timeout_seconds=5)
    with pytest.raises(Exception):
        client.create_producer(f"persistent://public/default/{unique('nope')}")
    client.close()


def test_a_transfer_names_the_destination_on_the_clients_listener(cluster):
    c = cluster
    name = unique("move")
    topic = f"persistent://public/default/{name}"
    status, bundle, _ = c.brokers[0].http("GET", f"/lookup/v2/topic/persistent/public/default/{name}/bundle")
    assert status == 200, bundle
    ext, ins = external_client(c), internal_client(c)
    clients = {"e": ext, "i": ins}
    consumers = {k: cl.subscribe(topic, f"sub-{k}", initial_position=pulsar.InitialPosition.Earliest)
                 for k, cl in clients.items()}
    producers = {k: cl.create_producer(topic, batching_enabled=False, send_timeout_millis=0)
                 for k, cl in clients.items()}
    acked, named = [], []
    for round_ in range(4):
        owner = c.owner(topic)
        dst = next(b for b in c.brokers if b is not owner)
        for k, p in producers.items():
            for i in range(20):
                p.send(f"{k}-{round_}-{i}".encode())
                acked.append(f"{k}-{round_}-{i}")
        mark = owner.forwarder.mark()
        status, body, _ = c.brokers[round_ % 2].http(
            "PUT", f"/admin/v2/namespaces/public/default/{bundle}/unload?destinationBroker={dst.id}")
        assert status == 204, (status, body)
        # Both clients keep working on the destination.
        for k, p in producers.items():
            for i in range(20, 40):
                p.send(f"{k}-{round_}-{i}".encode())
                acked.append(f"{k}-{round_}-{i}")
        # What the source sent the external client (through its forwarder):
        # CLOSE_PRODUCER/CLOSE_CONSUMER naming the destination's external
        # URL when the source knew the connection's listener (its lookups
        # named it), else no URL (the client looks up); never the internal URL.
        down = owner.forwarder.sent_since(mark)
        assert dst.url.encode() not in down, f"round {round_}: the internal URL went to an external client"
        named.append(dst.external_url.encode() in down)
    # The first move starts from a connection the client looked the topic up on.
    assert named[0], named
    for k, cons in consumers.items():
        mine = {p for p in acked if p.startswith(f"{k}-")}
        got = drain(cons, mine)
        assert mine <= got, f"{k}: {len(mine - got)} acknowledged messages not received"
    for cl in clients.values():
        cl.close()
