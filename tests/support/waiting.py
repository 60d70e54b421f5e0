"""Polling with a deadline, for tests that wait on other processes or greenlets."""
import time


def wait_until(predicate, timeout=20.0, interval=0.05, message="condition", sleep=time.sleep):
    """Return once predicate() is true; fail naming what was awaited (message may be a callable)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        sleep(interval)
    raise AssertionError(f"timed out waiting for {message() if callable(message) else message}")
