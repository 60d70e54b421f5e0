"""feed_generators, the feed generator records published from here: this module alone writes it
(docs/design.md, "Tables by owner").

Publishing (web/publish.py) remembers a record once it is in the operator's repo and forgets it
once deleted there; "delete my data" (personal.py) forgets everything a person published.
"""
from __future__ import annotations

from feather import sql


def remember(uri: str, publisher: str, rkey: str, feed: str, cid: str | None, display_name: str,
             description: str, published_us: int) -> None:
    """A (re)published record; publishing again keeps the first publication time."""
    sql.execute("INSERT INTO feed_generators (uri, publisher_did, rkey, feed, cid, display_name, description,"
                " published_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (uri) DO UPDATE SET cid = excluded.cid,"
                " display_name = excluded.display_name, description = excluded.description",
                (uri, publisher, rkey, feed, cid, display_name, description, published_us))


def forget(uri: str) -> None:
    sql.execute("DELETE FROM feed_generators WHERE uri = ?", (uri,))


def forget_publisher(did: str) -> None:
    sql.execute("DELETE FROM feed_generators WHERE publisher_did = ?", (did,))
