"""`strobe perf` against a running broker: what it reports is what happened.

Each run's JSON summary is checked against what the broker and the official
client saw (message counts, no duplicates, no errors), so a perf tool that
miscounts, loses messages or stops pacing fails here."""
import json
import re
import subprocess

import pulsar

from conftest import strobe_binary


def perf(strobe, mode, *args, json_out=True, timeout=120):
    cmd = [strobe_binary(), "perf", mode, "-u", strobe.url, *args]
    if json_out:
        cmd.append("--json")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{cmd} exited {r.returncode}: {r.stderr[-2000:]}"
    if not json_out:
        return r.stdout
    # The summary is the last line of stdout.
    return json.loads(r.stdout.strip().splitlines()[-1])


def short(topic):
    return topic.rsplit("/", 1)[1]


def test_produce_then_consume_counts_every_message(strobe, client, topic):
    p = perf(strobe, "produce", "--topic", topic, "-m", "3000", "-s", "256", "--batch-delay-ms", "1")
    assert p["published"] == 3000 and p["errors"] == 0, p
    lat = p["publish_latency_ms"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["max"], lat
    # The official client reads what perf wrote: every message, of the size asked for.
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    sizes = [len(reader.read_next(timeout_millis=10000).data()) for _ in range(3000)]
    reader.close()
    assert set(sizes) == {256}
    c = perf(strobe, "consume", "--topic", topic, "--subscription", "perf-catchup",
             "--initial-position", "earliest", "-m", "3000")
    assert c["received"] == 3000 and c["duplicates"] == 0 and c["errors"] == 0, c


def test_e2e_over_topics_with_compression_and_shared_subscriptions(strobe, topic):
    for compression in ("lz4", "zstd"):
        r = perf(strobe, "e2e", "--topic", f"{topic}-{compression}", "-t", "3", "-c", "2",
                 "--sub-type", "shared", "--compression", compression, "-m", "3000")
        assert r["published"] == 3000 and r["received"] == 3000, r
        assert r["duplicates"] == 0 and r["errors"] == 0, r
        assert r["topics"] == 3


def test_rate_limit_paces_sends(strobe, topic):
    # 1,000 msg/s for 3 s, batching off: about 3,000 sends, not as many as possible.
    r = perf(strobe, "e2e", "--topic", topic, "-r", "1000", "-d", "3", "--batch-delay-ms", "0")
    assert 2500 <= r["published"] <= 3300, r
    assert r["received"] == r["published"] and r["errors"] == 0, r
    assert 800 <= r["publish_rate"] <= 1200, r


def test_status_lines_and_summary_as_text(strobe, topic):
    out = perf(strobe, "e2e", "--topic", topic, "-r", "500", "-d", "3", json_out=False)
    status = [l for l in out.splitlines() if l.startswith("[e2e")]
    assert len(status) >= 2, out
    assert re.search(r"pub +\d+ msg/s .* p99 [0-9.]+ p99\.9 [0-9.]+ max [0-9.]+ ms", status[-1]), status
    assert "backlog" in status[-1], status
    assert "--- e2e summary" in out and "end-to-end latency p50" in out, out


def test_unreachable_broker_fails_loudly(topic):
    r = subprocess.run([strobe_binary(), "perf", "produce", "-u", "pulsar://127.0.0.1:1",
                        "--topic", short(topic), "-m", "10"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "connecting to pulsar://127.0.0.1:1" in r.stderr, r.stderr
