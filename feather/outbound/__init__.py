"""The one guarded outbound client and its SSRF rules: every fetch of a URL goes through GuardedClient
and the Jetstream socket through feather.outbound.websocket."""
from __future__ import annotations

from feather.outbound.client import DEFAULT_MAX_BODY_BYTES, USER_AGENT, FetchResponse, GuardedClient
from feather.outbound.errors import (
    BlockedDestination,
    BodyTooLarge,
    FetchFailed,
    FetchTimeout,
    NetError,
    TooManyRedirects,
)
from feather.outbound.policy import (
    DEVELOPMENT_POLICY,
    STRICT_POLICY,
    AddressPolicy,
    Destination,
    assert_public_target,
    parse_host,
    resolve_destination,
    system_resolver,
)

__all__ = [
    "AddressPolicy",
    "BlockedDestination",
    "BodyTooLarge",
    "DEFAULT_MAX_BODY_BYTES",
    "DEVELOPMENT_POLICY",
    "Destination",
    "FetchFailed",
    "FetchResponse",
    "FetchTimeout",
    "GuardedClient",
    "NetError",
    "STRICT_POLICY",
    "TooManyRedirects",
    "USER_AGENT",
    "assert_public_target",
    "parse_host",
    "resolve_destination",
    "system_resolver",
]
