"""The official Python client against the handshake-only broker: it connects,
and what the broker does not serve yet is refused with an error, fast, never a
hang; the broker stays up."""
import time

import pulsar
import pytest


def test_unserved_producer_fails_fast_with_an_error(strobe):
    client = pulsar.Client(strobe.url, operation_timeout_seconds=5)
    started = time.time()
    with pytest.raises(Exception) as err:
        client.create_producer("persistent://public/default/conformance-handshake")
    elapsed = time.time() - started
    client.close()
    assert elapsed < 8, f"took {elapsed:.1f}s"
    assert strobe.alive()
    # The broker logged the client's version on the connection span.
    assert "Pulsar-CPP-v" in strobe.log_text()
    print(f"refused after {elapsed:.2f}s: {err.value!r}")


def test_broker_survives_and_serves_the_next_client(strobe):
    for _ in range(3):
        client = pulsar.Client(strobe.url, operation_timeout_seconds=3)
        with pytest.raises(Exception):
            client.subscribe("persistent://public/default/conformance-handshake", "sub")
        client.close()
    assert strobe.alive()
