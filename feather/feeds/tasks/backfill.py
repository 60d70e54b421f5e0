"""First read of an (actor, feed): claim, then fill the feed in the background (docs/design.md, "Timelines").

The request never waits: it claims feed_backfills and spawns a greenlet. The greenlet lists the
actor's follow records from their PDS (through FeedSources; no fan-out, never overwriting what
the stream stored), then bootstraps the feed from target records already stored, trims it to
the cap, and marks the claim complete only if the listing finished. A failed or cut-short
attempt records the error and keeps the claim stamped with its failure time: the next read may
retry it only after a backoff (RETRY_BASE_MS, doubling per failure, at most BACKFILL_STALE_MS), so
a reader paging a timeline whose PDS is down does not start a backfill (and pay the outbound
budget) on every page. A claim older than BACKFILL_STALE_MS is taken to be dead (a crashed
process) and re-claimed.
"""
from __future__ import annotations

import heapq
import logging
import time
from typing import Callable

import gevent

from feather import sql
from feather.atproto.cache import TtlCache
from feather.db import db
from feather.atproto.syntax import is_valid_did
from feather.feeds.config import Feed, FeedsConfig
from feather.feeds.read.sources import SourceError, sources_for
from feather.feeds.store import backfills, fetches, items, records, serial, served
from feather.feeds.store.schema import subject_expr
from feather.feeds.tasks import prune

log = logging.getLogger(__name__)

BACKFILL_TIMEOUT_S = 30.0
BACKFILL_STALE_MS = 5 * 60 * 1000
# Longer than BACKFILL_TIMEOUT_S, so an attempt still running is never taken for a finished one.
RETRY_BASE_MS = 60 * 1000
WRITE_CHUNK = 100
_GREENLETS = "feeds_backfill_greenlets"


def wait_ms(retries: int) -> int:
    """How long a claim stamped after `retries` failures (0: still running) holds off the next one."""
    if retries <= 0:
        return BACKFILL_STALE_MS
    return min(BACKFILL_STALE_MS, RETRY_BASE_MS * 2 ** (retries - 1))


def wants_claim(row, now: int) -> bool:
    """Whether a read finding this feed_backfills row (or None) would claim a backfill now."""
    if row is None:
        return True
    completed, started_at, retries = row
    return not completed and (started_at is None or now - started_at >= wait_ms(retries))


# A completed backfill stays completed until "delete my data" forgets the actor's claims, yet a
# served reader's every read asked the database to learn that (a statement a read, for nothing).
# Each process remembers what it saw completed for DONE_TTL_SECS; a forget in the same process
# drops it at once (forget_known), one in another process is seen within that long.
DONE_TTL_SECS = 60.0
DONE_MAX_ACTORS = 100_000
_DONE = "feeds_backfills_done"


def done_cache(app) -> TtlCache:
    """actor -> the feeds whose backfill this process saw completed (per app: tests make many)."""
    cache = app.extensions.get(_DONE)
    if cache is None:
        cache = app.extensions[_DONE] = TtlCache(DONE_TTL_SECS, time.monotonic, DONE_MAX_ACTORS)
    return cache


def known_done(app, actor: str, feed: str) -> bool:
    return feed in (done_cache(app).get(actor) or ())


def note_done(app, actor: str, feed: str) -> None:
    cache = done_cache(app)
    cache.put(actor, (cache.get(actor) or frozenset()) | {feed})


def forget_known(app, actor: str) -> None:
    done_cache(app).discard(actor)


_UNREAD = object()


def claim(actor: str, feed: str, now: int, row=_UNREAD) -> bool:
    """True when this caller now owns the backfill of (actor, feed) and must run it. row: the
    feed_backfills row the caller already read in this transaction (None: there is none)."""
    if row is _UNREAD:
        row = backfills.state(actor, feed)
    if row is None:
        return backfills.claim_new(actor, feed, now)
    if not wants_claim(row, now):
        return False  # done, in flight, or resting after a failure
    # Compare-and-set on the value we read, so two readers cannot both take a stale claim.
    return backfills.reclaim(actor, feed, now, row[1])


def maybe_start(app, config: FeedsConfig, feed: Feed, actor: str,
                admit: Callable[[], bool] | None = None) -> gevent.Greenlet | None:
    """Claim and spawn the backfill of (actor, feed) if it is due. admit() runs first when a claim
    is due (never for a done, in-flight or resting backfill); when it answers False (the outbound
    budget is spent) nothing is claimed, and a later read tries again."""
    with db.atomic():
        now = sql.now_ms()
        row = backfills.state(actor, feed.name)  # read once: the budget's question and the claim share it
        if admit is not None and wants_claim(row, now) and not admit():
            return None
        claimed = claim(actor, feed.name, now, row)
    if not claimed:
        return None
    greenlet = gevent.spawn(run, app, config, feed, actor)
    running = [g for g in app.extensions.get(_GREENLETS, []) if not g.dead]
    app.extensions[_GREENLETS] = running + [greenlet]
    return greenlet


def on_sign_in(app, did: str) -> None:
    """A sign-in hook: serve the account and start filling its timelines now, not at first read."""
    settings = app.config["FEATHER"]
    config = app.extensions.get("feeds")
    if config is None or settings.feed_serve == served.ALL or not is_valid_did(did):
        return
    with db.atomic():
        served.serve(did, "signed-in")
    for feed in config.feeds.values():
        maybe_start(app, config, feed, did)


