"""The catalogue's SQL: versioned upserts, deletes with tombstones, the rollup, caps and consent.

Callers own the transaction. Every write converges under replay: a row carries `rev_us`, the
time of the write that produced it (an event's time_us, or a rebuild's pre-backfill cursor),
and an older write never overwrites a newer one. A delete leaves a tombstone so a rebuild
that listed the record before the delete cannot put it back.

The rollup is a materialised `GROUP BY feed_url` over net_subscription, recomputed for exactly
the feeds a write touched (an index range each), so it always equals the direct query.
"""
from __future__ import annotations

import hashlib
from typing import Iterable

from feather import sql
from feather.db import current_dialect
from feather.network.absent import absent_reads_as

STATE_KEYS_ON_REBUILD = ("backfill.",)



# --- network_state
@absent_reads_as(None)
def get_state(key: str) -> str | None:
    row = sql.execute("SELECT value FROM network_state WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def set_state(key: str, value: str) -> None:
    sql.execute("INSERT INTO network_state (key, value, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                (key, str(value), sql.now_us()))


def clear_state(prefix: str) -> None:
    # Prefixes are ours ("backfill."), with no LIKE wildcards in them.
    sql.execute("DELETE FROM network_state WHERE key LIKE ?", (prefix + "%",))


# --- subscription rows
# Advisory lock space of the per-DID consent lock ("net" in ASCII); see lock_did.
DID_LOCK_SPACE = 0x6E6574


def lock_did(did: str) -> None:
    """Order this transaction against every other catalogue write for `did`, until commit.

    An opt-out and a write of the DID's rows (live batch, rebuild) each take this lock before
    they read net_optout, so the later one sees the earlier one's commit: PostgreSQL's READ
    COMMITTED would otherwise let a batch that read "not opted out" insert after the opt-out's
    DELETE. Writers take every lock they need before their first row write, so no two of them
    can wait on each other. SQLite needs nothing: its write transactions are serialised, and a
    WAL reader that someone committed under cannot write (the batch fails and replays).
    """
    digest = hashlib.blake2b(did.encode(), digest_size=4).digest()
    statement = current_dialect().xact_lock_pair_sql(DID_LOCK_SPACE, int.from_bytes(digest, "big", signed=True))
    if statement is not None:
        sql.execute(statement)


@absent_reads_as(False)
def is_opted_out(did: str) -> bool:
    return sql.execute("SELECT 1 FROM net_optout WHERE did = ?", (did,)).fetchone() is not None


@absent_reads_as(None)
def opted_out_at(did: str) -> int | None:
    """When the DID's opt-out was recorded (microseconds), or None when it has none."""
    row = sql.execute("SELECT created_at FROM net_optout WHERE did = ?", (did,)).fetchone()
    return row[0] if row else None


@absent_reads_as(0)
def rows_for_did(did: str) -> int:
    return sql.execute("SELECT count(*) FROM net_subscription WHERE did = ?", (did,)).fetchone()[0]


# The rkey of a DID-wide tombstone: no write of the DID older than its time_us may land. "." is
# never a record key (the atproto record-key syntax forbids it), so no event can name it.
EVERY_RKEY = "."


def upsert(did: str, rkey: str, feed_url: str, created_at: str | None, rev_us: int, *,
           max_per_did: int, touched: set[str]) -> bool:
    """Insert or update one record unless a newer write or a newer delete already happened."""
    if rkey == EVERY_RKEY:
        return False
    floor = sql.execute("SELECT time_us FROM net_tombstone WHERE did = ? AND rkey = ?",
                        (did, EVERY_RKEY)).fetchone()
    if floor is not None and floor[0] >= rev_us:
        return False
    tomb = sql.execute("SELECT time_us FROM net_tombstone WHERE did = ? AND rkey = ?", (did, rkey)).fetchone()
    if tomb is not None and tomb[0] >= rev_us:
        return False
    old = sql.execute("SELECT feed_url, rev_us FROM net_subscription WHERE did = ? AND rkey = ?",
                      (did, rkey)).fetchone()
    if old is None and rows_for_did(did) >= max_per_did:
        return False
    if old is not None and old[1] > rev_us:
        return False
    if tomb is not None:
        sql.execute("DELETE FROM net_tombstone WHERE did = ? AND rkey = ?", (did, rkey))
    sql.execute(
        "INSERT INTO net_subscription (did, rkey, feed_url, created_at, indexed_at, rev_us)"
        " VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (did, rkey) DO UPDATE SET feed_url = excluded.feed_url,"
        " created_at = excluded.created_at, rev_us = excluded.rev_us"
        " WHERE excluded.rev_us >= net_subscription.rev_us",
        (did, rkey, feed_url, created_at, sql.now_us(), rev_us))
    touched.add(feed_url)
    if old is not None:
        touched.add(old[0])
    return True


def delete(did: str, rkey: str, time_us: int, touched: set[str]) -> None:
    """Remove the row and remember the delete (newest delete wins)."""
    if rkey == EVERY_RKEY:
        return
    row = sql.execute("SELECT feed_url, rev_us FROM net_subscription WHERE did = ? AND rkey = ?",
                      (did, rkey)).fetchone()
    if row is not None and row[1] > time_us:
        return  # a newer create already replaced what this delete removed
    if row is not None:
        sql.execute("DELETE FROM net_subscription WHERE did = ? AND rkey = ?", (did, rkey))
        touched.add(row[0])
    d = current_dialect()
    sql.execute("INSERT INTO net_tombstone (did, rkey, time_us) VALUES (?, ?, ?) ON CONFLICT (did, rkey)"
                f" DO UPDATE SET time_us = {d.greatest('net_tombstone.time_us', 'excluded.time_us')}",
                (did, rkey, time_us))


def forget_did(did: str, touched: set[str]) -> int:
    """Every row naming the DID, in every catalogue table but net_optout: its records, their
    tombstones, its place in the rebuild's queue and its attribution (the rollup follows)."""
    removed = delete_did(did, touched)
    for table in ("net_tombstone", "net_backfill_queue", "net_attribution"):
        sql.execute(f"DELETE FROM {table} WHERE did = ?", (did,))
    return removed


# --- the rebuild's work list
def enqueue(did: str) -> None:
    sql.execute("INSERT INTO net_backfill_queue (did, state, updated_at) VALUES (?, ?, ?) ON CONFLICT (did) DO NOTHING",
                (did, "pending", sql.now_us()))


def mark_queued(did: str, state: str, records: int) -> None:
    sql.execute("UPDATE net_backfill_queue SET state = ?, records = ?, updated_at = ? WHERE did = ?",
                (state, records, sql.now_us(), did))


def clear_queue() -> None:
    sql.execute("DELETE FROM net_backfill_queue")


def sweep_tombstones(before_us: int) -> None:
    """Forget deletes older than `before_us`: no replay or rebuild can still bring their records back."""
    sql.execute("DELETE FROM net_tombstone WHERE time_us < ?", (before_us,))


def delete_did(did: str, touched: set[str]) -> int:
    feeds = [r[0] for r in sql.execute(
        "SELECT DISTINCT feed_url FROM net_subscription WHERE did = ?", (did,)).fetchall()]
    cur = sql.execute("DELETE FROM net_subscription WHERE did = ?", (did,))
    touched.update(feeds)
    return cur.rowcount or 0


def delete_stale_rows(did: str, keep_rkeys: set[str], before_rev_us: int, touched: set[str]) -> None:
    """A rebuild saw the DID's full list: rows it did not list and nothing newer wrote are gone."""
    rows = sql.execute("SELECT rkey, feed_url FROM net_subscription WHERE did = ? AND rev_us < ?",
                       (did, before_rev_us)).fetchall()
    for rkey, feed_url in rows:
        if rkey not in keep_rkeys:
            sql.execute("DELETE FROM net_subscription WHERE did = ? AND rkey = ?", (did, rkey))
            touched.add(feed_url)


def evict_over_cap(max_rows: int, touched: set[str]) -> int:
    """Drop the oldest-indexed rows past the cap (same transaction as the insert that overflowed)."""
    total = sql.execute("SELECT count(*) FROM net_subscription").fetchone()[0]
    return evict_oldest(total - max_rows, touched) if total > max_rows else 0


def evict_oldest(n: int, touched: set[str]) -> int:
    if n <= 0:
        return 0
    victims = sql.execute("SELECT did, rkey, feed_url FROM net_subscription"
                          " ORDER BY indexed_at, did, rkey LIMIT ?", (n,)).fetchall()
    for did, rkey, feed_url in victims:
        sql.execute("DELETE FROM net_subscription WHERE did = ? AND rkey = ?", (did, rkey))
        touched.add(feed_url)
    return len(victims)


def refresh_rollup(feed_urls: Iterable[str]) -> None:
    """Recompute the rollup row of each feed from net_subscription (or remove it at zero)."""
    for url in sorted(set(feed_urls)):
        count, first, last = sql.execute(
            "SELECT count(DISTINCT did), min(indexed_at), max(indexed_at) FROM net_subscription"
            " WHERE feed_url = ?", (url,)).fetchone()
        if not count:
            sql.execute("DELETE FROM net_feed_rollup WHERE feed_url = ?", (url,))
            continue
        sql.execute(
            "INSERT INTO net_feed_rollup (feed_url, subscriber_count, first_seen, last_seen) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (feed_url) DO UPDATE SET subscriber_count = excluded.subscriber_count,"
            " first_seen = excluded.first_seen, last_seen = excluded.last_seen",
            (url, count, first, last))
    set_state("rollup.updated_at", str(sql.now_us()))


def truncate_projection() -> None:
    for table in ("net_subscription", "net_feed_rollup", "net_tombstone", "net_backfill_queue"):
        sql.execute(f"DELETE FROM {table}")
    for prefix in STATE_KEYS_ON_REBUILD:
        clear_state(prefix)


# --- consent
def opt_out(did: str) -> int:
    """Record the opt-out and remove every row of the DID, in the caller's one transaction."""
    lock_did(did)
    sql.execute("INSERT INTO net_optout (did, created_at) VALUES (?, ?) ON CONFLICT (did) DO NOTHING",
                (did, sql.now_us()))
    touched: set[str] = set()
    removed = forget_did(did, touched)
    refresh_rollup(touched)
    return removed


def clear_opt_out(did: str) -> bool:
    """Forget the DID's opt-out (the signed-in owner's request); True when there was one.

    Nothing else is written: the rows the opt-out deleted come back only through the catalogue's
    own paths (live events from now on, the next rebuild), and attribution stays off until the
    owner asks again. Under the DID's lock, so a batch or rebuild writing this DID sees the
    opt-out either still there or gone, never half."""
    lock_did(did)
    since = opted_out_at(did)
    if since is None:
        return False
    sql.execute("DELETE FROM net_optout WHERE did = ?", (did,))
    # The opt-out dropped the DID's tombstones, all written before it; this one floor stands in
    # for them: no write older than the opt-out (a replayed event, a rebuild that read the PDS
    # before it) can bring back a record deleted before it. Writes made during the opt-out are
    # the owner's current records and replay in order, so they may land.
    sql.execute("INSERT INTO net_tombstone (did, rkey, time_us) VALUES (?, ?, ?)"
                " ON CONFLICT (did, rkey) DO UPDATE SET time_us = excluded.time_us",
                (did, EVERY_RKEY, since))
    return True


def set_attribution(did: str, handle: str | None, on: bool) -> None:
    """`handle` is the signed-in account's, verified at sign-in: it counts as checked now."""
    if on:
        now = sql.now_us()
        sql.execute("INSERT INTO net_attribution (did, handle, created_at, handle_checked_us) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (did) DO UPDATE SET handle = excluded.handle,"
                    " handle_checked_us = excluded.handle_checked_us",
                    (did, handle, now, now if handle else 0))
    else:
        sql.execute("DELETE FROM net_attribution WHERE did = ?", (did,))


@absent_reads_as(False)
def is_attributed(did: str) -> bool:
    return sql.execute("SELECT 1 FROM net_attribution WHERE did = ?", (did,)).fetchone() is not None


def forget_attribution_handle(did: str) -> None:
    """An #identity event: the handle may have changed hands; show the DID until it is re-verified."""
    sql.execute("UPDATE net_attribution SET handle = NULL, handle_checked_us = 0 WHERE did = ?", (did,))


def attributions_to_check(older_than_us: int, limit: int) -> list[str]:
    return [r[0] for r in sql.execute(
        "SELECT did FROM net_attribution WHERE handle_checked_us < ? ORDER BY handle_checked_us, did LIMIT ?",
        (older_than_us, limit)).fetchall()]


def set_attribution_handle(did: str, handle: str | None, checked_us: int) -> None:
    sql.execute("UPDATE net_attribution SET handle = ?, handle_checked_us = ? WHERE did = ?",
                (handle, checked_us, did))
