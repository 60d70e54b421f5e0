"""Jetstream endpoints: host strings → websocket URLs, vetted before anything connects."""
from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlencode, urlsplit


class HostRefused(ValueError):
    """A configured Jetstream host points at a private address while that is not allowed."""


def subscribe_url(host: str) -> str:
    """A bare host means wss://HOST/subscribe; a full ws:// or wss:// URL is taken as is."""
    host = host.strip()
    if host.startswith(("ws://", "wss://")):
        return host
    if "://" in host:
        raise HostRefused(f"Jetstream host {host!r} must be a bare host name or a ws:// / wss:// URL")
    return f"wss://{host}/subscribe"


def with_params(url: str, collections: list[str], dids: list[str] | None, cursor: int | None) -> str:
    params: list[tuple[str, str]] = [("wantedCollections", c) for c in collections]
    params += [("wantedDids", d) for d in dids or ()]
    if cursor is not None:
        params.append(("cursor", str(cursor)))
    joiner = "&" if "?" in url else "?"
    return url + (joiner + urlencode(params) if params else "")


def _is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def vet(url: str, allow_private: bool, resolve=socket.getaddrinfo) -> None:
    """Refuse plain ws:// and non-public addresses unless private networks are allowed."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise HostRefused(f"Jetstream URL {url!r} is not a ws:// or wss:// URL")
    if allow_private:
        return
    if parts.scheme != "wss":
        raise HostRefused(f"Jetstream URL {url!r}: plain ws:// needs FEATHERREADER_ALLOW_PRIVATE_NETWORK=1")
    try:
        infos = resolve(parts.hostname, parts.port or 443, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return  # unresolvable now: the consumer's backoff will keep trying, and vet again
    for info in infos:
        address = info[4][0]
        if not _is_public(address):
            raise HostRefused(
                f"Jetstream host {parts.hostname} resolves to non-public address {address}; "
                "set FEATHERREADER_ALLOW_PRIVATE_NETWORK=1 for development")
