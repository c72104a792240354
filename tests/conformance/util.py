"""Helpers shared by the conformance tests."""
import pulsar


def drain(consumer, timeout_ms=300):
    """Every message the consumer receives until it has waited `timeout_ms` for one."""
    out = []
    while True:
        try:
            out.append(consumer.receive(timeout_ms))
        except pulsar.Timeout:
            return out
