"""feed_fetches, the author-fetch queue: this module alone writes it (docs/design.md, "Tables by
owner").

Ingest and the first-read backfill queue newly followed authors (request); the fetch job
(tasks/authors.py) works the queue off and stamps `listRecords?actor=` listings; the records sweep
(tasks/records_sweep.py) forgets an author whose records it dropped, so following them again
fetches their past afresh.
"""
from __future__ import annotations

from feather import sql

ALL_COLLECTIONS = "*"  # a queued author is fetched for every collection a feed needs of them


def request(dids) -> int:
    """Queue authors for a fetch (inside the caller's transaction). One already queued or fetched
    is left alone; the records sweep forgets an author when it drops their records."""
    now = sql.now_us()
    statement = "INSERT INTO feed_fetches (did, collection, requested_us) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
    return sum(sql.execute(statement, (did, ALL_COLLECTIONS, now)).rowcount for did in sorted(set(dids)))


def retry(did: str, attempts: int, requested_us: int, fetched_us: int | None) -> None:
    """A failed fetch of a queued author: asked again at requested_us, or given up (fetched_us set)."""
    sql.execute("UPDATE feed_fetches SET attempts = ?, requested_us = ?, fetched_us = ?"
                " WHERE did = ? AND collection = ?", (attempts, requested_us, fetched_us, did, ALL_COLLECTIONS))


def fetched(did: str, now_us: int) -> None:
    """A queued author was fetched."""
    sql.execute("UPDATE feed_fetches SET fetched_us = ? WHERE did = ? AND collection = ?",
                (now_us, did, ALL_COLLECTIONS))


def listed(did: str, collection: str, now_us: int) -> None:
    """An author's `listRecords?actor=` listing of one collection was stored now."""
    sql.execute("INSERT INTO feed_fetches (did, collection, requested_us, fetched_us) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (did, collection) DO UPDATE SET fetched_us = excluded.fetched_us",
                (did, collection, now_us, now_us))


def forget_sql(did: str):
    return "DELETE FROM feed_fetches WHERE did = ?", (did,)


def forget(did: str) -> int:
    return sql.execute(*forget_sql(did)).rowcount