def join_all(app, timeout: float = 30.0) -> None:
    """Wait for in-process backfills (tests, graceful shutdown)."""
    gevent.joinall(app.extensions.get(_GREENLETS, []), timeout=timeout)


def run(app, config: FeedsConfig, feed: Feed, actor: str) -> bool:
    """The background body; returns whether the backfill completed."""
    with app.app_context(), db.connection_context():
        try:
            return _run(app, config, feed, actor)
        except Exception as exc:  # never leave a claim stuck on an unexpected bug
            log.exception("feeds: backfill of %s/%s failed", actor, feed.name)
            with db.atomic():
                _fail(actor, feed.name, f"{type(exc).__name__}: {exc}")
            return False


def _run(app, config: FeedsConfig, feed: Feed, actor: str) -> bool:
    follow = config.collections[feed.follow]
    deadline = time.monotonic() + BACKFILL_TIMEOUT_S
    inserted, error, finished = 0, None, False
    chunk: list = []
    try:
        listing = sources_for(app).list_follows(actor, follow.nsid, deadline)
        for item in listing:  # network I/O happens here, outside any transaction
            chunk.append(item)
            if len(chunk) >= WRITE_CHUNK:
                inserted += _store(follow, actor, chunk)
                chunk = []
            if time.monotonic() > deadline:
                raise SourceError(f"follow listing exceeded {BACKFILL_TIMEOUT_S:.0f}s")
        finished = True
    except SourceError as exc:
        error = str(exc) or type(exc).__name__
    inserted += _store(follow, actor, chunk)
    with db.atomic():
        serial.lock_writes()
        bootstrap(config, feed, actor)
        if app.config["FEATHER"].feed_serve != "all":
            admit_followees(config, feed, actor)
        if finished:
            backfills.complete(actor, feed.name)
        else:
            _fail(actor, feed.name, f"follow backfill incomplete (inserted={inserted}): {error}")
    return finished


def _fail(actor: str, feed: str, message: str) -> None:
    """Record a failed attempt; its stamp (the failure's time) holds the next claim off for wait_ms."""
    backfills.fail(actor, feed, message, sql.now_ms())


def _store(follow, actor: str, items: list) -> int:
    if not items:
        return 0
    now = sql.now_us()
    count = 0
    with db.atomic():
        serial.lock_writes()
        for rkey, cid, record in items:
            if not isinstance(record, dict) or not isinstance(rkey, str):
                continue
            count += records.store_if_absent(
                follow, uri=f"at://{actor}/{follow.nsid}/{rkey}", did=actor, rkey=rkey, cid=cid,
                record=record, time_us=records.record_time_us(record, now))
    return count


def admit_followees(config: FeedsConfig, feed: Feed, actor: str) -> int:
    """Under admission the store holds nothing yet of the people a new actor follows: queue them
    for a fetch from their PDS and tell the ingesting process to start admitting them."""
    rows = sql.rows(followees_sql(config, feed), (actor,))
    queued = fetches.request(row[0] for row in rows if isinstance(row[0], str) and row[0].startswith("did:"))
    served.bump()
    return queued


def followees_sql(config: FeedsConfig, feed: Feed):
    follow = config.collections[feed.follow].table
    return f"SELECT DISTINCT {subject_expr('f')} FROM {follow} f WHERE f.did = ?"


def newest_sql(table: str, subject: str = "NULL"):
    """A followee's newest records; `subject` is the feed row's subject (items.subject_sql)."""
    return (f"SELECT r.uri, r.time_us, {subject} FROM {table} r WHERE r.did = ?"
            f" ORDER BY r.time_us DESC, r.uri ASC LIMIT ?")


def bootstrap(config: FeedsConfig, feed: Feed, actor: str) -> int:
    """Fill the feed with the newest cap records by everyone the actor follows, then trim.

    Each followee's newest `cap` come off its (did, time_us) index and are merged here, so the
    cost is followees × cap index reads instead of sorting every record they ever wrote.
    """
    followees = [row[0] for row in sql.rows(followees_sql(config, feed), (actor,))
                 if isinstance(row[0], str) and row[0].startswith("did:")]
    added = 0
    for target in feed.targets:
        table = config.collections[target.short].table
        best: list = []
        statement = newest_sql(table, items.subject_sql(target, "r"))
        for did in followees:
            for uri, time_us, subject in sql.rows(statement, (did, target.cap)):
                entry = (time_us, _Desc(uri), subject)
                if len(best) < target.cap:
                    heapq.heappush(best, entry)
                elif entry > best[0]:
                    heapq.heapreplace(best, entry)
        for time_us, uri, subject in best:
            added += items.insert(actor, uri.value, target.nsid, time_us, subject)
    caps = config.target_caps()  # the global prune's caps: never trim below another feed's
    prune.prune_actor(actor, {t.nsid: caps[t.nsid] for t in feed.targets})
    return added


class _Desc:
    """Orders URIs descending so the heap keeps (newest time, smallest uri) like the read order."""
    __slots__ = ("value",)

    def __init__(self, value: str):
        self.value = value

    def __lt__(self, other: "_Desc") -> bool:
        return self.value > other.value

    def __eq__(self, other) -> bool:
        return isinstance(other, _Desc) and self.value == other.value
