"""Client traffic against the compose cluster, from the host, with the official
Python client (tests/docker/run.sh runs it once the cluster is healthy).

Phases (each prints its duration):
  spread   produce/consume on a partitioned topic whose partitions are owned
           by different brokers
  kill     `docker kill` of a topic's owner mid-traffic: nothing acknowledged
           lost; prints the time until acknowledgements flow again
  cutoff   one broker cut off from etcd (its `meta` network disconnected)
           while clients still reach it: it stops acknowledging before another
           broker takes over (every acknowledged message is in the log at the
           position it was acknowledged with), and it rejoins when reconnected
  rolling  every broker restarted in turn (SIGTERM, PIP-307 transfers) under
           load: no client error, nothing lost

Anything wrong raises: the script exits non-zero and run.sh tears down."""
import argparse
import json
import logging
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pulsar

BROKERS = ("broker-1", "broker-2", "broker-3")


# The C++ client logs through this logger into a file (run.sh shows it on a
# failure; the rolling phase reads it back for the URLs PIP-307 closes named).
CLIENT_LOG = os.environ.get("STROBE_DOCKER_CLIENT_LOG") or f"/tmp/strobe-docker-client-{os.getpid()}.log"
LOG = logging.getLogger("strobe-docker-test")
LOG.setLevel(logging.INFO)
LOG.propagate = False
_handler = logging.FileHandler(CLIENT_LOG)
_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
LOG.addHandler(_handler)


def client_log_lines():
    _handler.flush()
    with open(CLIENT_LOG) as f:
        return f.read().splitlines()


class Env:
    def __init__(self, a):
        self.project = a.project
        self.compose = a.compose.split()
        self.ports = dict(zip(BROKERS, a.ports))
        self.http_ports = dict(zip(BROKERS, a.http_ports))
        self.ttl = a.session_timeout
        self.host = "localhost"

    def url(self, brokers=BROKERS):
        return "pulsar://" + ",".join(f"{self.host}:{self.ports[b]}" for b in brokers)

    def client(self, brokers=BROKERS):
        return pulsar.Client(self.url(brokers), listener_name="external", operation_timeout_seconds=60,
                             logger=LOG)

    def http(self, broker, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.http_ports[broker]}{path}", data=data,
                                     method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw.strip().startswith((b"{", b"[")) else raw.decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def container(self, service):
        out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={self.project}",
                              "--filter", f"label=com.docker.compose.service={service}"],
                             check=True, capture_output=True, text=True).stdout.split()
        if len(out) != 1:
            raise AssertionError(f"expected one container for {service}, found {out}")
        return out[0]

    def docker(self, *args):
        r = subprocess.run(["docker", *args], capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} failed: {r.stderr}")
        return r.stdout.strip()

    def health(self, service):
        return self.docker("inspect", "-f", "{{.State.Status}}/{{if .State.Health}}{{.State.Health.Status}}{{end}}",
                           self.container(service))

    def wait_healthy(self, services, timeout=90):
        deadline = time.time() + timeout
        while True:
            states = {s: self.health(s) for s in services}
            if all(v == "running/healthy" for v in states.values()):
                return
            if time.time() > deadline:
                raise AssertionError(f"not healthy after {timeout} s: {states}")
            time.sleep(0.5)

    def owner(self, topic, via="broker-1", timeout=30):
        """The broker serving `topic`, from an HTTP lookup on the external listener."""
        rest = topic.replace("://", "/")
        deadline = time.time() + timeout
        while True:
            status, body = self.http(via, "GET", f"/lookup/v2/topic/{rest}?listenerName=external")
            if status == 200:
                port = int(body["brokerUrl"].rsplit(":", 1)[1])
                for b, p in self.ports.items():
                    if p == port:
                        return b
                raise AssertionError(f"lookup of {topic} answered {body}, not an external URL")
            if time.time() > deadline:
                raise AssertionError(f"lookup of {topic} failed: {status} {body}")
            time.sleep(0.3)

    def registered(self, via="broker-1"):
        status, body = self.http(via, "GET", "/admin/v2/brokers/strobe-cluster")
        return sorted(body) if status == 200 else None


def unique(prefix):
    return f"{prefix}-{os.getpid()}-{int(time.time() * 1000) % 1000000}"


def wait_until(cond, timeout, what):
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            raise AssertionError(f"timed out ({timeout} s) waiting for {what}")
        time.sleep(0.05)


