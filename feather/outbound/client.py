"""GuardedClient: the one HTTP client for every outbound fetch.

requests only prepares the request (URL normalisation, IDNA, query and body encoding). The bytes
go out through a urllib3 pool opened on the vetted IP address, with TLS SNI and certificate checks
against the host name and a Host header carrying it, so no second DNS lookup ever happens.
"""
from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Iterator
from urllib.parse import urljoin, urlsplit

import certifi
import requests
import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    NewConnectionError,
    ReadTimeoutError,
)

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
    Resolver,
    resolve_destination,
    system_resolver,
)
from feather.outbound.response import FetchResponse
from feather.parsing import ascii_int

log = logging.getLogger(__name__)

PROJECT_URL = "https://github.com/feather-atproto/feather"  # the public repository of this project
USER_AGENT = f"Feather/0.1 (+{PROJECT_URL}; atproto service)"
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024

_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Credentials for one origin must not follow a redirect to another.
_ORIGIN_BOUND_HEADERS = ("authorization", "proxy-authorization", "cookie", "dpop")
_BODY_HEADERS = ("content-type", "content-length", "transfer-encoding")
_CHUNK = 64 * 1024


@contextlib.contextmanager
def _translated(url: str) -> Iterator[None]:
    try:
        yield
    except NetError:
        raise
    except (ConnectTimeoutError, ReadTimeoutError, TimeoutError) as e:
        if isinstance(e, NewConnectionError):
            raise FetchFailed(f"Could not connect for {url}: {e}", url=url) from e
        raise FetchTimeout(f"Timed out fetching {url}.", url=url) from e
    except (HTTPError, OSError) as e:
        raise FetchFailed(f"Fetching {url} failed: {e}", url=url) from e


