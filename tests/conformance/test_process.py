"""Process-level settings of a running broker, read from /proc."""
import os

import pulsar
import pytest


@pytest.mark.strobe_config('cpu_affinity = "0"')
def test_cpu_affinity_pins_every_thread(fresh_strobe):
    # Traffic first, so that the threads started on demand (the group
    # commit's, the blocking pool's) exist too.
    client = pulsar.Client(fresh_strobe.url)
    try:
        producer = client.create_producer("persistent://public/default/pinned")
        for i in range(20):
            producer.send(f"m{i}".encode())
    finally:
        client.close()
    pid = fresh_strobe.proc.pid
    threads = os.listdir(f"/proc/{pid}/task")
    assert len(threads) > 3
    for tid in threads:
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            allowed = [l.split(":", 1)[1].strip() for l in f if l.startswith("Cpus_allowed_list")]
        assert allowed == ["0"], f"thread {tid} may run on {allowed}"
    assert "pinned to cpu_affinity" in fresh_strobe.log_text()


def test_a_cpu_the_broker_may_not_use_is_refused(tmp_path):
    from conftest import strobe_binary
    import subprocess
    cfg = tmp_path / "strobe.toml"
    cfg.write_text('cpu_affinity = "1023"\n')
    r = subprocess.run([strobe_binary(), "standalone", "--config", str(cfg),
                        "--data-dir", str(tmp_path / "data"), "--broker-port", "0", "--http-port", "0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "cpu_affinity names CPU 1023" in r.stderr, r.stderr


@pytest.mark.strobe_config("max_concurrent_topic_load_request = 2\n")
def test_topic_loads_beyond_the_bound_wait_their_turn(fresh_strobe):
    # 40 topics asked for at once with 2 loads allowed at a time: every producer is
    # answered (the rest waited, nothing was refused), and /metrics shows the gauges.
    import threading
    from test_admin import call
    client = pulsar.Client(fresh_strobe.url, operation_timeout_seconds=30)
    errors = []

    def create(i):
        try:
            client.create_producer(f"persistent://public/default/load-bound-{i}").send(b"x")
        except Exception as e:  # noqa: BLE001 - recorded for the assertion
            errors.append(e)
    try:
        threads = [threading.Thread(target=create, args=(i,)) for i in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        client.close()
    assert not errors, errors[:3]
    page = call(fresh_strobe, "GET", "/metrics")[1]
    assert "strobe_topic_loads_running 0" in page and "strobe_topic_loads_waiting 0" in page