class Sender:
    """Sends numbered messages at about `rate` per second; records each
    acknowledgement with its time and message id, and every failure."""

    def __init__(self, producer, prefix, rate=100):
        self.producer, self.prefix, self.rate = producer, prefix, rate
        self.acked = {}  # payload -> (time, (ledger, entry, partition))
        self.order = []  # payloads in the order their receipts came
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
                        self.acked[payload] = (time.time(), (msg_id.ledger_id(), msg_id.entry_id(), msg_id.partition()))
                        self.order.append(payload)
                    else:
                        self.failed.append((payload, str(res)))
            try:
                self.producer.send_async(payload.encode(), done)
            except Exception as e:
                with self.lock:
                    self.failed.append((payload, repr(e)))
            time.sleep(1 / self.rate)

    def finish(self):
        self.stop.set()
        self.thread.join()
        self.producer.flush()

    def count(self):
        with self.lock:
            return len(self.acked)

    def acked_after(self, t):
        with self.lock:
            later = [ts for ts, _ in self.acked.values() if ts > t]
        return min(later) if later else None


def producer(client, topic):
    return client.create_producer(topic, batching_enabled=False, send_timeout_millis=0,
                                  max_pending_messages=100000, block_if_queue_full=True)


def read_all(env, topic, idle_ms=4000):
    """Every message of `topic` from the start: payload -> list of (ledger, entry, partition)."""
    client = env.client()
    consumer = client.subscribe(topic, unique("check"), initial_position=pulsar.InitialPosition.Earliest)
    got = {}
    while True:
        try:
            m = consumer.receive(timeout_millis=idle_ms)
        except pulsar.Timeout:
            break
        mid = m.message_id()
        got.setdefault(m.data().decode(), []).append((mid.ledger_id(), mid.entry_id(), mid.partition()))
        consumer.acknowledge(m)
    client.close()
    return got


def check_nothing_lost(sender, got, where):
    missing = [p for p in sender.acked if p not in got]
    if missing:
        raise AssertionError(f"{where}: {len(missing)} of {len(sender.acked)} acknowledged messages lost, e.g. {missing[:5]}")
    moved = [p for p, (_, mid) in sender.acked.items() if mid not in got[p]]
    if moved:
        raise AssertionError(f"{where}: {len(moved)} acknowledged messages are not at the position they were "
                             f"acknowledged with (a second writer?), e.g. {[(p, sender.acked[p][1], got[p]) for p in moved[:5]]}")
    twice = [p for p, ids in got.items() if len(ids) > 1]
    return twice


def phase_spread(env):
    name = unique("spread")
    topic = f"persistent://public/default/{name}"
    status, body = env.http("broker-2", "PUT", f"/admin/v2/persistent/public/default/{name}/partitions", 12)
    assert status in (200, 204), (status, body)
    client = env.client(["broker-1"])  # pulsar://localhost:<port 1> alone: lookups find the others
    consumer = client.subscribe(topic, "spread", initial_position=pulsar.InitialPosition.Earliest)
    prod = client.create_producer(topic, batching_enabled=False)
    sent = [f"m-{i}" for i in range(600)]
    for p in sent:
        prod.send(p.encode(), partition_key=p)
    owners = {}
    for i in range(12):
        owners.setdefault(env.owner(f"{topic}-partition-{i}"), []).append(i)
    got = set()
    deadline = time.time() + 60
    while len(got) < len(sent) and time.time() < deadline:
        try:
            m = consumer.receive(timeout_millis=2000)
        except pulsar.Timeout:
            continue
        got.add(m.data().decode())
        consumer.acknowledge(m)
    client.close()
    assert got == set(sent), f"received {len(got)} of {len(sent)}"
    print(f"  partitions by owner: { {b: len(v) for b, v in sorted(owners.items())} }")
    assert len(owners) >= 2, f"all partitions on one broker: {owners}"


