"""Admission (FEED_SERVE): which events the feeds store at all, decided in memory.

The `global` stream carries every post, follow and profile on the network. Under FEED_SERVE
`signed-in` and `readers` only what matters to a served actor is kept: follows *by* served
actors, and target and profile records *by* served actors or by someone a served actor follows.
Everything else is dropped by `Admission.admit` before any SQL, which is what keeps a
self-hoster's disk and ingest cost proportional to the people it serves, not to the network.
`all` admits everything (a full index).

Who is served lives in the database (store/served.py), because sign-ins and readers arrive in
web processes while one other process ingests. Every change another process makes to who is
served, or to whom a served actor follows, bumps feed_admission_state.version; the ingesting
process reads that one row at most every POLL_SECS and rebuilds its sets when it moved (one
statement per follow table, served.served_followees), and every REBUILD_SECS regardless.

Its own batches never cost a rebuild (at a hundred thousand readers one takes seconds, and their
follows arrive every few): a follow it ingests is added to memory at once, so the followee's posts
later in the same batch are already admitted, and an unfollow is checked against the database
at the next poll (`pending`: one probe of the follow table's subject index), once its batch has
committed. Batches of several streams run side by side, so a rebuild keeps what admit added in
the last RECENT_SECS on top of what it read, and an unfollow is probed only once SETTLE_SECS have
passed since it and since the author was last followed (their batches have committed by then; one
still open after that long could leave an author out until the next rebuild). A follow admit
let in that its batch did not write (a replay of a follow since deleted, which the store refuses)
is taken out again in that batch's transaction (apply.py, `refused`). Over-admission (an author kept a little too long) only costs
a little storage, which the records sweep (tasks/records_sweep.py) gives back; under-admission
would lose posts, so every path in another process that adds a followee bumps the version.
"""
from __future__ import annotations

import time

from gevent.lock import Semaphore

from feather.atproto.syntax import is_valid_did
from feather.feeds.config import FeedsConfig
from feather.feeds.store import items, served
from feather.jetstream.events import CommitEvent

POLL_SECS = 2.0
REBUILD_SECS = 600.0  # sheds whatever over-admission the probes left
RECENT_SECS = 60.0  # longer than any batch stays open
SETTLE_SECS = 5.0  # an unfollow is probed once the batches around it have had this long to commit


# --- the in-memory filter ------------------------------------------------------------------------

