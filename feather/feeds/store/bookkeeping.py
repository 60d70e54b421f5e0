"""The bookkeeping rows that ingest and the background tasks both write, each one statement.

- The prune flag (feed_prune_state.dirty): ingest and the author fetch set it when they changed a
  feed; the prune tick (tasks/prune.py) reads and clears it.
- The author-fetch queue (feed_fetches): ingest and the first-read backfill queue newly followed
  authors; the fetch job (tasks/authors.py) works it off.
- The identity cache (feed_identities): an identity event makes a handle unverified again; the
  read path (read/identities.py) re-verifies it.
"""
from __future__ import annotations

from feather import sql
from feather.feeds.store import records

ALL_COLLECTIONS = "*"  # a queued author is fetched for every collection a feed needs of them


def mark_dirty() -> None:
    """One primary-key write, and only on the 0 → 1 edge, so busy batches do not churn the row."""
    sql.execute("UPDATE feed_prune_state SET dirty = 1 WHERE id = 1 AND dirty = 0")


def request(dids) -> int:
    """Queue authors for a fetch (inside the caller's transaction). One already queued or fetched
    is left alone; the records sweep forgets an author when it drops their records."""
    now = sql.now_us()
    statement = "INSERT INTO feed_fetches (did, collection, requested_us) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
    return sum(sql.execute(statement, (did, ALL_COLLECTIONS, now)).rowcount for did in sorted(set(dids)))


def forget_handles(dids) -> None:
    """An identity event: the handle may have changed, so the next read re-verifies it."""
    for chunk in records.chunks(sorted(set(dids)), 1):  # one statement for a batch's identity events
        sql.execute(f"UPDATE feed_identities SET handle_checked_us = 0 WHERE did IN ({', '.join('?' * len(chunk))})",
                    chunk)
