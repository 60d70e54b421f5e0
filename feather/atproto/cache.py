"""A small in-process TTL cache for identity answers (handles, DID documents)."""
from __future__ import annotations

import threading
from typing import Any, Callable


class TtlCache:
    def __init__(self, ttl: float, clock: Callable[[], float], max_entries: int = 10_000):
        self.ttl, self.clock, self.max_entries = ttl, clock, max_entries
        self._data: dict[Any, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            hit = self._data.get(key)
            if hit is None or hit[0] <= self.clock():
                self._data.pop(key, None)
                return None
            return hit[1]

    def put(self, key, value) -> None:
        with self._lock:
            if len(self._data) >= self.max_entries:
                self._data.pop(next(iter(self._data)))  # oldest insert; good enough for a small cache
            self._data[key] = (self.clock() + self.ttl, value)

    def discard(self, key) -> None:
        with self._lock:
            self._data.pop(key, None)
