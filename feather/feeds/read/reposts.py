"""Reading a feed whose targets include reposts: each record once, at its newest row.

A repost is fanned out like a post (ingest/batch.py): a feed_items row keyed by the repost's URI
and time, whose `subject` is the reposted record. A read of the reposted collection takes both
kinds of rows, joins each to the record it shows (`COALESCE(subject, uri)`), and keeps a row only
when it is that record's newest one in this reader's feed: its own row, or the newest of the
reposts of it by people the reader follows. So a post reposted by three followees, and by its
own (followed) author's post row, appears once, with the newest reason; deleting that repost
brings the next one back; the keyset order (time, then URI) is the feed's, so paging neither
repeats nor skips it. Each "newer row" check is one probe of an index: the partial
(subject, actor) index for reposts, the unique (uri, actor) one for the record's own row.
"""
from __future__ import annotations

import logging
import time

from gevent.pool import Pool

from feather import sql
from feather.atproto.syntax import InvalidSyntax, is_valid_did, parse_at_uri
from feather.db import db
from feather.feeds.config import Collection, Feed, FeedsConfig, Target
from feather.feeds.read import cursor as cursors
from feather.feeds.read import query
from feather.feeds.read.sources import SourceError, sources_for
from feather.feeds.store import items, records, serial

log = logging.getLogger(__name__)

NEWER = "(g.time_us > f.time_us OR (g.time_us = f.time_us AND g.uri < f.uri))"


def newest_clause(target: Target, repost: Target) -> tuple[str, list]:
    """Row f is the newest of the reader's rows showing its record: no newer repost of it, and (for
    a repost row) no newer row of the record itself."""
    shown = "COALESCE(f.subject, f.uri)"
    return (f"NOT EXISTS (SELECT 1 FROM feed_items g WHERE g.subject = {shown} AND g.actor = f.actor"
            f" AND g.collection = ? AND {NEWER})"
            f" AND (f.subject IS NULL OR NOT EXISTS (SELECT 1 FROM feed_items g WHERE g.uri = f.subject"
            f" AND g.actor = f.actor AND g.collection = ? AND {NEWER}))", [repost.nsid, target.nsid])


def feed_source(actor: str, target: Target, repost: Target, c: Collection) -> query.Source:
    newest, params = newest_clause(target, repost)
    return query.Source(f"FROM feed_items f JOIN {c.table} r ON r.uri = COALESCE(f.subject, f.uri)",
                        where=["f.actor = ?", "f.collection IN (?, ?)", newest],
                        where_params=[actor, target.nsid, repost.nsid, *params],
                        t="f.time_us", u="f.uri", reposts=True)


def missing(config: FeedsConfig, target: Target, repost: Target, actor: str, limit: int,
            before_us: int | None = None) -> list[str]:
    """Records the reader's newest reposts (up to the page's cursor time) show that the store
    lacks (a repost of someone the reader does not follow, written before anything of theirs was
    kept): fetched at read time. Only the newest WINDOW repost rows are looked at."""
    table = config.collections[target.short].table
    return [row[0] for row in sql.rows(*items.missing_reposted_sql(repost, table, actor, limit, WINDOW, before_us))]


# --- fetching what a repost shows ---------------------------------------------------------------

MAX_FETCHES = 10  # per read, like identities.MAX_LOOKUPS
# Repost rows a read looks at: getFeed's largest page. A repost further down shows on a later page,
# whose read (its cursor) looks there.
WINDOW = 100
FETCH_CONCURRENCY = 5
FETCH_DEADLINE_S = 2.0
RETRY_S = 600.0  # a record whose PDS failed is not asked again for this long (per process)
MAX_REMEMBERED = 10_000
_failed: dict[str, float] = {}  # uri -> monotonic time it may be asked again (bounded)


def fill_read(app, config: FeedsConfig, feed: Feed, target: Target | None, actor: str, admit=None,
              cursor: str | None = None) -> int:
    """fill() for what a read shows: its target, or (None) every target of a mixed feed; `cursor`,
    the page's, moves the window of reposts looked at down to that page (a time-ordered cursor;
    any other kind reads the newest)."""
    page = cursors.decode(cursor, "time")
    before_us = page.t if page is not None else None
    return sum(fill(app, config, feed, t, actor, admit, before_us)
               for t in ([target] if target is not None else feed.shown))


def fill(app, config: FeedsConfig, feed: Feed, target: Target, actor: str, admit=None,
         before_us: int | None = None) -> int:
    """Fetch the records the reader's newest reposts show and the store lacks, from each author's
    PDS (at most MAX_FETCHES, each paid from the outbound budget by `admit`), then store them in
    one short transaction: found ones as records (the timelines show them at once), deleted ones
    as tombstones (never asked again). The number stored. Network first, never in a transaction."""
    repost = feed.reposts_of(target)
    if repost is None:
        return 0
    now = time.monotonic()
    wanted = [uri for uri in missing(config, target, repost, actor, MAX_FETCHES * 3, before_us)
              if _failed.get(uri, 0.0) <= now][:MAX_FETCHES]
    work = []
    for uri in wanted:
        try:
            parsed = parse_at_uri(uri)
        except InvalidSyntax:
            continue
        if parsed.collection != target.nsid or not parsed.rkey or not is_valid_did(parsed.did_or_handle):
            continue
        if admit is not None and not admit():
            break
        work.append((uri, parsed.did_or_handle, parsed.rkey))
    if not work:
        return 0
    found = _fetch(app, target, work)
    c = config.collections[target.short]
    stored = 0
    with db.atomic():
        serial.lock_writes()
        for uri, did, rkey in work:
            got = found.get(uri, FAILED)
            if got is FAILED:
                continue
            if got is None:
                records.bury_many({uri: sql.now_us()})
                continue
            cid, record = got
            stored += records.store_if_absent(c, uri=uri, did=did, rkey=rkey, cid=cid, record=record,
                                              time_us=records.record_time_us(record, sql.now_us()))
    return stored


FAILED = object()


def _fetch(app, target: Target, work: list[tuple[str, str, str]]) -> dict:
    sources = sources_for(app)
    results: dict = {}

    def one(item):
        uri, did, rkey = item
        with app.app_context():
            try:
                results[uri] = sources.get_record(did, target.nsid, rkey)
            except SourceError as exc:
                log.info("feeds: the reposted record %s could not be fetched (asked again in %d min): %s",
                         uri, RETRY_S // 60, exc)
                _remember_failure(uri)

    pool = Pool(FETCH_CONCURRENCY)
    for item in work:
        pool.spawn(one, item)
    if not pool.join(timeout=FETCH_DEADLINE_S):
        pool.kill(block=False)
        for uri, _did, _rkey in work:
            if uri not in results:
                _remember_failure(uri)
    return dict(results)


def _remember_failure(uri: str) -> None:
    if len(_failed) >= MAX_REMEMBERED:
        _failed.clear()  # bounded: forgetting only means asking once more
    _failed[uri] = time.monotonic() + RETRY_S
