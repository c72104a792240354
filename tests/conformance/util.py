"""Helpers shared by the conformance tests."""
import time

import pulsar


def drain(consumer, timeout_ms=300):
    """Every message the consumer receives until it has waited `timeout_ms` for one."""
    out = []
    while True:
        try:
            out.append(consumer.receive(timeout_ms))
        except pulsar.Timeout:
            return out


def wait_for(what, check, timeout=15):
    """`check()`'s first true value, polled every 0.2 s; fails naming `what` after `timeout` s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = check()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
