"""Where an outbound fetch may go: URL shape, host spelling, DNS answers and the address rules.

Every address a name resolves to is vetted, and the caller must connect to one of the returned
addresses rather than resolving again: a second lookup is a DNS-rebinding window.
"""
from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Callable, Iterable
from urllib.parse import urlsplit

from feather.outbound.errors import BlockedDestination, FetchFailed
from feather.parsing import ascii_int

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]

DEFAULT_PORTS = {"https": 443, "http": 80, "wss": 443, "ws": 80}
SECURE_SCHEMES = frozenset({"https", "wss"})


def _nets(*pairs: tuple[str, str]) -> tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...]:
    return tuple((ipaddress.ip_network(net), why) for net, why in pairs)


# What a developer's own machine and LAN use; allowed when allow_private is set.
_PRIVATE = _nets(
    ("127.0.0.0/8", "a loopback address"),
    ("10.0.0.0/8", "a private (RFC 1918) address"),
    ("172.16.0.0/12", "a private (RFC 1918) address"),
    ("192.168.0.0/16", "a private (RFC 1918) address"),
    ("100.64.0.0/10", "a carrier-grade NAT (RFC 6598) address"),
    ("::1/128", "a loopback address"),
    ("fc00::/7", "a unique local (ULA) address"),
)
# Never a sensible destination, in development either.
_NEVER = _nets(
    ("0.0.0.0/8", "an unspecified address"),
    ("169.254.0.0/16", "a link-local address (cloud metadata services live here)"),
    ("192.0.0.0/24", "an IETF protocol address"),
    ("192.0.2.0/24", "a documentation address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("192.88.99.0/24", "a 6to4 relay address"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),  # includes 255.255.255.255
    ("::/128", "an unspecified address"),
    ("::/8", "a reserved address (including IPv4-compatible forms)"),
    ("64:ff9b:1::/48", "a local-use NAT64 address"),
    ("100::/64", "a discard-only address"),
    ("2001::/23", "an IETF protocol address (including Teredo)"),
    ("2001:db8::/32", "a documentation address"),
    ("3fff::/20", "a documentation address"),
    ("2002::/16", "a 6to4 address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class AddressPolicy:
    """Decides whether one IP address may be connected to.

    The default instance is the production rule set. `allow_private` opens loopback, RFC 1918,
    CGNAT and ULA for development. `exempt` names exact addresses that skip the rules; it exists
    so tests can point the production rules at a server on 127.0.0.1 and nothing else.
    """

    def __init__(self, *, allow_private: bool = False, exempt: Iterable[str] = ()):
        self.allow_private = allow_private
        self.exempt = frozenset(ipaddress.ip_address(a) for a in exempt)

    def blocked_reason(self, ip: str | IPAddress) -> str | None:
        """None if the address may be used, otherwise what kind of address it is."""
        ip = ipaddress.ip_address(ip) if isinstance(ip, str) else ip
        if ip in self.exempt:
            return None
        if isinstance(ip, ipaddress.IPv6Address):
            if ip.scope_id:
                ip = ipaddress.IPv6Address(str(ip).split("%", 1)[0])
            # An embedded IPv4 address is where the packets really go.
            if ip.ipv4_mapped is not None:
                return self.blocked_reason(ip.ipv4_mapped)
            if ip in _NAT64:
                return self.blocked_reason(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        for net, why in _PRIVATE:
            if ip.version == net.version and ip in net:
                return None if self.allow_private else why
        for net, why in _NEVER:
            if ip.version == net.version and ip in net:
                return why
        # Catch-all for anything the tables above missed: Python's registry-derived view.
        if not self.allow_private and not ip.is_global:
            return "not a globally routable address"
        return None

    def check(self, ip: str | IPAddress, *, host: str | None = None, url: str | None = None) -> None:
        reason = self.blocked_reason(ip)
        if reason is not None:
            where = f"{host} resolves to {ip}" if host and host != str(ip) else f"{ip}"
            raise BlockedDestination(f"{where}, which is {reason}; refusing to connect.", url=url)


STRICT_POLICY = AddressPolicy()
DEVELOPMENT_POLICY = AddressPolicy(allow_private=True)


def system_resolver(host: str, port: int) -> list[str]:
    """Every IPv4/IPv6 address the system resolver returns for host, in its order."""
    out: list[str] = []
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        if family in (socket.AF_INET, socket.AF_INET6) and sockaddr[0] not in out:
            out.append(sockaddr[0])
    return out


_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")


def _legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """What inet_aton (and browsers) make of a numeric host: 2130706433, 0177.0.0.1, 0x7f.1."""
    parts = host.split(".")
    if len(parts) > 4:
        return None
    nums = []
    for p in parts:
        # Only the ASCII spellings inet_aton knows; `int()` would take "²" or "٣" (or raise).
        if p.startswith("0x"):
            if not re.fullmatch(r"0x[0-9a-f]*", p):
                return None
            nums.append(int(p[2:] or "0", 16))
        elif len(p) > 1 and p.startswith("0"):
            if not re.fullmatch(r"[0-7]+", p):
                return None
            nums.append(int(p, 8))
        elif ascii_int(p) is not None:
            nums.append(ascii_int(p))
        else:
            return None
    *head, last = nums
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(nums)):
        return None
    value = last
    for i, n in enumerate(head):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def parse_host(host: str, *, url: str | None = None) -> IPAddress | None:
    """The address of an IP-literal host, or None for a DNS name that still has to be resolved.

    Refuses numeric spellings other than plain dotted quads: no legitimate URL needs them, and
    they exist in the wild to slip 127.0.0.1 past filters that only parse the canonical form.
    """
    host = host.lower()
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    if name and _NUMERIC_LABEL.fullmatch(name.rsplit(".", 1)[-1]):
        legacy = _legacy_ipv4(name)
        if legacy is not None:
            raise BlockedDestination(
                f"{host!r} is a non-standard spelling of the IPv4 address {legacy}; refusing it.", url=url
            )
        raise BlockedDestination(f"{host!r} is neither a host name nor an IP address.", url=url)
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise BlockedDestination(f"{host!r} is not a valid host name.", url=url)
    return None


@dataclass(frozen=True)
class Destination:
    scheme: str
    host: str  # ASCII, lowercase, no brackets
    port: int
    addresses: tuple[IPAddress, ...]  # all vetted; connect to these and nothing else
    is_ip_literal: bool

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if DEFAULT_PORTS.get(self.scheme) == self.port else f"{host}:{self.port}"


def resolve_destination(
    url: str,
    *,
    allowed_schemes: Iterable[str],
    policy: AddressPolicy = STRICT_POLICY,
    resolver: Resolver = system_resolver,
) -> Destination:
    """Check a URL's shape, resolve its host exactly once, and vet every address."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise BlockedDestination(f"{url!r} is not a valid URL.", url=url) from None
    scheme = parts.scheme.lower()
    if scheme not in allowed_schemes:
        allowed = " or ".join(sorted(allowed_schemes))
        raise BlockedDestination(f"The {scheme or 'missing'} scheme is not allowed; use {allowed}.", url=url)
    if parts.username is not None or parts.password is not None:
        raise BlockedDestination("URLs carrying a user name or password are not fetched.", url=url)
    if not parts.hostname:
        raise BlockedDestination(f"{url!r} has no host.", url=url)
    host = parts.hostname
    literal = parse_host(host, url=url)
    port = port or DEFAULT_PORTS[scheme]
    if literal is not None:
        addresses: tuple[IPAddress, ...] = (literal,)
    else:
        try:
            answers = resolver(host, port)
            addresses = tuple(ipaddress.ip_address(a) for a in answers)
        except (OSError, UnicodeError) as e:
            raise FetchFailed(f"Could not resolve {host}: {e}.", url=url) from e
        except ValueError as e:
            raise FetchFailed(f"The resolver returned a malformed address for {host}.", url=url) from e
        if not addresses:
            raise FetchFailed(f"{host} has no addresses.", url=url)
    # One bad answer condemns the name: the attacker chooses which answer we would get next time.
    for ip in addresses:
        policy.check(ip, host=host, url=url)
    return Destination(scheme, host.lower(), port, addresses, literal is not None)


def assert_public_target(
    url: str, *, allow_private_network: bool = False, resolver: Resolver = system_resolver
) -> Destination:
    """Vet a URL the app will connect to by other means (the Jetstream wss:// host, at startup).

    Secure schemes are always allowed; http and ws only with allow_private_network.
    """
    schemes = set(SECURE_SCHEMES) | ({"http", "ws"} if allow_private_network else set())
    policy = DEVELOPMENT_POLICY if allow_private_network else STRICT_POLICY
    return resolve_destination(url, allowed_schemes=schemes, policy=policy, resolver=resolver)
