#!/usr/bin/env python3
"""Transactions, measured with `strobe perf txn` (our client: the official Python
client has no transactions API):

1. standalone, coordinator parallelism 1 and 16: transactions/s and the
   latency of NEW_TXN -> send -> COMMIT, with 16 concurrent loops, and the
   same loop without transactions (plain sends) against the same broker;
2. a two-broker cluster on a private etcd where broker-1 may lead only
   coordinator partition 0 and broker-0 the other fifteen: loops pinned one per
   partition run for PHASE s, then broker-1 is SIGSTOPped (partition 0 has no
   live leader) for PHASE s more. The figure: the other fifteen partitions'
   throughput after, as a share of before (goal >= 90%; apache/pulsar#23039 is
   the pain this answers: one coordinator down stops every transaction). Run
   twice: 15 loops on partitions 1-15 (like for like), and 16 loops with one on
   partition 0, which hangs when its leader stops.

    STROBE_BIN=target/release/strobe .venv/bin/python benches/perf/txn.py
    PHASE=15 DURATION=15 ...

3. `MODE=goals` (issue 43's figures): standalone (parallelism 16) and a
   three-broker cluster on etcd with a shared directory, 16 and 64 loops of one
   message per transaction, the same loops with plain sends, and the metadata
   writes per committed transaction (from every broker's `/metrics`:
   `strobe_metadata_writes_total` over `pulsar_txn_committed_total`); on the
   cluster also the mean etcd write as the brokers timed it
   (`strobe_metadata_write_seconds_total`) and etcd's own WAL fdatasyncs.
   `CLUSTER_ONLY=1` skips standalone; `ETCD_DIR=/dev/shm` puts etcd's data on
   tmpfs (standing in for a disk of etcd's own).

    MODE=goals STROBE_BIN=target/release/strobe .venv/bin/python benches/perf/txn.py
"""
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "conformance"))

from cluster_harness import Cluster  # noqa: E402
from conftest import strobe_binary, wait_ready  # noqa: E402

PHASE = float(os.environ.get("PHASE", "15"))
DURATION = float(os.environ.get("DURATION", "15"))
WORKERS = int(os.environ.get("WORKERS", "16"))


def perf(url, *args, duration=DURATION):
    cmd = [strobe_binary(), "perf", "txn", "-u", url, "-w", str(WORKERS), "-d", str(duration), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120)
    if out.returncode != 0:
        raise SystemExit(f"perf failed: {out.stderr}")
    return out.stdout


