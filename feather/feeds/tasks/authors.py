"""Authors fetched from their own PDS: a newly followed author, and `listRecords?actor=`.

Under admission the stream only ever brought a newly followed author's records if someone
served already followed them, so a follow alone would leave the follower's timeline without the
author's past posts. Ingest therefore queues the author (feed_fetches, in the batch's
transaction) and `fetch_tick` (the `feeds-fetch` job, every FETCH_TICK_SECS) lists their newest
target records and their profile through the guarded client, stores them without overwriting
what the stream stored, and copies the newest `followBackfill` of them into every follower's
feed: the same rows live fan-out and a follow backfill would have made.

Network calls run in greenlets with no transaction open; each author's writes are one short
transaction afterwards. A failed author is retried with backoff, then given up (marked done).
"""
from __future__ import annotations

import logging
import time

import gevent
from gevent.pool import Pool

from feather import sql
from feather.atproto.syntax import is_valid_record_key
from feather.db import db
from feather.feeds.config import Collection, FeedsConfig
from feather.feeds.ingest import narrow
from feather.feeds.read.sources import SourceError, sources_for
from feather.feeds.store import fetches, items, records, serial
from feather.feeds.store.prune_state import mark_dirty
from feather.feeds.store.schema import subject_expr
from feather.feeds.store.served import keeps

log = logging.getLogger(__name__)

FETCH_TICK_SECS = 2.0
FETCH_BATCH = 16  # authors per tick: a first read of 1,000 follows drains in about two minutes
FETCH_CONCURRENCY = 4
FETCH_TIMEOUT_S = 10.0
MAX_ATTEMPTS = 5
RETRY_BASE_US = 30_000_000
# "Everything" lists a dozen collections, most of which a Bluesky account never writes: past this
# many listings, one describeRepo says which collections the repo holds, and only those are listed.
DESCRIBE_OVER = 2
LIST_DEADLINE_S = 3.0  # Contrail's on-demand listRecords?actor= backfill deadline
LIST_LIMIT = 100
LIST_TTL_US = 300_000_000  # an author listed this recently is served from the store


def pending_sql():
    return ("SELECT did, attempts FROM feed_fetches WHERE fetched_us IS NULL AND requested_us <= ?"
            " ORDER BY requested_us LIMIT ?")


def followers_sql(config: FeedsConfig, follow_table: str) -> str:
    return f"SELECT r.did FROM {follow_table} r WHERE {subject_expr('r')} = ?"


# --- what to fetch -----------------------------------------------------------------------------

def plan(config: FeedsConfig) -> list[tuple[Collection, int]]:
    """(collection, how many newest records) for a newly followed author: each target's largest
    follow backfill, and each stored profile collection (its `self` record)."""
    wanted: dict[str, int] = {}
    for feed in config.feeds.values():
        for t in feed.targets:
            wanted[t.short] = max(wanted.get(t.short, 0), min(feed.follow_backfill, t.cap))
    out = [(config.collections[short], n) for short, n in sorted(wanted.items())]
    out += [(c, 0) for nsid in config.profiles if (c := config.by_nsid(nsid)) is not None and c.short not in wanted]
    return out


def _fetch(sources, config: FeedsConfig, did: str) -> tuple[str, list | None, str | None]:
    """Network only: (did, [(collection, [(rkey, cid, record)])] or None, error)."""
    got = []
    try:
        with gevent.Timeout(FETCH_TIMEOUT_S, SourceError(f"fetch exceeded {FETCH_TIMEOUT_S:.0f}s")):
            deadline = time.monotonic() + FETCH_TIMEOUT_S
            wanted = plan(config)
            held = _held(sources, did) if sum(1 for _c, n in wanted if n) > DESCRIBE_OVER else None
            for c, n in wanted:
                if held is not None and c.nsid not in held:
                    got.append((c, []))  # the repo has none: nothing to list
                elif n:
                    got.append((c, sources.list_recent(did, c.nsid, n, deadline)))
                else:
                    found = sources.get_record(did, c.nsid, "self")
                    got.append((c, [("self", found[0], found[1])] if found else []))
    except SourceError as exc:
        return did, None, str(exc) or type(exc).__name__
    return did, got, None


def _held(sources, did: str) -> frozenset[str] | None:
    """The collections did's repo holds, or None when the source cannot say (list everything)."""
    ask = getattr(sources, "collections", None)
    return ask(did) if ask is not None else None


def _store(c: Collection, did: str, items, now: int) -> int:
    """Store what a PDS listed, the rows _listed makes of it, never over what the stream stored."""
    return sum(records.store_if_absent(c, uri=uri, did=did, rkey=rkey, cid=cid, record=None, time_us=time_us, text=text)
               for uri, cid, _, rkey, text, time_us in _listed(c, did, items, now))