class Admission:
    def __init__(self, config: FeedsConfig, mode: str, clock=time.monotonic):
        self.config = config
        self.mode = mode
        self.clock = clock
        self.served: set[str] = set()
        self.followees: set[str] = set()
        self.reposted: set[str] = set()  # records reposted into a served timeline, whoever wrote them
        self.changes = 0  # followees and subjects added or dropped in memory since start (narrow.py watches it)
        self.recent: dict[str, float] = {}  # followee or reposted subject -> when admit added it
        self.pending: dict[str, float] = {}  # unfollowed subject -> when its batch noted it
        # Narrow subscriptions only (ingest/narrow.py takes and empties it): a reposted subject's
        # author -> the earliest stream time of a repost that added them, where their shard replays from.
        self.joins: dict[str, int] | None = None
        self.version: int | None = None
        self.checked_at = self.rebuilt_at = float("-inf")
        self.rebuilds = 0
        self._lock = Semaphore()  # narrow.py refreshes from its own greenlet too
        self._follow_nsids = config.follow_nsids
        self._repost_nsids = frozenset(c.nsid for c in config.collections.values() if c.reposts)
        self._reposted_nsids = config.reposted_nsids

    @property
    def admits_all(self) -> bool:
        return self.mode == served.ALL

    def refresh(self, force: bool = False) -> bool:
        """Re-read the version (at most every POLL_SECS) and rebuild when it moved, or REBUILD_SECS
        after the last rebuild. True if rebuilt."""
        if self.admits_all:
            return False
        now = self.clock()
        if not force and self.version is not None and now - self.checked_at < POLL_SECS:
            return False
        if not self._lock.acquire(blocking=False):
            return False  # another greenlet is rebuilding: the sets in memory stand meanwhile
        try:
            self.checked_at = now
            current = served.version()
            if current == self.version and now - self.rebuilt_at < REBUILD_SECS and not force:
                self._probe(now)
                return False
            self.recent = {key: at for key, at in self.recent.items() if now - at < RECENT_SECS}
            self.served, followees = served.served_followees(self.config)
            reposted = items.reposted_subjects() if self._repost_nsids else set()
            # What admit added lately may belong to a batch not committed when the above was read,
            # unless an unfollow of it came later: that one is the probe's to settle (pending
            # outlives the rebuild), else a rebuild within RECENT_SECS of a follow undid its unfollow.
            self.followees = followees | {key for key, at in self.recent.items() if not key.startswith("at://")
                                          and self.pending.get(key, float("-inf")) < at}
            self.reposted = reposted | {key for key in self.recent if key.startswith("at://")}
            self.version, self.rebuilt_at = current, now
            self.rebuilds += 1
            return True
        finally:
            self._lock.release()

    def refused(self, subjects) -> None:
        """Subjects this batch admitted whose follow its transaction did not keep, and nobody
        served follows: out of the filter at once (a replay must not widen it for good)."""
        for subject in subjects:
            if subject in self.followees and subject not in self.served:
                self.followees.discard(subject)
                self.recent.pop(subject, None)
                self.changes += 1

    def unfollowed(self, subjects) -> None:
        """Subjects a batch of this process stopped following: probed once it has committed."""
        now = self.clock()
        for subject in subjects:
            self.pending[subject] = now

    def _probe(self, now: float) -> None:
        """Settle the unfollowed authors as the database says now: dropped when nobody served
        follows them any more, kept (or put back, when a rebuild left them out while another
        stream's follow of them was not committed yet) when someone still does."""
        due = [s for s, at in self.pending.items()
               if now - at >= SETTLE_SECS and now - self.recent.get(s, float("-inf")) >= SETTLE_SECS]
        for subject in due:
            self.pending.pop(subject, None)
            if subject in self.served:
                continue
            followed = served.followed(self.config, subject)
            if not followed:
                # Its follow has settled too (the condition above): the database is the answer
                # now, and a rebuild must not bring the author back from `recent`.
                self.recent.pop(subject, None)
            if followed != (subject in self.followees):
                (self.followees.add if followed else self.followees.discard)(subject)
                self.changes += 1

    def wants(self, did: str) -> bool:
        return did in self.served or did in self.followees

    def admit(self, events: list) -> tuple[list, set[str]]:
        """The events that matter to a served actor, and the followees this call added; pure memory,
        no SQL. The added set is the caller's to check in its batch's transaction (apply.py),
        because the store may refuse the follow that added them (a replayed create of a deleted
        follow). It is returned, never kept on self: the streams' batches run side by side, and
        another stream's admit between this one and its check would hand it followees whose
        batch has not committed, which the check would then wrongly take out."""
        added: set[str] = set()
        if self.admits_all:
            return events, added
        kept = []
        for event in events:
            if isinstance(event, CommitEvent) and event.collection in self._follow_nsids:
                if event.did not in self.served:
                    continue
                if event.operation != "delete" and isinstance(event.record, dict):
                    subject = event.record.get("subject")
                    if is_valid_did(subject):
                        self.recent[subject] = self.clock()  # a rebuild or a probe keeps them a while
                        if subject not in self.followees:
                            self.followees.add(subject)  # their posts later in this batch count too
                            self.changes += 1
                            added.add(subject)
                kept.append(event)
            elif event.did in self.served or event.did in self.followees:
                if (isinstance(event, CommitEvent) and event.collection in self._repost_nsids
                        and event.operation != "delete"):
                    subject = items.reposted_uri(event.record)
                    if subject is not None and subject not in self.reposted:
                        self.reposted.add(subject)  # its later edit or delete reaches the store
                        self.recent[subject] = self.clock()
                        self.changes += 1  # narrow subscriptions must ask for its author too
                        if self.joins is not None:
                            author = subject[len("at://"):].split("/", 1)[0]
                            self.joins[author] = min(self.joins.get(author, event.time_us), event.time_us)
                kept.append(event)
            elif (isinstance(event, CommitEvent) and event.collection in self._reposted_nsids
                  and event.uri in self.reposted):
                # A record someone followed reposted, by an author nobody served follows: its
                # edits and its delete must still reach the store and the timelines showing it.
                kept.append(event)
        return kept, added
