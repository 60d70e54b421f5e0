"""The typed failures of an outbound fetch; callers catch NetError or one of its kinds."""
from __future__ import annotations


class NetError(Exception):
    """Base class for every failure of the guarded client."""

    def __init__(self, message: str, *, url: str | None = None):
        super().__init__(message)
        self.url = url


class BlockedDestination(NetError):
    """The URL, its scheme or an address its host resolves to is not allowed."""


class TooManyRedirects(NetError):
    """The redirect chain was longer than the client follows."""


class BodyTooLarge(NetError):
    """The response body went over the byte cap; reading stopped there."""

    def __init__(self, message: str, *, limit: int, url: str | None = None):
        super().__init__(message, url=url)
        self.limit = limit


class FetchTimeout(NetError):
    """Connecting, waiting for a byte, or the whole fetch took too long."""


class FetchFailed(NetError):
    """A network-level failure: DNS, refused connection, TLS, a broken or malformed reply."""
