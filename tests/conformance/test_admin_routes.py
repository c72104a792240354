"""Every route of Pulsar's admin API (`/admin/v2`, from Pulsar's published
swagger: pulsar-admin-v2-endpoints.tsv beside this file, functions, workers
and bookies left out) is answered: a route counts as missing when the broker
answers 404 or 405 with no body (no such route), and as answered otherwise,
including a 404 with a JSON reason (no such topic) or a 501 with one (not
supported here). The routes still missing are named in MISSING with the
reason; the test fails on any other, and on any in MISSING that is now
served (so the list stays true).

Run by hand for a report against a running broker:

    python3 tests/conformance/test_admin_routes.py http://127.0.0.1:8080
"""
import json
import os
import sys
import urllib.error
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
LIST = os.path.join(HERE, "pulsar-admin-v2-endpoints.tsv")

# The walk's own tenant, namespace and topics: created before, so the routes
# act on things that exist; deleting routes run last.
TENANT, NAMESPACE, TOPIC, SUB = "walk", "ns", "walk-topic", "walk-sub"
VALUES = {
    "tenant": TENANT,
    "namespace": NAMESPACE,
    "topic": TOPIC,
    "subName": SUB,
    "subscription": SUB,
    "subscriptionName": SUB,
    "cluster": "standalone",
    "clusterName": "standalone",
    "bundle": "0x00000000_0xffffffff",
    "role": "walker",
    "timestamp": "0",
    "expireTimeInSeconds": "60",
    "resourcegroup": "walk-rg",
    "policyName": "walk-policy",
    "key": "walk-key",
    "domainName": "walk-domain",
    "property": "walk-prop",
    "numMessages": "1",
    "messagePosition": "1",
    "ledgerId": "1",
    "entryId": "0",
    "configName": "loadBalancerEnabled",
    "configValue": "true",
    "version": "0",
    "value": "1",
    "group": "walk-group",
    "broker": "127.0.0.1:8080",
    "broker-webserviceurl": "http://127.0.0.1:8080",
    "allocator": "walk",
    "bookie": "walk-bookie",
}

