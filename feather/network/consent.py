"""Consent (docs/design.md, "The network catalogue"): who is signed in, and a small limiter for the opt-out form.

Opting out needs no account (it can only remove data); opting in to attribution needs a
session (being named is the direction that can harm). The sign-in module owns sessions: it
installs `app.extensions["feather.current_user"]`, a callable returning the signed-in account
as {"did": ..., "handle": ...} or None (tests stub it there). Without a hook, feather.auth's
current_account() is asked when the sign-in module is loaded; without either, nobody is signed in.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque

from flask import current_app, request

from feather import addresses
from feather.auth import current_account
from feather.auth.web import over_rate_limit

WINDOW_SECS = 300.0


def current_user() -> dict | None:
    hook = current_app.extensions.get("feather.current_user")
    if hook is not None:
        user = hook()
    elif "auth" in current_app.extensions:  # the sign-in module is loaded: ask it

        account = current_account()
        user = {"did": account.did, "handle": account.handle} if account is not None else None
    else:
        user = None
    return user if isinstance(user, dict) and str(user.get("did", "")).startswith("did:") else None


class RateLimiter:
    """N attempts per client address per window, in this process (like the login limit).

    At most max_clients addresses are remembered, the least recently seen forgotten first: under a
    spray of addresses the oldest is the one that matters least (it starts over with a full allowance)."""

    def __init__(self, limit: int, window: float = WINDOW_SECS, clock=time.monotonic, max_clients: int = 10_000):
        self.limit, self.window, self.clock, self.max_clients = limit, window, clock, max_clients
        self._hits: OrderedDict[str, deque] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, key: str) -> bool:
        now = self.clock()
        with self._lock:
            hits = self._hits.pop(key, None) or deque()
            self._hits[key] = hits  # most recently seen last
            while len(self._hits) > self.max_clients:
                self._hits.popitem(last=False)
            while hits and hits[0] <= now - self.window:
                hits.popleft()
            if len(hits) >= self.limit:
                return False
            hits.append(now)
            return True


def allow_opt_out_attempt() -> bool:
    """The login limit, counted separately: the sign-in module's shared (database) limiter when it
    is loaded, so every process agrees; otherwise a per-process one with the same numbers."""
    limit = current_app.config["FEATHER"].featherreader_login_rate_limit
    if "auth" in current_app.extensions:
        return not over_rate_limit(f"network-opt-out:{client_key()}", limit)
    return opt_out_limiter().allow(client_key())


def opt_out_limiter() -> RateLimiter:
    found = current_app.extensions.get("network.optout_limiter")
    if found is None:
        limit = current_app.config["FEATHER"].featherreader_login_rate_limit
        found = current_app.extensions["network.optout_limiter"] = RateLimiter(limit)
    return found


def client_key() -> str:
    """The address this request is counted under: an IPv6 client by its /64 (feather/addresses.py)."""
    return addresses.client_key(request.remote_addr)