def phase_inside(env):
    """A client inside the compose network names no listener: lookups answer
    the internal addresses (broker-N:6650), which only that network resolves."""
    base = unique("inside")
    out = env.docker("exec", env.container("broker-1"), "strobe", "perf", "produce", "-u", "pulsar://broker-1:6650",
                     "--topic", base, "-t", "6", "-m", "600", "--batch-delay-ms", "0")
    owners = set()
    for i in range(6):
        status, body = env.http("broker-1", "GET", f"/lookup/v2/topic/persistent/public/default/{base}-{i}")
        assert status == 200 and body["brokerUrl"].startswith("pulsar://broker-"), (status, body)
        owners.add(body["brokerUrl"])
    assert len(owners) >= 2, f"all six topics on one broker: {owners}"
    client = env.client()
    stored = 0
    for i in range(6):
        reader = client.create_reader(f"persistent://public/default/{base}-{i}", pulsar.MessageId.earliest)
        while reader.has_message_available():
            reader.read_next(timeout_millis=10000)
            stored += 1
    client.close()
    assert stored == 600, f"{stored} of the 600 messages sent from inside the network stored\n{out}"
    print(f"  strobe perf inside broker-1's container, on internal URLs: 600 messages to 6 topics on "
          f"{len(owners)} brokers ({', '.join(sorted(owners))}), all read back from the host")


def topic_owned_by_other_than(env, prefix, avoid="broker-1"):
    for _ in range(40):
        topic = f"persistent://public/default/{unique(prefix)}"
        b = env.owner(topic)
        if b != avoid:
            return topic, b
    raise AssertionError(f"every topic landed on {avoid}")


def phase_kill(env):
    topic, owner = topic_owned_by_other_than(env, "kill")
    client = env.client()
    sender = Sender(producer(client, topic), "k", rate=200)
    wait_until(lambda: sender.count() > 200, 30, "acks before the kill")
    killed_at = time.time()
    env.docker("kill", env.container(owner))
    wait_until(lambda: sender.acked_after(killed_at + 0.2) is not None, 90, "acks after the kill")
    gap = sender.acked_after(killed_at + 0.2) - killed_at
    time.sleep(1)
    sender.finish()
    new_owner = env.owner(topic)
    assert new_owner != owner, new_owner
    twice = check_nothing_lost(sender, read_all(env, topic), "kill")
    assert not sender.failed, f"sends failed: {sender.failed[:5]}"
    print(f"  docker kill {owner}: traffic flowed again after {gap:.2f} s on {new_owner} "
          f"(session timeout {env.ttl} s); {len(sender.acked)} acknowledged, none lost, {len(twice)} stored twice")
    client.close()
    env.docker("start", env.container(owner))
    env.wait_healthy([owner])
    wait_until(lambda: env.registered() == list(BROKERS), 30, f"{owner} registered again")


def phase_cutoff(env):
    meta = f"{env.project}_meta"
    # The broker killed in the previous phase is back, and the load manager may
    # still be moving bundles onto it: a topic that moved before the cut has
    # acknowledgements in two ledgers already, and its owner is no longer the
    # broker about to be cut off. Such a topic is dropped and another taken.
    for _ in range(5):
        topic, victim = topic_owned_by_other_than(env, "cutoff")
        client = env.client()
        sender = Sender(producer(client, topic), "c", rate=200)
        wait_until(lambda: sender.count() > 200, 30, "acks before the cut")
        with sender.lock:
            ledgers = {mid[0] for _, mid in sender.acked.values()}
            first_ledger = sender.acked[sender.order[-1]][1][0]
        if len(ledgers) == 1 and env.owner(topic) == victim:
            break
        print(f"  {topic} moved off {victim} before the cut (ledgers {sorted(ledgers)}); another topic")
        sender.finish()
        client.close()
    else:
        raise AssertionError("every topic moved before the cut: the load manager did not settle")
    cid = env.container(victim)
    cut_at = time.time()
    env.docker("network", "disconnect", meta, cid)

    def new_ledger_acked():
        with sender.lock:
            return any(mid[0] != first_ledger for _, mid in sender.acked.values())
    try:
        # Another broker owns the topic once the victim's lease is gone and
        # the clients looked it up again.
        wait_until(new_ledger_acked, 90, "acks from a new owner")
        new_owner = env.owner(topic, via=next(b for b in BROKERS if b != victim))
        assert new_owner != victim, new_owner
        time.sleep(2)
    finally:
        env.docker("network", "connect", meta, cid)
    reconnected_at = time.time()
    sender.finish()
    with sender.lock:
        acks = list(sender.acked.values())
    # The last acknowledgement in the victim's ledger came before the first in a new owner's.
    last_old = max(t for t, mid in acks if mid[0] == first_ledger)
    first_new = min(t for t, mid in acks if mid[0] != first_ledger)
    assert last_old < first_new, "the cut-off broker acknowledged after the new owner had"
    twice = check_nothing_lost(sender, read_all(env, topic), "cutoff")
    assert not sender.failed, f"sends failed: {sender.failed[:5]}"
    env.wait_healthy([victim])
    wait_until(lambda: env.registered() == list(BROKERS), 60, f"{victim} registered again")
    rejoined = time.time() - reconnected_at
    logs = subprocess.run(["docker", "logs", cid], capture_output=True, text=True).stderr
    assert "metadata session lost" in logs, "the cut-off broker never noticed it lost etcd"
    print(f"  {victim} cut off from etcd: its last acknowledgement {last_old - cut_at:.2f} s after the cut, "
          f"the new owner {new_owner}'s first {first_new - cut_at:.2f} s after; "
          f"{len(sender.acked)} acknowledged, none lost, {len(twice)} stored twice; healthy and registered again "
          f"{rejoined:.1f} s after reconnecting")
    client.close()