def standalone(parallelism):
    with tempfile.TemporaryDirectory(prefix="strobe-txn-bench-") as d:
        cfg = os.path.join(d, "strobe.toml")
        with open(cfg, "w") as f:
            f.write(f"transaction_coordinator_parallelism = {parallelism}\n")
        log = open(os.path.join(d, "log"), "w")
        p = subprocess.Popen([strobe_binary(), "standalone", "--config", cfg, "--data-dir", os.path.join(d, "data"),
                              "--broker-port", "0", "--http-port", "0", "--bind-address", "127.0.0.1",
                              "--advertised-address", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=log)
        try:
            port, _ = wait_ready(p, lambda: open(os.path.join(d, "log")).read(), "strobe standalone is ready", 0,
                                 "standalone", timeout=30)
            url = f"pulsar://127.0.0.1:{port}"
            txn = perf(url, "--topic", "bench-txn").strip().splitlines()[-1]
            plain = perf(url, "--plain", "--topic", "bench-plain").strip().splitlines()[-1]
            print(f"standalone, parallelism {parallelism:>2}, {WORKERS} loops:\n  txn   {txn}\n  plain {plain}")
        finally:
            p.terminate()
            p.wait()


def one_partition_down(loops, offset):
    c = Cluster(n=2, ttl=4, broker_config={0: 'transaction_coordinator_partitions = "1-15"\n',
                                          1: 'transaction_coordinator_partitions = "0"\n'})
    try:
        a, b = c.brokers
        # The topic must live on broker-0, or stopping broker-1 would stop it too.
        topic = None
        for i in range(50):
            t = f"persistent://public/default/bench-txn-down-{i}"
            if c.owner(t) is a:
                topic = t
                break
        assert topic, "no topic owned by broker-0"
        url = f"pulsar://127.0.0.1:{a.port}"
        proc = subprocess.Popen([strobe_binary(), "perf", "txn", "-u", url, "-w", str(loops), "--pin",
                                 "--pin-offset", str(offset), "-d", str(2 * PHASE), "--report-every", "2.5",
                                 "--topic", topic],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(PHASE)
        b.stop_signal()
        stopped = time.time()
        out, _ = proc.communicate(timeout=2 * PHASE + 120)
        b.cont_signal()
        before, after = [], []
        for line in out.splitlines():
            m = re.match(r"t=\s*([\d.]+)s .* per partition \[([\d ]+)\]", line)
            if not m:
                continue
            t, rates = float(m.group(1)), [int(x) for x in m.group(2).split()]
            others = sum(rates[1:])
            if 2.5 < t <= PHASE:
                before.append(others)
            elif t > PHASE + 2.5:
                after.append(others)
        print(out.strip())
        b_avg = sum(before) / max(1, len(before))
        a_avg = sum(after) / max(1, len(after))
        print(f"{loops} loops; partitions 1-15: {b_avg:.0f} txn/s before, {a_avg:.0f} txn/s with partition 0's "
              f"leader stopped ({100 * a_avg / max(1, b_avg):.0f}%)")
    finally:
        try:
            c.brokers[1].cont_signal()
        except Exception:
            pass
        c.stop()


def scrape(http_port, families=("strobe_metadata_writes_total", "pulsar_txn_committed_total",
                                 "strobe_metadata_write_seconds_total")):
    """The sums of `families` on one /metrics page (a broker's, or etcd's client port)."""
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10).read().decode()
    sums = [0.0] * len(families)
    for line in text.splitlines():
        for i, family in enumerate(families):
            if line.startswith(family + "{") or line.startswith(family + " "):
                sums[i] += float(line.rsplit(" ", 1)[1])
    return sums


# etcd's own view of its writes: the WAL's fdatasync and the backend's commit.
ETCD_FAMILIES = ("etcd_disk_wal_fsync_duration_seconds_sum", "etcd_disk_wal_fsync_duration_seconds_count",
                 "etcd_disk_backend_commit_duration_seconds_sum", "etcd_disk_backend_commit_duration_seconds_count")


def measured(url, http_ports, loops, topic, etcd_port=None):
    """One txn run and one plain run of `loops` loops; writes per committed transaction and,
    on a cluster, the mean etcd write as the brokers saw it and etcd's own fsyncs."""
    global WORKERS
    WORKERS = loops
    before = [scrape(h) for h in http_ports]
    etcd_before = scrape(etcd_port, ETCD_FAMILIES) if etcd_port else None
    out = perf(url, "--topic", topic).strip().splitlines()
    txn = out[-1]
    phases = next((line for line in out if line.startswith("phases")), "")
    after = [scrape(h) for h in http_ports]
    etcd_after = scrape(etcd_port, ETCD_FAMILIES) if etcd_port else None
    plain = perf(url, "--plain", "--topic", topic + "-plain").strip().splitlines()[-1]
    writes, committed, write_s = (sum(a[i] - b[i] for a, b in zip(after, before)) for i in range(3))
    per = writes / committed if committed else float("nan")
    print(f"  {loops} loops:\n    txn   {txn}\n          {phases}\n    plain {plain}\n    metadata writes per committed "
          f"transaction: {per:.2f} ({writes:.0f} writes, {committed:.0f} committed)", flush=True)
    if etcd_port:
        d = [a - b for a, b in zip(etcd_after, etcd_before)]
        print(f"    etcd writes as the brokers saw them: mean {1000 * write_s / max(1, writes):.2f} ms; etcd's WAL "
              f"fdatasync: {d[1]:.0f}, mean {1000 * d[0] / max(1, d[1]):.2f} ms; backend commits: {d[3]:.0f}, "
              f"mean {1000 * d[2] / max(1, d[3]):.2f} ms", flush=True)


def goals():
    if not os.environ.get("CLUSTER_ONLY"):
        goals_standalone()
    # ETCD_DIR=/dev/shm: etcd's data on tmpfs, standing in for the disk of its own that etcd's
    # operators are told to give it (here it shares one disk with the brokers' store).
    etcd_root = os.environ.get("ETCD_DIR")
    etcd_dir = tempfile.TemporaryDirectory(prefix="strobe-txn-etcd-", dir=etcd_root) if etcd_root else None
    c = Cluster(n=3, ttl=4, etcd_dir=etcd_dir.name if etcd_dir else None)
    try:
        a = c.brokers[0]
        print(f"3-broker cluster on etcd (data in {etcd_root or 'the cluster directory'}), shared directory:",
              flush=True)
        for loops in (16, 64):
            measured(f"pulsar://127.0.0.1:{a.port}", [b.http_port for b in c.brokers], loops,
                     f"persistent://public/default/goals-{loops}", etcd_port=c.etcd.port)
    finally:
        c.stop()
        if etcd_dir:
            etcd_dir.cleanup()


def goals_standalone():
    with tempfile.TemporaryDirectory(prefix="strobe-txn-goals-") as d:
        log = open(os.path.join(d, "log"), "w")
        p = subprocess.Popen([strobe_binary(), "standalone", "--data-dir", os.path.join(d, "data"),
                              "--broker-port", "0", "--http-port", "0", "--bind-address", "127.0.0.1",
                              "--advertised-address", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=log)
        try:
            port, http = wait_ready(p, lambda: open(os.path.join(d, "log")).read(), "strobe standalone is ready", 0,
                                    "standalone", timeout=30)
            print("standalone (parallelism 16):", flush=True)
            for loops in (16, 64):
                measured(f"pulsar://127.0.0.1:{port}", [http], loops, f"goals-{loops}")
        finally:
            p.terminate()
            p.wait()


if __name__ == "__main__" and os.environ.get("MODE") == "goals":
    goals()
elif __name__ == "__main__":
    for p in (1, 16):
        standalone(p)
    # Loops on partitions 1-15 only: the others' throughput like for like.
    one_partition_down(15, 1)
    # Plus a loop on partition 0, which hangs on the stopped leader: its load leaves with it.
    one_partition_down(16, 0)
