"""Fan-out statements for one event, run in the ingest transaction right after the record write.

These are the ordered path (plan.py): the few steps of a batch whose result depends on their
order. The rest of a batch is written set-based by batch.py.

Each statement is built by a `*_sql` function returning (sql, params) so the EXPLAIN guardrail
test (tests/test_feeds_explain.py) checks exactly the SQL that runs. Every one is bounded by an
index: the follow table's subject index, feed_items' primary key or its uri index, or a
target's (did, time_us) index.
"""
from __future__ import annotations

from feather.db import current_dialect, db
from feather.feeds.config import Feed, FeedsConfig
from feather.feeds.schema import subject_expr


def _run(stmt: tuple[str, tuple]) -> int:
    sql, params = stmt
    return db.execute_sql(current_dialect().q(sql), params).rowcount


# --- target create/update -------------------------------------------------------------------

def target_insert_sql(config: FeedsConfig, feed: Feed, nsid: str, author: str, uri: str, time_us: int):
    """One row per follower of the author, in one statement; no follower cap (Contrail)."""
    follow = config.collections[feed.follow].table
    return (f"INSERT INTO feed_items (actor, uri, collection, time_us)"
            f" SELECT r.did, ?, ?, ? FROM {follow} r WHERE {subject_expr('r')} = ?"
            f" ON CONFLICT DO NOTHING", (uri, nsid, time_us, author))


def follower_probe_sql(config: FeedsConfig, feed: Feed, author: str, limit: int):
    """Count followers up to limit+1 only: deciding "above fanoutMaxFollowers" must stay bounded."""
    follow = config.collections[feed.follow].table
    return (f"SELECT count(*) FROM (SELECT 1 FROM {follow} r WHERE {subject_expr('r')} = ? LIMIT ?) t",
            (author, limit + 1))


def resync_time_sql(uri: str, time_us: int):
    """An update that moved the record's time keeps every feed row's sort key equal to it."""
    return ("UPDATE feed_items SET time_us = ? WHERE uri = ? AND time_us <> ?", (time_us, uri, time_us))