# Routes not answered yet, each with why (kept in step with the broker: the
# test fails when one of these is answered).
MISSING = {
    ("GET", "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/subscription/{subName}/properties"): "subscription properties are not kept yet: a cursor stores numeric properties only",
    ("GET", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/subscription/{subName}/properties"): "subscription properties are not kept yet: a cursor stores numeric properties only",
    ("GET", "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/{subName}/dispatchRate"): "a dispatch rate for one named subscription is not built yet: subscriptionDispatchRate sets every subscription's",
    ("GET", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/{subName}/dispatchRate"): "a dispatch rate for one named subscription is not built yet: subscriptionDispatchRate sets every subscription's",
    ("GET", "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/deduplicationSnapshotInterval"): "not built yet: deduplication snapshots its producers' sequence ids on the broker's own schedule",
    ("GET", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/deduplicationSnapshotInterval"): "not built yet: deduplication snapshots its producers' sequence ids on the broker's own schedule",
    ("GET", "/admin/v2/namespaces/{tenant}/{namespace}/deduplicationSnapshotInterval"): "not built yet: deduplication snapshots its producers' sequence ids on the broker's own schedule",
    ("GET", "/admin/v2/namespaces/{tenant}/{namespace}/subscriptionExpirationTime"): "not built yet: subscriptions without consumers are not expired",
    ("GET", "/admin/v2/non-persistent/{tenant}/{namespace}/{bundle}"): "not built yet: broker-stats/topics lists the topics of each bundle",
    ("PUT", "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/subscription/{subName}/properties"): "subscription properties are not kept yet: a cursor stores numeric properties only",
    ("PUT", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/subscription/{subName}/properties"): "subscription properties are not kept yet: a cursor stores numeric properties only",
    ("POST", "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/{subName}/dispatchRate"): "a dispatch rate for one named subscription is not built yet: subscriptionDispatchRate sets every subscription's",
    ("POST", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/{subName}/dispatchRate"): "a dispatch rate for one named subscription is not built yet: subscriptionDispatchRate sets every subscription's",
    ("PUT", "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/backlogSize"): "not built yet: the stats' backlogSize gives a subscription's backlog in bytes",
    ("POST", "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/deduplicationSnapshotInterval"): "not built yet: deduplication snapshots its producers' sequence ids on the broker's own schedule",
    ("PUT", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/backlogSize"): "not built yet: the stats' backlogSize gives a subscription's backlog in bytes",
    ("POST", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/deduplicationSnapshotInterval"): "not built yet: deduplication snapshots its producers' sequence ids on the broker's own schedule",
    ("POST", "/admin/v2/namespaces/{tenant}/{namespace}/deduplicationSnapshotInterval"): "not built yet: deduplication snapshots its producers' sequence ids on the broker's own schedule",
    ("POST", "/admin/v2/namespaces/{tenant}/{namespace}/subscriptionExpirationTime"): "not built yet: subscriptions without consumers are not expired",
    ("DELETE", "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/{subName}/dispatchRate"): "a dispatch rate for one named subscription is not built yet: subscriptionDispatchRate sets every subscription's",
    ("DELETE", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/{subName}/dispatchRate"): "a dispatch rate for one named subscription is not built yet: subscriptionDispatchRate sets every subscription's",
    ("DELETE", "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/deduplicationSnapshotInterval"): "not built yet: deduplication snapshots its producers' sequence ids on the broker's own schedule",
    ("DELETE", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/deduplicationSnapshotInterval"): "not built yet: deduplication snapshots its producers' sequence ids on the broker's own schedule",
}


def routes():
    out = []
    with open(LIST) as f:
        for line in f:
            if line.strip():
                method, path, op, group = line.rstrip("\n").split("\t")
                out.append((method, path, op, group))
    return out


def fill(path, web):
    values = dict(VALUES)
    values["broker"] = web.split("://", 1)[1]
    values["broker-webserviceurl"] = web.split("://", 1)[1]
    for k, v in values.items():
        path = path.replace("{" + k + "}", v)
    assert "{" not in path, f"no value for a parameter of {path}"
    return path


def call(web, method, path, body=None, timeout=20):
    data = None
    headers = {}
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(web + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def setup(web):
    """The tenant, namespace, topics and subscription the walk acts on."""
    call(web, "PUT", f"/admin/v2/tenants/{TENANT}",
         {"adminRoles": [], "allowedClusters": ["standalone"]})
    call(web, "PUT", f"/admin/v2/namespaces/{TENANT}/{NAMESPACE}")
    for domain in ("persistent", "non-persistent"):
        base = f"/admin/v2/{domain}/{TENANT}/{NAMESPACE}/{TOPIC}"
        call(web, "PUT", base)
        call(web, "PUT", f"{base}/subscription/{SUB}", {"entryId": -1, "ledgerId": -1})


def order(route):
    # Reads first, then changes, deletions last (the topic, namespace and
    # tenant go last of all).
    method, path = route[0], route[1]
    rank = {"GET": 0, "PUT": 1, "POST": 1, "DELETE": 2}.get(method, 1)
    return (rank, -path.count("/"), path)


def walk(web):
    """(answered, missing): missing as (method, path, status)."""
    setup(web)
    answered, missing = [], []
    for method, path, op, group in sorted(routes(), key=order):
        url = fill(path, web)
        body = None if method in ("GET", "DELETE") else {}
        try:
            status, content = call(web, method, url, body)
        except Exception as e:  # a timeout or a reset: not an answer
            missing.append((method, path, f"no answer: {e}"))
            continue
        if status in (404, 405) and not content.strip():
            missing.append((method, path, status))
        else:
            answered.append((method, path, status))
    return answered, missing


def test_every_admin_route_is_answered(strobe):
    web = f"http://127.0.0.1:{strobe.http_port}"
    answered, missing = walk(web)
    total = len(answered) + len(missing)
    unexplained = [m for m in missing if (m[0], m[1]) not in MISSING]
    served_now = [k for k in MISSING if k not in {(m[0], m[1]) for m in missing}]
    assert not unexplained, (
        f"{len(unexplained)} of {total} routes have no handler (404/405 without a body):\n"
        + "\n".join(f"{m} {p} -> {s}" for m, p, s in unexplained))
    assert not served_now, f"answered now, drop from MISSING: {served_now}"
    assert len(answered) >= 0.95 * total, f"only {len(answered)} of {total} answered"


def test_what_strobe_does_not_do_says_why(strobe):
    web = f"http://127.0.0.1:{strobe.http_port}"
    for method, path, word in [
        ("GET", "/admin/v2/namespaces/public/default/offloadPolicies", "offload"),
        ("POST", "/admin/v2/persistent/public/default/t/replication", "geo-replication"),
        ("GET", "/admin/v2/clusters/standalone/failureDomains", "failure domains"),
        ("GET", "/admin/v2/persistent/public/default/t/persistence", "BookKeeper"),
        ("POST", "/admin/v2/brokers/shutdown", "SIGTERM"),
        ("GET", "/admin/v2/resourcegroups", "resource groups"),
    ]:
        status, body = call(web, method, path, None if method == "GET" else {})
        assert status == 405, (path, status)
        assert word in json.loads(body)["reason"], (path, body)
    # A path that is no route at all stays a bare 404.
    status, body = call(web, "GET", "/admin/v2/clusters/standalone/no-such-thing")
    assert status == 404 and not body.strip()


def test_broker_endpoints(fresh_strobe):
    web = f"http://127.0.0.1:{fresh_strobe.http_port}"
    me = f"127.0.0.1:{fresh_strobe.http_port}"
    assert json.loads(call(web, "GET", "/admin/v2/brokers")[1]) == [me]
    assert call(web, "GET", "/admin/v2/brokers/version")[1].decode().count(".") == 2
    assert json.loads(call(web, "GET", "/admin/v2/brokers/leaderBroker")[1])["serviceUrl"] == f"http://{me}"
    runtime = json.loads(call(web, "GET", "/admin/v2/brokers/configuration/runtime")[1])
    assert runtime["http_port"] == str(fresh_strobe.http_port)
    assert json.loads(call(web, "GET", "/admin/v2/brokers/configuration")[1]) == []
    assert json.loads(call(web, "GET", "/admin/v2/brokers/configuration/values")[1]) == {}
    assert call(web, "GET", "/admin/v2/brokers/backlog-quota-check")[0] == 204
    info = json.loads(call(web, "GET", "/admin/v2/brokers/internal-configuration")[1])
    assert info["metadataStoreUrl"]


def test_broker_stats_and_hash_positions(fresh_strobe):
    import pulsar
    web = f"http://127.0.0.1:{fresh_strobe.http_port}"
    client = pulsar.Client(fresh_strobe.url)
    try:
        topic = "persistent://public/default/stats-topic"
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        for _ in range(3):
            producer.send(b"x")
        topics = json.loads(call(web, "GET", "/admin/v2/broker-stats/topics")[1])
        bundles = topics["public/default"]
        found = [b for b in bundles.values() if topic in b.get("persistent", {})]
        assert len(found) == 1 and found[0]["persistent"][topic]["msgInCounter"] == 3
        report = json.loads(call(web, "GET", "/admin/v2/broker-stats/load-report")[1])
        assert report["numTopics"] >= 1 and report["numProducers"] >= 1 and report["numConsumers"] >= 1
        metrics = json.loads(call(web, "GET", "/admin/v2/broker-stats/metrics")[1])
        mine = [m for m in metrics if m["dimensions"].get("topic") == topic]
        assert mine and mine[0]["metrics"]["pulsar_in_messages_total"] == 3, mine
        bundle = [k for k, b in bundles.items() if topic in b.get("persistent", {})][0]
        pos = json.loads(call(web, "GET",
                              f"/admin/v2/namespaces/public/default/{bundle}/topicHashPositions?topics=stats-topic")[1])
        assert pos["bundle"] == bundle and isinstance(pos["topicHashPositions"]["stats-topic"], int)
        lo, hi = (int(x, 16) for x in bundle.split("_"))
        assert lo <= pos["topicHashPositions"]["stats-topic"] < hi or hi == 0xffffffff
        consumer.close()
    finally:
        client.close()


@pytest.mark.strobe_config('token_secret_key = "data:;base64,c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0MTI="')
def test_runtime_configuration_withholds_secrets(fresh_strobe):
    web = f"http://127.0.0.1:{fresh_strobe.http_port}"
    runtime = json.loads(call(web, "GET", "/admin/v2/brokers/configuration/runtime")[1])
    assert runtime["token_secret_key"] == "******"
    assert "c2VjcmV0" not in json.dumps(runtime)


if __name__ == "__main__":
    web = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"
    answered, missing = walk(web)
    groups = {}
    for method, path, op, group in routes():
        groups.setdefault(group, [0, 0])[1] += 1
    miss = {(m, p) for m, p, _ in missing}
    for method, path, op, group in routes():
        if (method, path) not in miss:
            groups[group][0] += 1
    for g, (a, t) in sorted(groups.items()):
        print(f"{g:24s} {a:4d} / {t}")
    print(f"{'all':24s} {len(answered):4d} / {len(answered) + len(missing)}")
    if "-v" in sys.argv:
        for m, p, s in missing:
            print(f"missing {m} {p} -> {s}")
