"""The relay client: `com.atproto.sync.listReposByCollection`, paged politely.

Every request goes through the guarded client: the relay host is operator-configured, which
makes it input by the same argument that guards handle resolution. Pages are walked until no
cursor comes back, or an empty page comes back (a relay that echoes a cursor forever must not
spin us), or MAX_PAGES is reached, which makes the result a floor and is marked `truncated`.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from feather.outbound import GuardedClient, NetError

log = logging.getLogger(__name__)

COLLECTION = "community.lexicon.rss.subscription"
PAGE_LIMIT = 500
MAX_PAGES = 50  # 25 000 repos at 500 a page
PAGE_PAUSE_SECS = 1.0
NSID = "com.atproto.sync.listReposByCollection"


class RelayError(Exception):
    """The run could not finish; `source` is the relay. The previous observation stays."""

    def __init__(self, source: str, message: str):
        super().__init__(f"{source}: {message}")
        self.source = source


class RelayRateLimited(RelayError):
    def __init__(self, source: str, retry_after: str | None):
        super().__init__(source, f"429 Too Many Requests (Retry-After: {retry_after or 'not given'})")
        self.retry_after = retry_after


@dataclass(frozen=True)
class AdoptionObservation:
    source: str
    collection: str
    repos: int
    truncated: bool
    observed_at: str  # ISO 8601 UTC, second precision


def base_url(host: str) -> str:
    """A bare host means https://HOST; a full URL is taken as is (like the Jetstream hosts)."""
    host = host.strip().rstrip("/")
    return host if "://" in host else f"https://{host}"


class RelayClient:
    def __init__(self, http: GuardedClient, host: str, *, sleep: Callable[[float], None] = time.sleep,
                 max_pages: int = MAX_PAGES, page_limit: int = PAGE_LIMIT,
                 pause_secs: float = PAGE_PAUSE_SECS):
        self.http = http
        self.source = host
        self.url = f"{base_url(host)}/xrpc/{NSID}"
        self.sleep = sleep
        self.max_pages, self.page_limit, self.pause_secs = max_pages, page_limit, pause_secs
        self.truncated = False
        self.cursor: str | None = None

    def iter_pages(self, collection: str = COLLECTION, cursor: str | None = None) -> Iterator[list[str]]:
        """Each page's DIDs, from `cursor` on. After each page self.cursor is where the next one
        starts (None: the walk ended). Sets self.truncated when the page cap ends the walk."""
        self.truncated = False
        self.cursor = cursor
        for page in range(self.max_pages):
            if page:
                self.sleep(self.pause_secs)  # one page per second, never faster
            dids, cursor = self._page(collection, cursor)
            self.cursor = cursor if dids else None
            yield dids
            if not cursor or not dids:
                return
        self.truncated = True
        log.warning("relay %s: stopped after %d pages of %s; the count is a floor", self.source,
                    self.max_pages, collection)

    def count_repos_with_collection(self, collection: str = COLLECTION) -> AdoptionObservation:
        total = sum(len(dids) for dids in self.iter_pages(collection))
        return AdoptionObservation(self.source, collection, total, self.truncated, utc_now_iso())

    def _page(self, collection: str, cursor: str | None) -> tuple[list[str], str | None]:
        params = {"collection": collection, "limit": str(self.page_limit)}
        if cursor:
            params["cursor"] = cursor
        try:
            resp = self.http.get(self.url, params=params, headers={"Accept": "application/json"})
        except NetError as exc:
            raise RelayError(self.source, f"unreachable: {exc}") from None
        if resp.status_code == 429:
            raise RelayRateLimited(self.source, resp.headers.get("retry-after"))
        if resp.status_code != 200:
            raise RelayError(self.source, f"HTTP {resp.status_code}")
        try:
            body = resp.json()
            repos = body["repos"]
            if not isinstance(repos, list):
                raise TypeError("repos is not a list")
            dids = [r["did"] for r in repos]
            if not all(isinstance(d, str) and d.startswith("did:") for d in dids):
                raise TypeError("a repo without a DID")
        except (ValueError, KeyError, TypeError) as exc:
            raise RelayError(self.source, f"malformed reply: {exc}") from None
        next_cursor = body.get("cursor")
        return dids, next_cursor if isinstance(next_cursor, str) and next_cursor else None


def utc_now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
