"""feed_backfills, the first-read backfill claims: this module alone writes it (docs/design.md,
"Tables by owner").

When a claim is due, and what a failure holds off, is decided by the backfill itself
(tasks/backfill.py); "delete my data" (personal.py) forgets an actor's claims.
"""
from __future__ import annotations

from feather import sql


def state(actor: str, feed: str):
    """(completed, started_at, retries) of the claim, or None when there is none."""
    return sql.one("SELECT completed, started_at, retries FROM feed_backfills WHERE actor = ? AND feed = ?",
                   (actor, feed))


def claim_new(actor: str, feed: str, now: int) -> bool:
    """The first claim of (actor, feed); True when this caller made it."""
    return sql.execute("INSERT INTO feed_backfills (actor, feed, completed, retries, started_at)"
                       " VALUES (?, ?, 0, 0, ?) ON CONFLICT DO NOTHING", (actor, feed, now)).rowcount == 1


def reclaim(actor: str, feed: str, now: int, started_at: int | None) -> bool:
    """Compare-and-set on the stamp the caller read, so two readers cannot both take a stale claim."""
    cur = sql.execute("UPDATE feed_backfills SET started_at = ? WHERE actor = ? AND feed = ? AND completed = 0"
                      " AND " + ("started_at IS NULL" if started_at is None else "started_at = ?"),
                      (now, actor, feed) + (() if started_at is None else (started_at,)))
    return cur.rowcount == 1


def complete(actor: str, feed: str) -> None:
    sql.execute("UPDATE feed_backfills SET completed = 1, last_error = NULL, started_at = NULL"
                " WHERE actor = ? AND feed = ?", (actor, feed))


def fail(actor: str, feed: str, message: str, now_ms: int) -> None:
    """A failed attempt: one more retry, its error, and the failure's time as the stamp."""
    sql.execute("UPDATE feed_backfills SET retries = retries + 1, last_error = ?, started_at = ?"
                " WHERE actor = ? AND feed = ?", (message[:1000], now_ms, actor, feed))


def forget(actor: str) -> None:
    sql.execute("DELETE FROM feed_backfills WHERE actor = ?", (actor,))
