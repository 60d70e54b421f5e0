"""Portability: read an account's rss subscription records off its PDS as a stranger.

Anonymous, through the guarded client, no session and no cache: if this works, any other
implementation reading only the public lexicon gets the same usable data.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from feather.atproto.identity import resolver_for
from feather.atproto.pds import PdsClient
from feather.atproto.syntax import InvalidSyntax, is_valid_datetime, parse_datetime
from feather.network import privacy
from feather.network.relay import COLLECTION


class InvalidSubscription(ValueError):
    pass


@dataclass(frozen=True)
class Subscription:
    rkey: str
    url: str
    created_at: datetime
    public: bool  # False: secret-bearing by the privacy rules; never indexed

    @property
    def href(self) -> str | None:
        return self.url if self.url.lower().startswith(("http://", "https://")) else None


def parse_subscription(uri: str, value) -> Subscription:
    """The lexicon's required fields: a non-empty url and a parseable createdAt."""
    if not isinstance(value, dict):
        raise InvalidSubscription(f"{uri}: the record is not an object")
    url, created = value.get("url"), value.get("createdAt")
    if not isinstance(url, str) or not url.strip():
        raise InvalidSubscription(f"{uri}: url is missing or empty")
    if not isinstance(created, str) or not is_valid_datetime(created):
        raise InvalidSubscription(f"{uri}: createdAt {created!r} is not an atproto datetime")
    try:
        stamp = parse_datetime(created)
    except InvalidSyntax:  # well-formed but not a real instant (a year-9999 date past an offset)
        raise InvalidSubscription(f"{uri}: createdAt {created!r} is not a time") from None
    return Subscription(uri.rsplit("/", 1)[-1], url.strip(), stamp, not privacy.is_private(url))


def read_subscriptions_with(resolver, http, did: str, *, strict: bool = True) -> list[Subscription]:
    """Every record, all pages. strict: an invalid record raises (the test); else it is skipped (a page)."""
    client = PdsClient(http, resolver.pds_endpoint(did))
    found = []
    for record in client.iter_records(did, COLLECTION, limit=100):
        try:
            found.append(parse_subscription(str(record.get("uri", "")), record.get("value")))
        except InvalidSubscription:
            if strict:
                raise
    return sorted(found, key=lambda s: (s.created_at, s.rkey))


def read_subscriptions(app, did: str) -> list[Subscription]:
    resolver = resolver_for(app)
    return read_subscriptions_with(resolver, resolver.http, did, strict=False)
