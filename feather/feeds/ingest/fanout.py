"""The follow-side pieces of fan-out that more than one writer shares.

A follow's backfill statement (the subject's newest records into the follower's feed) is run by
the author fetch (tasks/authors.py fan_in); the unfollow rule (which rows leave a feed, and which follow
tables can still justify them) is what batch.write's unfollow delete ORs together. Each is
built by a function returning SQL, so the EXPLAIN guardrail (tests/test_feeds_explain.py) plans
exactly what runs. The per-event reference the batch is checked against lives with the tests
(tests/fixtures/feeds/oracle.py).
"""
from __future__ import annotations

from feather.feeds.config import Feed, FeedsConfig
from feather.feeds.store.schema import subject_expr


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


def unfollow_clause(config: FeedsConfig, follower: str, subject: str, nsid: str) -> tuple[str, tuple]:
    """One unfollow's WHERE clause: the subject's rows of nsid leave the follower's feed, unless a
    follow still justifies them: the key prefix (actor, collection), then the uri prefix among those
    rows. batch.unfollow_sql ORs one per unfollow.

    Bounded by the follower's own feed of that collection (its cap, between prune sweeps), not by
    how much the subject ever posted or how many others follow them; each remaining-follow check
    is one probe of a follow table's (subject, did) index.

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
