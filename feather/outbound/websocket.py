"""The guarded websocket: the Jetstream socket under the same rules as every outbound fetch.

websocket-client left to itself resolves the name again after we vetted it (a DNS-rebinding
window), follows redirects nobody vetted, and buffers a whole frame before anyone can look at
its size. Here the URL is vetted and resolved once (feather.outbound.policy), the TCP connection goes
to a vetted address (TLS SNI, certificate check and Host header use the name), redirects are
refused, and a frame over the cap is read off the socket in small pieces and thrown away.
"""
from __future__ import annotations

import socket
import ssl

import certifi
import websocket
from websocket._abnf import frame_buffer

from feather.outbound.client import USER_AGENT
from feather.outbound.errors import FetchFailed
from feather.outbound.policy import (
    DEVELOPMENT_POLICY,
    SECURE_SCHEMES,
    STRICT_POLICY,
    AddressPolicy,
    Resolver,
    resolve_destination,
    system_resolver,
)

_DISCARD_CHUNK = 64 * 1024


class FrameTooLarge(Exception):
    """A frame over the cap arrived; its payload was discarded unread and the socket is still usable."""

    def __init__(self, length: int, limit: int):
        self.length, self.limit = length, limit
        super().__init__(f"a frame of {length} bytes exceeds the {limit}-byte limit; discarded")


class _CappedFrameBuffer(frame_buffer):
    """frame_buffer that checks the declared length before it reads the payload."""

    def __init__(self, recv_fn, skip_utf8_validation: bool, limit: int):
        super().__init__(recv_fn, skip_utf8_validation)
        self.limit = limit

    def recv_frame(self):
        # Outside self.lock (a plain Lock the parent takes again): one greenlet reads this socket.
        if self.needs_header():
            self.recv_header()
        if self.needs_length():
            self.recv_length()
        if self.length is not None and self.length > self.limit:
            length = self.length
            if self.needs_mask():
                self.recv_mask()
            left = length
            while left > 0:  # never more than one chunk in memory
                left -= len(self.recv_strict(min(_DISCARD_CHUNK, left)))
            self.clear()
            raise FrameTooLarge(length, self.limit)
        return super().recv_frame()  # header and length are kept: it reads just the payload


def open_websocket(
    url: str,
    *,
    allow_private_network: bool,
    timeout: float,
    max_frame_bytes: int,
    connect_timeout: float = 10.0,
    resolver: Resolver | None = None,
    address_policy: AddressPolicy | None = None,
    ca_bundle: str | None = None,
) -> websocket.WebSocket:
    """Vet, resolve once, connect to a vetted address, handshake without redirects.

    Raises BlockedDestination (never allowed), FetchFailed (no address, nothing answered) or a
    websocket-client error from the handshake (a refused upgrade, a redirect).
    """
    schemes = set(SECURE_SCHEMES) | ({"http", "ws"} if allow_private_network else set())
    policy = address_policy or (DEVELOPMENT_POLICY if allow_private_network else STRICT_POLICY)
    dest = resolve_destination(url, allowed_schemes={s for s in schemes if s.startswith("ws")},
                               policy=policy, resolver=resolver or system_resolver)
    sock = _connect_any(dest, connect_timeout)
    try:
        if dest.scheme == "wss":
            context = ssl.create_default_context(cafile=ca_bundle or certifi.where())
            sock = context.wrap_socket(sock, server_hostname=None if dest.is_ip_literal else dest.host)
        sock.settimeout(timeout)
        ws = websocket.WebSocket(enable_multithread=False, skip_utf8_validation=True)
        ws.frame_buffer = _CappedFrameBuffer(ws._recv, True, max_frame_bytes)
        # socket=: websocket-client uses ours as is (no lookup); redirect_limit=0: a 3xx is an error.
        ws.connect(url, socket=sock, timeout=timeout, redirect_limit=0, host=dest.host_header,
                   header=[f"User-Agent: {USER_AGENT}"], suppress_origin=True)
        return ws
    except BaseException:
        sock.close()
        raise


def _connect_any(dest, connect_timeout: float) -> socket.socket:
    last: OSError | None = None
    for ip in dest.addresses:
        family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(connect_timeout)
        try:
            sock.connect((str(ip), dest.port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:  # nothing sent yet: another vetted address of the name is safe to try
            sock.close()
            last = exc
    raise FetchFailed(f"Could not connect to {dest.host}:{dest.port}: {last}", url=None)
