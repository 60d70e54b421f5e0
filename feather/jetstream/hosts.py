"""Jetstream endpoints: host strings → websocket URLs, vetted before anything connects."""
from __future__ import annotations

from urllib.parse import urlencode, urlsplit, urlunsplit

from feather.outbound import BlockedDestination, FetchFailed
from feather.outbound.policy import assert_public_target


class HostRefused(ValueError):
    """A configured Jetstream host points at a private address while that is not allowed."""


def subscribe_url(host: str) -> str:
    """A bare host means wss://HOST/subscribe; a full ws:// or wss:// URL is taken as is, except
    that one with no path gets Jetstream's only endpoint, /subscribe: its root answers a plain
    200 "Welcome to Jetstream", which the websocket handshake could only report as a failure."""
    host = host.strip()
    if host.startswith(("ws://", "wss://")):
        parts = urlsplit(host)
        if parts.path in ("", "/"):
            return urlunsplit(parts._replace(path="/subscribe"))
        return host
    if "://" in host:
        raise HostRefused(f"Jetstream host {host!r} must be a bare host name or a ws:// / wss:// URL")
    return f"wss://{host}/subscribe"


def with_params(url: str, collections: list[str], dids: list[str] | None, cursor: int | None,
                max_size: int | None = None) -> str:
    params: list[tuple[str, str]] = [("wantedCollections", c) for c in collections]
    params += [("wantedDids", d) for d in dids or ()]
    if cursor is not None:
        params.append(("cursor", str(cursor)))
    if max_size:
        # Jetstream then skips bigger events itself; the socket layer refuses any it sends anyway.
        params.append(("maxMessageSizeBytes", str(max_size)))
    joiner = "&" if "?" in url else "?"
    return url + (joiner + urlencode(params) if params else "")


def vet(url: str, allow_private: bool) -> None:
    """Refuse plain ws:// and non-public addresses unless private networks are allowed.

    The same rules as every outbound fetch (feather.outbound); a name that does not resolve right
    now is left to the consumer's backoff, which vets again on every connect.
    """
    try:
        assert_public_target(url, allow_private_network=allow_private)
    except FetchFailed:
        return
    except BlockedDestination as exc:
        hint = "" if allow_private else " (FEATHERREADER_ALLOW_PRIVATE_NETWORK=1 allows it in development)"
        raise HostRefused(f"Jetstream host refused: {exc}{hint}") from None
