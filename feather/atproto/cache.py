"""A small in-process cache with a lifetime *and* a size bound, for answers keyed by outside input.

Identity answers (handles, DID documents) and authorization-server metadata are keyed by what a
stranger types or a remote server says, so a plain dict would grow with every new key. Every
entry lives `ttl` seconds at most and at most `max_entries` are held: past that the oldest insert
goes. All entries share one ttl and a re-put moves its key to the end, so insertion order is
expiry order: the oldest insert is always the next to expire, and expired entries are dropped
from the front on each put instead of lingering until someone asks for them.
"""
from __future__ import annotations

import threading
from typing import Any, Callable


class TtlCache:
    def __init__(self, ttl: float, clock: Callable[[], float], max_entries: int = 10_000):
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
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
            now = self.clock()
            self._data.pop(key, None)  # a re-put is a new insert: to the end, with a fresh lifetime
            while self._data:
                oldest = next(iter(self._data))
                if self._data[oldest][0] > now and len(self._data) < self.max_entries:
                    break
                del self._data[oldest]  # expired, or the one that makes room
            self._data[key] = (now + self.ttl, value)

    def discard(self, key) -> None:
        with self._lock:
            self._data.pop(key, None)

    def __len__(self) -> int:
        """Entries held, expired ones not yet dropped included (what the memory holds)."""
        return len(self._data)
