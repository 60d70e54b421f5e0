"""Admission (FEED_SERVE): which events the feeds store at all, decided in memory.

The `global` stream carries every post, follow and profile on the network. Under FEED_SERVE
`signed-in` and `readers` only what matters to a served actor is kept: follows *by* served
actors, and target and profile records *by* served actors or by someone a served actor follows.
Everything else is dropped by `Admission.admit` before any SQL, which is what keeps a
self-hoster's disk and ingest cost proportional to the people it serves, not to the network.
`all` admits everything (a full index).

Who is served lives in the database (feed_actors, signed-in accounts in auth_grant, plus the
config's `actors`), because sign-ins and readers arrive in web processes while one other
process ingests. Every change to who is served, or to whom a served actor follows, bumps
feed_admission_state.version; the ingesting process reads that one row at most every
POLL_SECS and rebuilds its sets when it moved. A follow it ingests itself is also added to
memory at once, so the followee's posts later in the same batch are already admitted.
Over-admission (an unfollowed author kept until the next rebuild) only costs a little storage,
which the records sweep (storage.py) gives back; under-admission would lose posts, so every
path that adds a followee bumps the version.
"""
from __future__ import annotations

import time

from feather import sql
from feather.atproto.syntax import is_valid_did
from feather.db import db
from feather.errors import ApiError
from feather.feeds.config import FeedsConfig
from feather.jetstream.events import CommitEvent

POLL_SECS = 2.0
ALL, READERS, SIGNED_IN = "all", "readers", "signed-in"


# --- the served set, from the database -----------------------------------------------------------

# UNION ALL, deduplicated here: on PostgreSQL the two did columns have different collations.
SERVED_SQL = "SELECT did FROM feed_actors UNION ALL SELECT did FROM auth_grant"


def served_set(config: FeedsConfig) -> set[str]:
    """Every served actor: the config's, readers and sign-ins recorded here, and every account that
    ever signed in (auth_grant), so accounts from before admission existed are served too."""
    return set(config.actors) | {row[0] for row in sql.rows(SERVED_SQL)}


def is_served(config: FeedsConfig, did: str) -> bool:
    if did in config.actors:
        return True
    return sql.one("SELECT 1 FROM feed_actors WHERE did = ? UNION ALL"
                   " SELECT 1 FROM auth_grant WHERE did = ?", (did, did)) is not None


def keeps(config: FeedsConfig, settings, did: str) -> bool:
    """Whether the store keeps did's records: everyone's under `all`; otherwise a served actor's,
    or an author someone served follows. Under admission only follows *by* served actors are
    stored, so any stored follow of did means a served actor follows them."""
    if settings.feed_serve == ALL or is_served(config, did):
        return True
    from feather.feeds.schema import subject_expr

    tables = sorted({config.collections[f.follow].table for f in config.feeds.values()})
    return any(sql.one(f"SELECT 1 FROM {t} f WHERE {subject_expr('f')} = ? LIMIT 1", (did,))
               for t in tables)


def followees_sql(config: FeedsConfig, follow_table: str) -> str:
    from feather.feeds.schema import subject_expr

    return f"SELECT {subject_expr('f')} FROM {follow_table} f WHERE f.did = ?"


def followees_of(config: FeedsConfig, actors) -> set[str]:
    tables = sorted({config.collections[f.follow].table for f in config.feeds.values()})
    out: set[str] = set()
    for table in tables:
        statement = followees_sql(config, table)
        for actor in actors:
            out.update(row[0] for row in sql.rows(statement, (actor,)) if is_valid_did(row[0]))
    return out


def bump() -> None:
    """Tell the ingesting process to rebuild its sets (one primary-key write)."""
    sql.execute("UPDATE feed_admission_state SET version = version + 1 WHERE id = 1")


def version() -> int:
    return int(sql.scalar("SELECT version FROM feed_admission_state WHERE id = 1"))


def serve(did: str, source: str) -> bool:
    """Record did as served; True (and the version bumped) when it was not already."""
    added = sql.execute("INSERT INTO feed_actors (did, source, added_us) VALUES (?, ?, ?)"
                        " ON CONFLICT DO NOTHING", (did, source, sql.now_us())).rowcount == 1
    if added:
        bump()
    return added


# --- the in-memory filter ------------------------------------------------------------------------

class Admission:
    def __init__(self, config: FeedsConfig, mode: str, clock=time.monotonic):
        self.config = config
        self.mode = mode
        self.clock = clock
        self.served: set[str] = set()
        self.followees: set[str] = set()
        self.version: int | None = None
        self.checked_at = float("-inf")
        self.rebuilds = 0
        self._follow_nsids = config.follow_nsids

    @property
    def admits_all(self) -> bool:
        return self.mode == ALL

    def refresh(self, force: bool = False) -> bool:
        """Re-read the version (at most every POLL_SECS) and rebuild when it moved. True if rebuilt."""
        if self.admits_all:
            return False
        now = self.clock()
        if not force and self.version is not None and now - self.checked_at < POLL_SECS:
            return False
        self.checked_at = now
        current = version()
        if current == self.version and not force:
            return False
        served = served_set(self.config)
        self.served, self.followees = served, followees_of(self.config, sorted(served))
        self.version = current
        self.rebuilds += 1
        return True

    def wants(self, did: str) -> bool:
        return did in self.served or did in self.followees

    def admit(self, events: list) -> list:
        """The events that matter to a served actor; pure memory, no SQL."""
        if self.admits_all:
            return events
        kept = []
        for event in events:
            if isinstance(event, CommitEvent) and event.collection in self._follow_nsids:
                if event.did not in self.served:
                    continue
                if event.operation != "delete" and isinstance(event.record, dict):
                    subject = event.record.get("subject")
                    if is_valid_did(subject):
                        self.followees.add(subject)  # their posts later in this batch count too
                kept.append(event)
            elif event.did in self.served or event.did in self.followees:
                kept.append(event)
        return kept


# --- readers and sign-ins ------------------------------------------------------------------------

def admit_reader(config: FeedsConfig, settings, did: str) -> None:
    """getFeed's gate: the actor is served, becomes served (readers, under the cap), or is refused."""
    mode = settings.feed_serve
    if mode == ALL or is_served(config, did):
        return
    if mode == SIGNED_IN:
        raise ApiError(403, "NotServed", "This instance keeps timelines only for accounts that signed in here.")
    count = sql.scalar("SELECT count(*) FROM feed_actors")
    if count >= settings.feed_serve_max_actors:
        raise ApiError(503, "NotServed", "This instance serves as many readers as it can; try again later.")
    with db.atomic():
        serve(did, "reader")


def on_sign_in(app, did: str) -> None:
    """A sign-in hook: serve the account and start filling its timelines now, not at first read."""
    from feather.feeds import backfill

    settings = app.config["FEATHER"]
    config = app.extensions.get("feeds")
    if config is None or settings.feed_serve == ALL or not is_valid_did(did):
        return
    with db.atomic():
        serve(did, "signed-in")
    for feed in config.feeds.values():
        backfill.maybe_start(app, config, feed, did)