class GuardedClient:
    """HTTP client with the SSRF rules built in; safe to share between greenlets.

    https only, unless allow_private_network (development and tests), which also admits http and
    loopback/private addresses. `resolver` maps (host, port) to IP strings and is asked once per
    hop. `address_policy` overrides the address rules; tests use it to exempt their own server.
    """

    def __init__(
        self,
        *,
        allow_private_network: bool = False,
        connect_timeout: float = 5.0,
        read_timeout: float = 15.0,
        total_timeout: float = 60.0,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_redirects: int = 5,
        user_agent: str = USER_AGENT,
        resolver: Resolver | None = None,
        address_policy: AddressPolicy | None = None,
        ca_bundle: str | None = None,
    ):
        self.allow_private_network = allow_private_network
        self.schemes = frozenset({"https", "http"} if allow_private_network else {"https"})
        default_policy = DEVELOPMENT_POLICY if allow_private_network else STRICT_POLICY
        self.policy = address_policy or default_policy
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.total_timeout = total_timeout
        self.max_body_bytes = max_body_bytes
        self.max_redirects = max_redirects
        self.user_agent = user_agent
        self.resolver = resolver or system_resolver
        self.ca_bundle = ca_bundle or certifi.where()

    def get(self, url: str, **kwargs: Any) -> FetchResponse:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> FetchResponse:
        return self.request("POST", url, **kwargs)

    def request(
        self,
        method: str,
        url: str,
        *,
        params: Any = None,
        headers: dict[str, str] | None = None,
        json: Any = None,
        data: Any = None,
        max_body_bytes: int | None = None,
    ) -> FetchResponse:
        cap = self.max_body_bytes if max_body_bytes is None else max_body_bytes
        deadline = time.monotonic() + self.total_timeout
        method, url, out_headers, body = self._prepare(method, url, params, headers, json, data)
        history: list[str] = []
        while True:
            dest = resolve_destination(
                url, allowed_schemes=self.schemes, policy=self.policy, resolver=self.resolver
            )
            pool, resp = self._open(dest, method, url, out_headers, body, deadline)
            try:
                location = resp.headers.get("location") if resp.status in _REDIRECT_STATUSES else None
                if not location:
                    content = self._read_capped(resp, cap, deadline, url)
                    return FetchResponse(resp.status, resp.headers, content, url, tuple(history))
            finally:
                # close(), not release_conn(): the socket must really shut now, so a server still
                # streaming at us finds the connection gone; nothing is reused across fetches.
                resp.close()
                pool.close()
            history.append(url)
            if len(history) > self.max_redirects:
                raise TooManyRedirects(
                    f"Gave up after {self.max_redirects} redirects starting at {history[0]}.", url=url
                )
            next_url = _normalise_url(urljoin(url, location))
            log.debug("redirect %s %s -> %s", resp.status, url, next_url)
            see_other = resp.status == 303 and method != "HEAD"
            if see_other or (resp.status in (301, 302) and method == "POST"):
                method, body = "GET", None
                out_headers = {k: v for k, v in out_headers.items() if k.lower() not in _BODY_HEADERS}
            if _origin(next_url) != _origin(url):
                if body is not None:
                    # A 307/308 resends the body as is, and a body can be a credential (the app
                    # password of createSession); it stays with the origin it was meant for.
                    raise BlockedDestination(
                        f"{url} redirected a request body to another origin ({next_url}); not resending it.",
                        url=next_url,
                    )
                out_headers = {
                    k: v for k, v in out_headers.items() if k.lower() not in _ORIGIN_BOUND_HEADERS
                }
            url = next_url

    def _prepare(self, method, url, params, headers, json, data):
        merged = {"User-Agent": self.user_agent, "Accept": "*/*", "Accept-Encoding": "gzip, deflate"}
        merged.update(headers or {})
        try:
            prepared = requests.Request(
                method.upper(), url, headers=merged, params=params, json=json, data=data
            ).prepare()
        except requests.exceptions.InvalidJSONError:
            raise  # the caller's bug, not the URL's
        except (requests.RequestException, ValueError) as e:
            raise BlockedDestination(f"{url!r} is not a valid URL: {e}", url=url) from e
        # Host comes from the URL on every hop; a caller-set one would detach it from what was vetted.
        out = {k: v for k, v in prepared.headers.items() if k.lower() != "host"}
        body = prepared.body.encode("utf-8") if isinstance(prepared.body, str) else prepared.body
        if body is not None and not isinstance(body, bytes):
            raise TypeError("GuardedClient sends bytes, str, form dicts or JSON bodies, not streams.")
        return prepared.method, prepared.url, out, body

    def _open(self, dest: Destination, method, url, headers, body, deadline):
        """Send on a pool bound to a vetted address; returns (pool, unread response)."""
        target = urlsplit(url)
        path = (target.path or "/") + (f"?{target.query}" if target.query else "")
        headers = {**headers, "Host": dest.host_header}
        last_error: Exception | None = None
        for ip in dest.addresses:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            timeout = urllib3.Timeout(
                connect=min(self.connect_timeout, remaining), read=min(self.read_timeout, remaining)
            )
            pool = self._pool(dest, str(ip), timeout)
            try:
                with _translated(url):
                    try:
                        resp = pool.urlopen(
                            method, path, body=body, headers=headers, retries=False, redirect=False,
                            preload_content=False, assert_same_host=False, release_conn=False,
                        )
                    except (NewConnectionError, ConnectTimeoutError) as e:
                        # Nothing was sent, so another vetted address of the same name is safe to try.
                        last_error = e
                        pool.close()
                        continue
                return pool, resp
            except BaseException:
                pool.close()
                raise
        with _translated(url):
            raise last_error or FetchTimeout(f"Timed out fetching {url}.", url=url)

    def _pool(self, dest: Destination, ip: str, timeout: urllib3.Timeout) -> urllib3.HTTPConnectionPool:
        common = dict(port=dest.port, timeout=timeout, maxsize=1, retries=False)
        if dest.scheme == "http":
            return urllib3.HTTPConnectionPool(ip, **common)
        return urllib3.HTTPSConnectionPool(
            ip,
            cert_reqs="CERT_REQUIRED",
            ca_certs=self.ca_bundle,
            # SNI and certificate verification use the name; the socket uses the vetted IP.
            server_hostname=None if dest.is_ip_literal else dest.host,
            **common,
        )

    def _read_capped(self, resp: urllib3.BaseHTTPResponse, cap: int, deadline: float, url: str) -> bytes:
        too_large = BodyTooLarge(
            f"The response from {url} is larger than {cap} bytes.", limit=cap, url=url
        )
        raw_length = resp.headers.get("content-length")
        declared = ascii_int(raw_length.strip()) if raw_length is not None else None
        if raw_length is not None and declared is None and "," not in raw_length:
            # Callers catch NetError: a `Content-Length: ²` must not escape as a bare ValueError.
            raise FetchFailed(f"{url} sent a malformed Content-Length {raw_length!r}.", url=url)
        encoding = resp.headers.get("content-encoding", "identity").strip().lower()
        if declared is not None and encoding in ("", "identity") and declared > cap:
            raise too_large
        buf = bytearray()
        with _translated(url):
            while True:
                if time.monotonic() > deadline:
                    raise FetchTimeout(f"Fetching {url} took longer than {self.total_timeout} s.", url=url)
                # read1 returns what one socket read yields, and decompresses at most _CHUNK bytes
                # per call, so neither a slow drip nor a compression bomb gets past the checks.
                chunk = resp.read1(_CHUNK, decode_content=True)
                if not chunk:
                    return bytes(buf)
                buf += chunk
                if len(buf) > cap:
                    raise too_large


def _normalise_url(url: str) -> str:
    try:
        prepared = requests.models.PreparedRequest()
        prepared.prepare_url(url, None)
        return prepared.url
    except (requests.RequestException, ValueError) as e:
        raise BlockedDestination(f"Redirected to {url!r}, which is not a valid URL: {e}", url=url) from e


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.hostname, parts.port
