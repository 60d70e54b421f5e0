"""The outbound budget of getFeed: how much network work strangers can make this instance do.

getFeed answers anyone (service auth is off by default), and a read can leave the process: the
first read of an (actor, feed) starts a backfill (the actor's DID document, then their PDS), a
handle actor is resolved (DNS, `https://<handle>/.well-known/atproto-did`), a service-auth
issuer's DID document is fetched for its key. Each names a host the caller picked, so each costs
a token from two buckets: one for the whole process and one for the client's address. Reads that
stay local (a cached identity, a backfill already done or in flight) cost nothing. Over budget,
the read is refused with 429 RateLimitExceeded before anything leaves the process.

Token buckets live in process memory: a restart refills them, and each web process has its own
(the global figure is per process). Enough to bound a spray, not a quota system.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Callable

from feather.errors import ApiError

GLOBAL_BURST, GLOBAL_PER_MINUTE = 120, 120  # the whole process: two new lookups a second
CLIENT_BURST, CLIENT_PER_MINUTE = 10, 10  # one address: ten new actors a minute
MAX_CLIENTS = 10_000  # the oldest idle client bucket is dropped first (a full bucket again: harmless)

OVER_BUDGET = ("Too many new feed reads from your address (or from everyone) need lookups on other "
               "servers right now. Try again in a minute.")


class _Bucket:
    __slots__ = ("tokens", "stamp")

    def __init__(self, tokens: float, stamp: float):
        self.tokens, self.stamp = tokens, stamp


class OutboundBudget:
    def __init__(self, *, global_burst: int = GLOBAL_BURST, global_per_minute: float = GLOBAL_PER_MINUTE,
                 client_burst: int = CLIENT_BURST, client_per_minute: float = CLIENT_PER_MINUTE,
                 clock: Callable[[], float] = time.monotonic, max_clients: int = MAX_CLIENTS):
        self.global_burst, self.global_rate = global_burst, global_per_minute / 60.0
        self.client_burst, self.client_rate = client_burst, client_per_minute / 60.0
        self.clock, self.max_clients = clock, max_clients
        self._global = _Bucket(global_burst, clock())
        self._clients: OrderedDict[str, _Bucket] = OrderedDict()
        self._lock = threading.Lock()

    def _refill(self, bucket: _Bucket, burst: int, rate: float, now: float) -> None:
        bucket.tokens = min(burst, bucket.tokens + (now - bucket.stamp) * rate)
        bucket.stamp = now

    def take(self, client: str) -> bool:
        """Spend one token from the global and the client's bucket; False (spending nothing) if
        either is empty."""
        with self._lock:
            now = self.clock()
            mine = self._clients.pop(client, None) or _Bucket(self.client_burst, now)
            self._clients[client] = mine  # most recently used last
            while len(self._clients) > self.max_clients:
                self._clients.popitem(last=False)
            self._refill(self._global, self.global_burst, self.global_rate, now)
            self._refill(mine, self.client_burst, self.client_rate, now)
            if self._global.tokens < 1 or mine.tokens < 1:
                return False
            self._global.tokens -= 1
            mine.tokens -= 1
            return True


def budget_for(app) -> OutboundBudget:
    found = app.extensions.get("feeds_outbound_budget")
    if found is None:
        found = app.extensions["feeds_outbound_budget"] = OutboundBudget()
    return found


def spend(app, client: str | None) -> None:
    """Pay for one outbound lookup on behalf of client, or refuse the read with a 429."""
    if not budget_for(app).take(client or "unknown"):
        raise ApiError(429, "RateLimitExceeded", OVER_BUDGET)