def mark_heavy_sql(feed: Feed, author: str, now: int):
    return ("INSERT INTO feed_heavy_authors (feed, did, since_us) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            (feed.name, author, now))


def fan_out_target(config: FeedsConfig, nsid: str, author: str, uri: str, time_us: int, *,
                   resync: bool, now: int) -> int:
    # The resync comes first: a feed row is unique by (actor, collection, time_us, uri), so the
    # insert below only recognises a follower's existing row once it carries the new time.
    if resync:
        _run(resync_time_sql(uri, time_us))
    inserted = 0
    for feed in config.feeds.values():
        if not any(t.nsid == nsid for t in feed.targets):
            continue
        if feed.fanout_max_followers is not None:
            sql, params = follower_probe_sql(config, feed, author, feed.fanout_max_followers)
            followers = db.execute_sql(current_dialect().q(sql), params).fetchone()[0]
            if followers > feed.fanout_max_followers:
                # Hybrid: readers merge this author's posts from the records store instead.
                _run(mark_heavy_sql(feed, author, now))
                continue
        inserted += _run(target_insert_sql(config, feed, nsid, author, uri, time_us))
    return inserted


# --- target delete --------------------------------------------------------------------------

def target_delete_sql(uri: str):
    return ("DELETE FROM feed_items WHERE uri = ?", (uri,))


def remove_target(uri: str) -> int:
    return _run(target_delete_sql(uri))


# --- follow create / delete -----------------------------------------------------------------

def follow_backfill_sql(config: FeedsConfig, feed: Feed, target_index: int, follower: str, subject: str):
    """The subject's newest `followBackfill` records (never more than the target's cap)."""
    target = feed.targets[target_index]
    table = config.collections[target.short].table
    n = min(feed.follow_backfill, target.cap)
    return (f"INSERT INTO feed_items (actor, uri, collection, time_us)"
            f" SELECT ?, r.uri, ?, r.time_us FROM {table} r WHERE r.did = ?"
            f" ORDER BY r.time_us DESC, r.uri ASC LIMIT ? ON CONFLICT DO NOTHING",
            (follower, target.nsid, subject, n))


def unfollow_range(subject: str, nsid: str) -> tuple[str, str]:
    """The uri range of the subject's records of nsid: `0` is the byte after `/`, and uri
    compares byte-wise (d.byte_text)."""
    prefix = f"at://{subject}/{nsid}/"
    return prefix, prefix[:-1] + "0"


def unfollow_sql(config: FeedsConfig, follower: str, subject: str, nsid: str):
    """The subject's rows of nsid leave the follower's feed, unless a follow still justifies
    them: the key prefix (actor, collection), then the uri prefix among those rows.

    Bounded by the follower's own feed of that collection (its cap, between prune sweeps), not by
    how much the subject ever posted or how many others follow them; each remaining-follow check
    is one probe of a follow table's (subject, did) index.
    """
    clause, params = unfollow_clause(config, follower, subject, nsid)
    return f"DELETE FROM feed_items WHERE {clause}", params


def unfollow_clause(config: FeedsConfig, follower: str, subject: str, nsid: str) -> tuple[str, tuple]:
    """The WHERE clause of unfollow_sql; the batch ORs one per unfollow (batch.unfollow_sql).

    It runs after the step's own record write, so the follow being dropped is gone (or points
    elsewhere) and any follow the check finds is another one."""
    tables = sorted(justifying_tables(config)[nsid])
    keep = "".join(f" AND NOT EXISTS (SELECT 1 FROM {t} r WHERE {subject_expr('r')} = ? AND r.did = ?)"
                   for t in tables)
    return (f"actor = ? AND collection = ? AND uri >= ? AND uri < ?{keep}",
            (follower, nsid, *unfollow_range(subject, nsid), *([subject, follower] * len(tables))))


def justifying_tables(config: FeedsConfig) -> dict[str, set[str]]:
    """Target nsid -> the follow tables of every feed with that target.

    feed_items has no feed column: feeds that share a target share its rows, whichever follow
    collection put them there, so a follow in any of those tables keeps the subject's rows: a
    second follow record of the same subject (Bluesky keeps duplicates), or the same follow on
    another app's graph whose feed shows that target."""
    out: dict[str, set[str]] = {}
    for feed in config.feeds.values():
        for t in feed.targets:
            out.setdefault(t.nsid, set()).add(config.collections[feed.follow].table)
    return out


def unfollow_triples(config: FeedsConfig, dropped: dict[str, set[tuple[str, str]]]) -> list[tuple[str, str, str]]:
    """dropped: follow nsid -> {(follower, subject)} that stopped following through it. The
    (follower, subject, target nsid) whose rows may go: each target of each feed on that follow
    collection (unfollow_clause then keeps what another follow justifies)."""
    return sorted({(f, s, t.nsid) for nsid, pairs in dropped.items() for feed in config.feeds.values()
                   if config.collections[feed.follow].nsid == nsid for t in feed.targets for f, s in pairs})


def follow_created(config: FeedsConfig, follow_nsid: str, follower: str, subject: str) -> int:
    inserted = 0
    for feed in config.feeds.values():
        if config.collections[feed.follow].nsid != follow_nsid:
            continue
        for i in range(len(feed.targets)):
            inserted += _run(follow_backfill_sql(config, feed, i, follower, subject))
    return inserted


def follow_deleted(config: FeedsConfig, follow_nsid: str, follower: str, subject: str) -> int:
    """After the follow record's delete (or its move to another subject) is written."""
    removed = 0
    for triple in unfollow_triples(config, {follow_nsid: {(follower, subject)}}):
        removed += _run(unfollow_sql(config, *triple))
    return removed
