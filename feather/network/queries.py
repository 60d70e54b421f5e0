"""Read side of the catalogue. Every query applies the k-floor itself, so no caller can forget it.

Counts are over distinct DIDs (one account holding five records for a feed is one subscriber,
or the floor could be beaten by one person) and the floor is "at least k": 4 hidden, 5 shown.
"""
from __future__ import annotations

from dataclasses import dataclass

from feather import sql
from feather.network.absent import absent_reads_as

ROWS = 25


@dataclass(frozen=True)
class FeedCount:
    feed_url: str
    subscribers: int
    first_seen: int



@absent_reads_as(list)
def most_subscribed(k: int, limit: int = ROWS) -> list[FeedCount]:
    rows = sql.execute(
        "SELECT feed_url, subscriber_count, first_seen FROM net_feed_rollup WHERE subscriber_count >= ?"
        " ORDER BY subscriber_count DESC, feed_url ASC LIMIT ?", (k, limit)).fetchall()
    return [FeedCount(*r) for r in rows]


@absent_reads_as(list)
def recently_added(k: int, limit: int = ROWS) -> list[FeedCount]:
    """Newest feeds in the catalogue (above the floor); ties broken by URL, so the order is total."""
    statement, params = recently_added_sql(k, limit)
    return [FeedCount(*r) for r in sql.execute(statement, params).fetchall()]


def recently_added_sql(k: int, limit: int = ROWS) -> tuple[str, tuple]:
    """Walks net_feed_rollup_recent, which carries the count: most feeds the walk passes are below
    the floor, and an index-only walk skips them without a table lookup each."""
    return ("SELECT feed_url, subscriber_count, first_seen FROM net_feed_rollup WHERE subscriber_count >= ?"
            " ORDER BY first_seen DESC, feed_url ASC LIMIT ?", (k, limit))


@absent_reads_as(None)
def count_for(feed_url: str, k: int) -> int | None:
    row = sql.execute("SELECT subscriber_count FROM net_feed_rollup WHERE feed_url = ?",
                      (feed_url,)).fetchone()
    return row[0] if row and row[0] >= k else None


@absent_reads_as(dict)
def attributions(feed_urls: list[str], k: int, fresh_since_us: int) -> dict[str, list[str]]:
    """feed_url -> names of opted-in accounts subscribed to it, for these feeds (the ones a page
    shows) and only where the feed is at or above the floor.

    Driven from the opt-in set (CROSS JOIN keeps SQLite's join order): it grows with the accounts
    that asked to be named, while net_subscription grows with the whole network, and walking it
    once per page render is what made /network slow. The name is the handle while its last two-way
    check is newer than `fresh_since_us`, else the DID: a handle can change hands, and a stale one
    could name the wrong person."""
    if not feed_urls:
        return {}
    statement, params = attributions_sql(feed_urls, k, fresh_since_us)
    out: dict[str, list[str]] = {}
    for url, name in sql.execute(statement, params).fetchall():
        out.setdefault(url, []).append(name)
    return out


def attributions_sql(feed_urls: list[str], k: int, fresh_since_us: int) -> tuple[str, tuple]:
    """The statement attributions() runs (tests/test_network_explain.py plans this one)."""
    name = "CASE WHEN a.handle IS NOT NULL AND a.handle_checked_us >= ? THEN a.handle ELSE a.did END"
    marks = ", ".join("?" * len(feed_urls))
    return (f"SELECT s.feed_url, {name} AS name FROM net_attribution a CROSS JOIN net_subscription s"
            f" JOIN net_feed_rollup r ON r.feed_url = s.feed_url AND r.subscriber_count >= ?"
            f" WHERE s.did = a.did AND s.feed_url IN ({marks})"
            " GROUP BY s.feed_url, name ORDER BY s.feed_url, name", (fresh_since_us, k, *feed_urls))
