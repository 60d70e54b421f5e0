"""Narrow subscriptions: a small instance receives its people's events, not the whole network's.

Under FEED_SERVE `signed-in` and `readers` the store keeps only what matters to a served actor
(admission.py), yet the `global` stream still brings every post, follow and profile on the
network, and admission drops more than 99 % of it in memory. Jetstream filters by `wantedDids`
(at most 10,000 a subscription). So while the DIDs that matter number at most
FEED_NARROW_MAX_DIDS, the feeds' collections come on the shards `feeds:0` … `feeds:<n-1>`
instead, each asking for the DIDs that hash to it (crc32 % n, n = limit / 10,000 + 1, so a
shard stays under Jetstream's limit however the hash falls); as follows come and go the engine
changes each shard's filter in place (`options_update`). Above the limit, the `feeds` stream
carries them from every DID, as the shared `global` stream does when narrowing is off. The DIDs that matter: the served actors, whom they follow (only follows *by* served
actors are stored, so every stored follow subject), and the authors of records reposted into a
served timeline (their edits and deletes must still arrive). The ingesting process reads them
from its ingest filter's memory (admission.py), which its own batches grow at once; /admin reads
them from the database (`wanted_dids`).

Taking turns. The shards and `feeds` are one family: one process claims them all (one claim
name) and only one side is switched on at a time. A stream switched on again resumes from its
saved cursor, so each placing round (`place`) sets the switched-off streams' cursors to where
the switched-on side is complete: the oldest cursor among them (or now, if none is on). A side
switched on therefore starts at or before the point the other stopped being complete; the overlap
is replayed, and every handler is idempotent.

The gap. A served actor's follow arrives on the follower's shard; the followee joins their own
shard's filter at the engine's next membership round, and whatever they wrote in between never
arrives. That is the author fetch's gap already (tasks/authors.py lists a newly followed author's
newest records from their PDS); under narrow mode the fetch waits SETTLE_US after the follow, so
that it lists the author once the filter already has them and nothing falls between the two.
A stranger whose record a followee reposts has no such fetch, and their edit or delete of it
in the gap would be lost: the ingest filter notes the repost's stream time (Admission.joins),
and the stranger's shard reconnects from there instead of changing in place (`rewind`; the
reader sets the saved cursor back once its writer is idle, so a crash replays it too).
"""
from __future__ import annotations

import time
import zlib

from gevent.lock import Semaphore

from feather import sql
from feather.atproto.syntax import is_valid_did
from feather.db import db
from feather.feeds.config import FeedsConfig
from feather.feeds.store import items, served
from feather.feeds.store.schema import subject_expr
from feather.jetstream import store as jstore
from feather.jetstream.subscriptions import MAX_DIDS

SHARED_STREAM = "global"  # every feature's whole-network stream: the feeds' own without narrowing
FULL_STREAM = "feeds"  # the feeds' collections from every DID, taking turns with the shards
SHARD_PREFIX = "feeds:"
CLAIM = "feeds"  # every stream of the family in one process: the hand-over reads their cursors
FULL, NARROW = "full", "narrow"
POLL_SECS = 2.0  # how often the served-set version is read
PLACE_SECS = 60.0  # how often the switched-off cursors follow the switched-on ones when nothing changed
# More than the engine's membership round (2 s) plus this module's poll (2 s): the filter has a
# new followee before their author fetch lists their records.
SETTLE_US = 6_000_000


def shard_count(limit: int) -> int:
    return limit // MAX_DIDS + 1


def shard_of(did: str, count: int) -> int:
    return zlib.crc32(did.encode()) % count


def shard_names(limit: int) -> list[str]:
    return [f"{SHARD_PREFIX}{k}" for k in range(shard_count(limit))] if limit > 0 else []


def family_names(limit: int) -> list[str]:
    """Every stream that may carry the feeds' collections."""
    return [FULL_STREAM, *shard_names(limit)] if limit > 0 else [SHARED_STREAM]


def wanted_dids(config: FeedsConfig) -> set[str]:
    """The DIDs whose events matter to someone served (see the module docstring), as the database
    says: /admin's view from any process (the ingesting one reads its filter's memory instead)."""
    out = set(served.served_set(config))
    for table in sorted({config.collections[f.follow].table for f in config.feeds.values()}):
        out.update(row[0] for row in sql.rows(f"SELECT DISTINCT {subject_expr('f')} FROM {table} f")
                   if is_valid_did(row[0]))
    out.update(did for did in map(_author, items.reposted_subjects()) if is_valid_did(did))
    return out


def _author(uri: str) -> str:
    return uri[len("at://"):].split("/", 1)[0] if uri.startswith("at://") else ""


def split(dids, count: int) -> list[list[str]]:
    shards: list[list[str]] = [[] for _ in range(count)]
    for did in dids:
        shards[shard_of(did, count)].append(did)
    return [sorted(members) for members in shards]


def decide(dids: set[str], limit: int) -> tuple[str, list[list[str]]]:
    """(mode, each shard's members): narrow while the DIDs fit the limit and every shard fits
    Jetstream's; the shards' members are empty in full mode."""
    count = shard_count(limit)
    shards = split(dids, count)
    if limit > 0 and len(dids) <= limit and all(len(m) <= MAX_DIDS for m in shards):
        return NARROW, shards
    return FULL, [[] for _ in range(count)]


