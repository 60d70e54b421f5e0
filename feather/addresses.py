"""The key a per-address limit counts a client under.

An IPv4 address is one client. An IPv6 client is normally handed a whole /64 (SLAAC, privacy
addresses), so one machine can rotate through 2^64 addresses without asking anyone: every limit
that counts by address (sign-in, the catalogue opt-out, the feeds' outbound budget) counts IPv6
clients by their /64 instead, and an IPv4-mapped address (`::ffff:192.0.2.1`) as its IPv4 address.

Some proxies write the client's port into X-Forwarded-For (`192.0.2.1:54321`, `[2001:db8::1]:443`),
which ProxyFix hands on as the remote address: the port is dropped, since a client picks a new one
per connection. Anything unparseable counts as one shared client, "unknown": a limit that cannot
tell clients apart must still limit, not let every odd spelling through.
"""
from __future__ import annotations

import ipaddress

IPV6_PREFIX = 64
UNKNOWN = "unknown"


def client_key(remote_addr: str | None) -> str:
    """What a per-address limit counts remote_addr as: the IPv4 address, or the IPv6 /64."""
    ip = _parse((remote_addr or "").strip())
    if ip is None:
        return UNKNOWN
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{ip}/{IPV6_PREFIX}", strict=False))
    return str(ip)


def _parse(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if text.startswith("["):  # "[v6]:port" (or "[v6]")
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not _is_port(rest)):
            return None
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            return None
    host, _, port = text.partition(":")
    if ":" in port or not _is_port(":" + port):  # an IPv4 address has exactly one ":port"
        return None
    try:
        return ipaddress.IPv4Address(host)
    except ValueError:
        return None


def _is_port(text: str) -> bool:
    digits = text[1:]
    # isascii too: "²".isdigit() is True
    return text.startswith(":") and 0 < len(digits) <= 5 and digits.isascii() and digits.isdigit()
