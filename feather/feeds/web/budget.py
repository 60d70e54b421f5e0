"""The outbound budget of the feeds' reads: how much network work strangers can make this instance do.

getFeed and listRecords answer anyone (service auth is off by default), and a read can leave the
process: the first read of an (actor, feed) starts a backfill (the actor's DID document, then their
PDS), a handle is resolved (DNS, `https://<handle>/.well-known/atproto-did`, the configured
resolver), a service-auth issuer's DID document is fetched for its key, `listRecords?actor=` lists
the author's PDS. Each names a host the caller picked, so each costs a token from two buckets: one
for the whole process and one for the client (its address; an IPv6 client's /64). Reads that stay
local (a cached identity, a backfill already done or in flight) cost nothing.

The budget bounds outbound work, never reads. Work that only improves a later answer (a backfill
claim, an author listing) is skipped when the budget is spent (`try_spend`) and the read is answered
from what is stored; the next read tries again. Only a read that cannot be answered without a
lookup (a handle not in the cache, an issuer's key) is refused (`spend`): 429 RateLimitExceeded
with Retry-After, before anything leaves the process.

Token buckets live in process memory: a restart refills them, and each web process has its own
(the global figure is per process). Enough to bound a spray, not a quota system.
"""
from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from typing import Callable

from feather.addresses import client_key
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

    def retry_after(self, client: str) -> int:
        """Whole seconds until both buckets hold a token again (at least 1): a refused client's Retry-After."""
        with self._lock:
            now = self.clock()
            mine = self._clients.get(client) or _Bucket(self.client_burst, now)
            waits = [(1 - b.tokens - (now - b.stamp) * rate) / rate
                     for b, rate in ((self._global, self.global_rate), (mine, self.client_rate)) if rate > 0]
            return max(1, math.ceil(max(waits, default=60.0)))


def budget_for(app) -> OutboundBudget:
    found = app.extensions.get("feeds_outbound_budget")
    if found is None:
        found = app.extensions["feeds_outbound_budget"] = OutboundBudget()
    return found


def try_spend(app, remote_addr: str | None) -> bool:
    """Pay for optional outbound work (a backfill claim, an author listing): False when the budget
    is spent, and the caller answers from what is stored instead."""
    return budget_for(app).take(client_key(remote_addr))


def spend(app, remote_addr: str | None) -> None:
    """Pay for a lookup the read cannot be answered without, or refuse the read: 429 with Retry-After."""
    budget, client = budget_for(app), client_key(remote_addr)
    if not budget.take(client):
        raise ApiError(429, "RateLimitExceeded", OVER_BUDGET,
                       headers={"Retry-After": str(budget.retry_after(client))})
