"""Bounded storage under admission: the records sweep, one slice per prune tick.

Admission keeps new unrelated records out; this gives back what stops mattering afterwards:
- an author nobody served follows any more (and who is not served): all their records go;
- a follow record whose author is not served: it would fan posts out to a timeline nobody reads;
- a served or followed author's target records older than the largest cap any feed keeps for
  that collection: no feed can show them (a feed holds at most cap rows per target, newest
  first, and this author alone has cap newer ones). Ties with the cutoff stay, like the prune.

It walks each records table author by author (DISTINCT did off the (did, time_us) index, after
a saved cursor), FEED_PRUNE_SWEEP_ACTORS authors per slice, and moves to the next table when
one is done, so a slice costs the same however large the store is. Every statement is bounded by
an index (tests/test_feeds_explain.py); the deletes are the tables' owners' (store/records.py,
store/fetches.py), the cursor is in feed_prune_state (store/prune_state.py). It runs only when FEED_SERVE is not `all`: an operator
who asked for a full index keeps everything.
"""
from __future__ import annotations

from dataclasses import dataclass

from feather import sql
from feather.db import db
from feather.feeds.config import Collection, FeedsConfig
from feather.feeds.store import fetches, prune_state, records, serial, served
from feather.feeds.store.schema import subject_expr

BATCH_AUTHORS = 50  # authors per write transaction, so ingest never waits on a whole slice


@dataclass(frozen=True)
class RecordsSweep:
    authors: int
    removed: int
    table: str | None  # where the next slice starts (short name), None = from the first table
    did: str | None


def authors_page_sql(table: str, after: str | None, budget: int):
    if after is None:
        return f"SELECT DISTINCT did FROM {table} ORDER BY did LIMIT ?", (budget,)
    return f"SELECT DISTINCT did FROM {table} WHERE did > ? ORDER BY did LIMIT ?", (after, budget)


def followed_sql(follow_table: str) -> str:
    return f"SELECT 1 FROM {follow_table} r WHERE {subject_expr('r')} = ? LIMIT 1"


def _tables(config: FeedsConfig) -> list[Collection]:
    return sorted(config.collections.values(), key=lambda c: c.short)


def _followed(config: FeedsConfig, did: str) -> bool:
    for table in sorted({config.collections[f.follow].table for f in config.feeds.values()}):
        if sql.one(followed_sql(table), (did,)) is not None:
            return True
    return False


def sweep_author(config: FeedsConfig, c: Collection, did: str, serving: set[str]) -> int:
    """Apply the three rules to one author in one table; the number of records removed. A record
    some timeline shows through a repost stays, whoever wrote it."""
    reposted = c.nsid in config.reposted_nsids
    if c.nsid in config.follow_nsids:
        keep = did in serving
    else:
        keep = did in serving or _followed(config, did)
    if not keep:
        removed = records.drop_author(c, did, reposted)  # with its search index rows
        # So that following them again fetches their past records afresh (fetches.request).
        fetches.forget(did)
        return removed
    cap = config.target_caps().get(c.nsid)
    if cap is None:
        return 0
    return records.trim_author(c, did, cap, reposted)


def sweep_slice(config: FeedsConfig, budget: int) -> RecordsSweep:
    """Up to `budget` authors from the saved cursor on, crossing into the next table(s) as needed."""
    tables = _tables(config)
    if not tables or budget <= 0:
        return RecordsSweep(0, 0, None, None)
    serving = served.served_set(config)
    short, after = prune_state.records_cursor()
    index = next((i for i, c in enumerate(tables) if c.short == short), 0)
    if short is not None and tables[index].short != short:
        after = None  # the table left the config: start over
    visited = removed = 0
    while visited < budget and index < len(tables):
        c = tables[index]
        limit = budget - visited
        statement, params = authors_page_sql(c.table, after, limit)
        authors = [row[0] for row in sql.rows(statement, params)]
        for start in range(0, len(authors), BATCH_AUTHORS):
            with db.atomic():
                serial.lock_writes()
                for did in authors[start:start + BATCH_AUTHORS]:
                    removed += sweep_author(config, c, did, serving)
        visited += len(authors)
        if len(authors) < limit:
            index, after = index + 1, None  # this table is done
        else:
            after = authors[-1]
    if index >= len(tables):
        next_table, next_did = None, None
    else:
        next_table, next_did = tables[index].short, after
    with db.atomic():
        prune_state.save_records_cursor(next_table, next_did)
    return RecordsSweep(visited, removed, next_table, next_did)