def fan_in(config: FeedsConfig, did: str) -> int:
    """Copy the author's newest stored records into every follower's feed (follow backfill rows)."""
    inserted = 0
    for feed in config.feeds.values():
        table = config.collections[feed.follow].table
        followers = [row[0] for row in sql.rows(followers_sql(config, table), (did,))]
        for follower in followers:
            for i in range(len(feed.targets)):
                statement, params = items.follow_backfill_sql(config, feed, i, follower, did)
                inserted += sql.execute(statement, params).rowcount
    return inserted


def fetch_tick(app, config: FeedsConfig, now_us: int | None = None) -> int:
    """Fetch up to FETCH_BATCH queued authors; returns how many were fetched."""
    now_us = sql.now_us() if now_us is None else now_us
    settings = app.config["FEATHER"]
    # Narrow subscriptions: list a new followee only once their shard's filter has them (narrow.py).
    settle = narrow.SETTLE_US if settings.feed_narrow_max_dids and settings.feed_serve != "all" else 0
    due = sql.rows(pending_sql(), (now_us - settle, FETCH_BATCH))
    if not due:
        return 0
    attempts = {did: n for did, n in due}
    sources = sources_for(app)
    def fetch(did):
        with app.app_context():  # a greenlet does not inherit the job's context
            try:
                return _fetch(sources, config, did)
            except Exception as exc:  # one odd author must not stall the queue: retried, then given up
                log.exception("feeds: fetching %s failed unexpectedly", did)
                return did, None, f"{type(exc).__name__}: {exc}"
    results = Pool(FETCH_CONCURRENCY).map(fetch, list(attempts))
    done = 0
    for did, got, error in results:
        with db.atomic():
            if got is None:
                n = attempts[did] + 1
                log.info("feeds: fetching %s failed (attempt %d): %s", did, n, error)
                give_up = n >= MAX_ATTEMPTS
                fetches.retry(did, n, now_us + RETRY_BASE_US * 2 ** n, now_us if give_up else None)
                continue
            serial.lock_writes()
            for c, items in got:
                _store(c, did, items, now_us)
            if fan_in(config, did):
                mark_dirty()
            fetches.fetched(did, now_us)
            done += 1
    return done


# --- listRecords?actor= ---------------------------------------------------------------------------

def backfill_listing(app, config: FeedsConfig, c: Collection, did: str, admit=None) -> list[tuple] | None:
    """Contrail's on-demand author backfill: the author's newest records in c from their PDS, under a
    LIST_DEADLINE_S deadline and no retry, at most once per LIST_TTL_US for an author the store keeps.

    Returns None when the read is to be answered from the store: the author was stored (now or
    lately), the fetch failed, or admit() (the outbound budget) said no. For an author the store
    does not keep (FEED_SERVE signed-in or readers, and no served actor follows them) the fetched
    rows themselves come back, (uri, cid, did, rkey, record JSON, time_us) newest first, and
    nothing is written: a stranger's listing costs the budget, never the disk."""
    now = sql.now_us()
    kept = keeps(config, app.config["FEATHER"], did)
    if kept:
        row = sql.one("SELECT fetched_us FROM feed_fetches WHERE did = ? AND collection = ?",
                      (did, c.nsid))
        if row is not None and row[0] is not None and now - row[0] < LIST_TTL_US:
            return None
    if admit is not None and not admit():
        return None
    sources = sources_for(app)
    try:
        with gevent.Timeout(LIST_DEADLINE_S, SourceError("listing exceeded the deadline")):
            items = sources.list_recent(did, c.nsid, LIST_LIMIT, time.monotonic() + LIST_DEADLINE_S)
    except SourceError as exc:
        log.info("feeds: listRecords backfill of %s %s failed: %s", did, c.nsid, exc)
        return None  # serve what is stored; the next read tries again
    if not kept:
        return _listed(c, did, items, now)
    with db.atomic():
        serial.lock_writes()
        _store(c, did, items, now)
        fetches.listed(did, c.nsid, now)
    return None


def _listed(c: Collection, did: str, items, now: int) -> list[tuple]:
    """The fetched page as rows of the records table (valid rkey and shape, a CID's shape or None,
    MAX_RECORD_BYTES, the first of an rkey listed twice): what _store writes and a stranger's
    listing answers with."""
    rows: dict[str, tuple] = {}
    for rkey, cid, record in items:
        if is_valid_record_key(rkey) and isinstance(record, dict) and rkey not in rows:
            text = records.dumps(record)
            if records.fits(text):
                rows[rkey] = (f"at://{did}/{c.nsid}/{rkey}", records.clean_cid(cid), did, rkey,
                              text, records.record_time_us(record, now))
    return list(rows.values())