def phase_rolling(env):
    name = unique("rolling")
    topic = f"persistent://public/default/{name}"
    status, body = env.http("broker-1", "PUT", f"/admin/v2/persistent/public/default/{name}/partitions", 6)
    assert status in (200, 204), (status, body)
    client = env.client()
    consumer = client.subscribe(topic, "rolling", consumer_type=pulsar.ConsumerType.Shared)
    received = set()
    stop = threading.Event()

    def consume():
        while not stop.is_set():
            try:
                m = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                continue
            received.add(m.data().decode())
            consumer.acknowledge(m)
    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    sender = Sender(producer(client, topic), "r", rate=200)
    wait_until(lambda: sender.count() > 200, 30, "acks before the restarts")
    log_start = len(client_log_lines())
    for b in BROKERS:
        t0 = time.time()
        env.docker("stop", "-t", "60", env.container(b))
        stopped = time.time() - t0
        before = sender.count()
        env.docker("start", env.container(b))
        env.wait_healthy([b])
        wait_until(lambda: env.registered() == list(BROKERS), 30, f"{b} registered again")
        wait_until(lambda: sender.count() > before + 100, 30, f"acks after restarting {b}")
        print(f"  {b}: stopped (SIGTERM) in {stopped:.1f} s, healthy again after {time.time() - t0:.1f} s")
    sender.finish()
    wait_until(lambda: set(sender.acked) <= received, 60, "the consumer receiving every acknowledged message")
    stop.set()
    reader.join()
    assert not sender.failed, f"client errors during the rolling restart: {sender.failed[:5]}"
    # PIP-307 closes name the destination on the listener the client uses.
    # (A close may name none: the broker did not know the connection's
    # listener, and the client looks the topic up instead.)
    closes = [ln for ln in client_log_lines()[log_start:] if "Broker notification of Closed" in ln]
    assigned = [(ln.split("assignedBrokerUrl:", 1)[1].split() or [""])[0] for ln in closes
                if "assignedBrokerUrl:" in ln]
    external = [u for u in assigned if u.startswith(f"pulsar://{env.host}:")]
    assert external, f"no close named an assigned broker URL on the external listener: {closes[:5]}"
    assert len(external) == len(assigned), f"closes named other URLs: {set(assigned) - set(external)}"
    print(f"  {len(sender.acked)} acknowledged, all received, 0 client errors; of {len(closes)} producer/consumer "
          f"closes {len(external)} named the destination's external URL, the others none (the client looked up)")
    client.close()


PHASES = {"spread": phase_spread, "inside": phase_inside, "kill": phase_kill, "cutoff": phase_cutoff, "rolling": phase_rolling}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--project", required=True)
    ap.add_argument("--compose", required=True)
    ap.add_argument("--ports", type=int, nargs=3, required=True)
    ap.add_argument("--http-ports", type=int, nargs=3, required=True)
    ap.add_argument("--session-timeout", type=int, required=True)
    ap.add_argument("phases", nargs="+", choices=list(PHASES))
    a = ap.parse_args()
    env = Env(a)
    for name in a.phases:
        t0 = time.time()
        print(f"=== phase {name}", flush=True)
        PHASES[name](env)
        print(f"=== phase {name}: {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    try:
        main()
        code = 0
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    # Leave without running the interpreter's finalizers: the C++ client's
    # objects torn down then (logging through a Python logger that is already
    # gone) can abort the process after everything passed.
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)
