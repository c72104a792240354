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
