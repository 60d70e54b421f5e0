"""FetchResponse: what GuardedClient hands back, read in full and capped before anyone sees it."""
from __future__ import annotations

from typing import Any

from feather.parsing import loads_limited


class FetchResponse:
    """A fully read, size-capped response."""

    def __init__(
        self, status_code: int, headers: Any, content: bytes, url: str, history: tuple[str, ...]
    ):
        self.status_code = status_code
        self.headers = headers  # case-insensitive mapping
        self.content = content
        self.url = url  # after redirects
        self.history = history  # the URLs that redirected here, first to last

    @property
    def ok(self) -> bool:
        return 200 <= self.status_code < 400

    @property
    def text(self) -> str:
        charset = "utf-8"
        for param in self.headers.get("content-type", "").split(";")[1:]:
            key, _, value = param.strip().partition("=")
            if key.lower() == "charset" and value:
                charset = value.strip('"')
        try:
            return self.content.decode(charset, errors="replace")
        except LookupError:
            return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        # Depth-limited: callers catch ValueError, and a hostile server's `[[[…` would otherwise
        # surface as a RecursionError.
        return loads_limited(self.content)

    def __repr__(self) -> str:
        return f"<FetchResponse {self.status_code} {self.url}>"
