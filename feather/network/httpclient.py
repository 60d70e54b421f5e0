"""The guarded client as the network feature uses it, and a per-host pacer for the rebuild.

No new fetch primitive (docs/design.md, "Invariants"): both wrap feather.outbound.GuardedClient. The pacer exists because
a rebuild talks to PDS hosts chosen by strangers and must stay at ≤ 1 request/second per host
however many DIDs live there.
"""
from __future__ import annotations

import time
from typing import Any, Callable
from urllib.parse import urlsplit

import gevent.lock

from feather.atproto.identity import http_client_from_settings
from feather.outbound import GuardedClient


def client_from_settings(settings) -> GuardedClient:
    return http_client_from_settings(settings)


MAX_HOSTS = 1024  # past this many, hosts whose slot has passed are forgotten


class PacedClient:
    """Duck-types GuardedClient (request/get/post) and spaces requests to one host by `interval`."""

    def __init__(self, http: GuardedClient, interval: float = 1.0, *,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = gevent.sleep):
        self.http = http
        self.interval = interval
        self.clock, self.sleep = clock, sleep
        # host -> when its next request may go. A slot in the past means "now", so those are dropped
        # once there are many: a rebuild meets as many hosts as the relays list accounts.
        self._next: dict[str, float] = {}
        self._lock = gevent.lock.Semaphore()

    @property
    def allow_private_network(self) -> bool:
        return self.http.allow_private_network

    def _wait_turn(self, url: str) -> None:
        host = (urlsplit(url).hostname or "").lower()
        with self._lock:  # reserve a slot, then sleep outside the lock
            now = self.clock()
            slot = max(now, self._next.get(host, 0.0))
            self._next[host] = slot + self.interval
            if len(self._next) > MAX_HOSTS:
                self._next = {h: t for h, t in self._next.items() if t > now}
        if slot > now:
            self.sleep(slot - now)

    def request(self, method: str, url: str, **kwargs: Any):
        self._wait_turn(url)
        return self.http.request(method, url, **kwargs)

    def get(self, url: str, **kwargs: Any):
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any):
        return self.request("POST", url, **kwargs)
