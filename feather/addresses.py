"""The key a per-address limit counts a client under.

An IPv4 address is one client. An IPv6 client is normally handed a whole /64 (SLAAC, privacy
addresses), so one machine can rotate through 2^64 addresses without asking anyone: every limit
that counts by address (sign-in, the catalogue opt-out, the feeds' outbound budget) counts IPv6
clients by their /64 instead, and an IPv4-mapped address (`::ffff:192.0.2.1`) as its IPv4 address.
"""
from __future__ import annotations

import ipaddress

IPV6_PREFIX = 64


def client_key(remote_addr: str | None) -> str:
    """What a per-address limit counts remote_addr as: the IPv4 address, or the IPv6 /64."""
    try:
        ip = ipaddress.ip_address((remote_addr or "").strip())
    except ValueError:
        return "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{ip}/{IPV6_PREFIX}", strict=False))
    return str(ip)