def place(mode: str, shards: list[list[str]], limit: int, now_us: int) -> dict[str, int]:
    """Set every switched-off stream's cursor to where the switched-on side is complete: the
    oldest cursor among the streams switched on (now, if none is). Inside the caller's
    transaction; {name: time_us placed}."""
    names = shard_names(limit)
    on = [name for name, members in zip(names, shards) if members] if mode == NARROW else [FULL_STREAM]
    saved = {row.name: row.time_us for row in jstore.cursor_rows() if row.time_us > 0}
    # `global` too: before narrowing existed (or with it off) it carried the feeds' collections.
    family = [saved[n] for n in [*family_names(limit), SHARED_STREAM] if n in saved]
    placed = {}
    for name in on:
        # One that never saved a cursor (the first start after an upgrade, a shard's first member)
        # starts from the family's newest position; with none saved anywhere, everything starts live.
        if name not in saved and family:
            placed[name] = max(family)
    known = [saved.get(name) or placed.get(name) for name in on]
    at = now_us if not on else (None if None in known else min(known))
    for name in family_names(limit):
        if name not in on and at is not None and saved.get(name) != at:
            placed[name] = at
    for name, time_us in placed.items():
        jstore.place_cursor(name, time_us)
    return placed


class Narrowing:
    """The ingesting process's view: the mode and each shard's members, re-read (at most every
    POLL_SECS) when the ingest filter's sets moved (admission.py: its rebuilds, and what its own
    batches added), with the placing round after."""

    def __init__(self, config: FeedsConfig, limit: int, clock=time.monotonic):
        self.config = config
        self.limit = limit
        self.clock = clock
        self.mode = FULL
        self.shards: list[list[str]] = [[] for _ in range(shard_count(limit))]
        self.count = 0  # DIDs that matter
        self.version: object = None  # what the view was built from (the filter's counters, or the version)
        self.checked_at = self.placed_at = float("-inf")
        self.rebuilds = 0
        self.owned = False  # placing cursors is the owning engine's job, never a mere reader's
        # The ingest filter of the same process (ingest/admission.py), whose sets it reads; None: the
        # database's (wanted_dids), watched by its version.
        self.admission = None
        self.rewinds: dict[int, int] = {}  # shard -> the stream position it must replay from
        self._lock = Semaphore()

    def refresh(self, force: bool = False) -> None:
        now = self.clock()
        if not force and now - self.checked_at < POLL_SECS:
            return
        if not self._lock.acquire(blocking=False):
            return  # another greenlet is at it: the cached view stands until it is done
        try:
            with db.connection_context():
                self.checked_at = now
                if self.admission is not None:
                    # The ingest filter's memory is the DIDs that matter: rebuilt when another
                    # process bumps the version, grown at once by this one's own batches.
                    self.admission.refresh(force=self.admission.version is None)
                    current = (self.admission.rebuilds, self.admission.changes)
                else:
                    current = served.version()
                if force or current != self.version:
                    joins = self._take_joins()
                    before = self.shards
                    wanted = self._from_memory() if self.admission is not None else wanted_dids(self.config)
                    self.mode, self.shards = decide(wanted, self.limit)
                    self._note_rewinds(before, joins)
                    self.count, self.version = len(wanted), current
                    self.rebuilds += 1
                    self.placed_at = float("-inf")
                if self.owned and now - self.placed_at >= PLACE_SECS:
                    with db.atomic():
                        place(self.mode, self.shards, self.limit, sql.now_us())
                    self.placed_at = now
        finally:
            self._lock.release()

    def _from_memory(self) -> set[str]:
        a = self.admission
        return a.served | a.followees | {did for did in map(_author, a.reposted) if is_valid_did(did)}

    def _take_joins(self) -> dict[str, int]:
        joins = getattr(self.admission, "joins", None)
        if not joins:
            return {}
        self.admission.joins = {}
        return joins

    def _note_rewinds(self, before: list[list[str]], joins: dict[str, int]) -> None:
        """A stranger who joins a shard because a followee just reposted them: their shard replays
        from that repost, so an edit or delete written before the filter had them still arrives."""
        if self.mode != NARROW:
            return
        count = len(self.shards)
        for did, time_us in joins.items():
            k = shard_of(did, count)
            if did in self.shards[k] and did not in before[k]:
                self.rewinds[k] = min(self.rewinds.get(k, time_us), time_us)

    def rewind(self, k: int) -> int | None:
        """Where shard k must replay from since its members last changed, once (Subscription.rewind)."""
        return self.rewinds.pop(k, None)

    def full_active(self) -> bool:
        self.refresh()
        return self.mode == FULL

    def members(self, k: int) -> list[str]:
        self.refresh()
        return self.shards[k]

    def prepare(self) -> None:
        """The engine that claimed the family, before its streams load their cursors: from here on
        this process places the switched-off streams' cursors."""
        self.owned = True
        self.refresh(force=True)


def current_mode(config: FeedsConfig, limit: int) -> tuple[str, int]:
    """(mode, DIDs that matter) as the database says now: for /admin, in any process."""
    dids = wanted_dids(config)
    return decide(dids, limit)[0], len(dids)
