"""Admission (FEED_SERVE): which events the feeds store at all, decided in memory.

The `global` stream carries every post, follow and profile on the network. Under FEED_SERVE
`signed-in` and `readers` only what matters to a served actor is kept: follows *by* served
actors, and target and profile records *by* served actors or by someone a served actor follows.
Everything else is dropped by `Admission.admit` before any SQL, which is what keeps a
self-hoster's disk and ingest cost proportional to the people it serves, not to the network.
`all` admits everything (a full index).

Who is served lives in the database (store/served.py), because sign-ins and readers arrive in
web processes while one other process ingests. Every change to who is served, or to whom a served actor follows, bumps
feed_admission_state.version; the ingesting process reads that one row at most every
POLL_SECS and rebuilds its sets when it moved. A follow it ingests itself is also added to
memory at once, so the followee's posts later in the same batch are already admitted.
Over-admission (an unfollowed author kept until the next rebuild) only costs a little storage,
which the records sweep (tasks/records_sweep.py) gives back; under-admission would lose posts, so every
path that adds a followee bumps the version.
"""
from __future__ import annotations

import time

from feather.atproto.syntax import is_valid_did
from feather.feeds.config import FeedsConfig
from feather.feeds.store import items, served
from feather.jetstream.events import CommitEvent

POLL_SECS = 2.0


# --- the in-memory filter ------------------------------------------------------------------------

class Admission:
    def __init__(self, config: FeedsConfig, mode: str, clock=time.monotonic):
        self.config = config
        self.mode = mode
        self.clock = clock
        self.served: set[str] = set()
        self.followees: set[str] = set()
        self.reposted: set[str] = set()  # records reposted into a served timeline, whoever wrote them
        self.version: int | None = None
        self.checked_at = float("-inf")
        self.rebuilds = 0
        self._follow_nsids = config.follow_nsids
        self._repost_nsids = frozenset(c.nsid for c in config.collections.values() if c.reposts)
        self._reposted_nsids = config.reposted_nsids

    @property
    def admits_all(self) -> bool:
        return self.mode == served.ALL

    def refresh(self, force: bool = False) -> bool:
        """Re-read the version (at most every POLL_SECS) and rebuild when it moved. True if rebuilt."""
        if self.admits_all:
            return False
        now = self.clock()
        if not force and self.version is not None and now - self.checked_at < POLL_SECS:
            return False
        self.checked_at = now
        current = served.version()
        if current == self.version and not force:
            return False
        found = served.served_set(self.config)
        self.served, self.followees = found, served.followees_of(self.config, sorted(found))
        self.reposted = items.reposted_subjects() if self._repost_nsids else set()
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
                if (isinstance(event, CommitEvent) and event.collection in self._repost_nsids
                        and event.operation != "delete"):
                    subject = items.reposted_uri(event.record)
                    if subject is not None:
                        self.reposted.add(subject)  # its later edit or delete reaches the store
                kept.append(event)
            elif (isinstance(event, CommitEvent) and event.collection in self._reposted_nsids
                  and event.uri in self.reposted):
                # A record someone followed reposted, by an author nobody served follows: its
                # edits and its delete must still reach the store and the timelines showing it.
                kept.append(event)
        return kept
