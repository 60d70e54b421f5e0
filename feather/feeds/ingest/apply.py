"""Ingest: store each record and fan it out, inside the engine's batch transaction.

Pure DB work, idempotent under replay: a create/update whose CID is already stored, or a
delete of a URI that is not stored, changes nothing and fans out nothing (Contrail's replay
rule). A batch is decided in memory first (plan.py), then written with a fixed number of
set-based statements (batch.py); the steps whose result depends on stream order are written
the same way, run by run in stream order (the per-event reference the tests compare this with
is tests/fixtures/feeds/oracle.py). When the batch applied a feed-mutating record it
sets the prune flag in the same transaction; the prune job reads it (see tasks/prune.py for why
a flag and not a direct sweep).
"""
from __future__ import annotations

import logging

from feather import sql
from feather.db import index_planned
from feather.feeds.config import FeedsConfig
from feather.feeds.ingest import batch, plan
from feather.feeds.ingest.admission import Admission
from feather.feeds.store import fetches, identities, prune_state, serial, served
from feather.jetstream.events import CommitEvent, IdentityEvent

log = logging.getLogger(__name__)


def apply_commits(config: FeedsConfig, commits: list[CommitEvent]) -> plan.Plan:
    """Apply a batch's commits; the plan's steps are those that changed something."""
    with sql.one_round_trip():  # the writes go with the next read, or all at the end
        p = plan.plan(config, commits)
        now = sql.now_us()
        batch.write(config, p.grouped, now)
        for run in plan.segments(p.ordered):
            batch.write(config, run, now)
    return p


def apply_batch(config: FeedsConfig, events, admission: Admission | None = None) -> int:
    """The engine's handler for the "global" subscription. Returns how many events changed rows.

    With an admission filter, events that matter to no served actor are dropped first, in memory:
    a batch of only those runs no SQL at all (bar the filter's own version check, at most one
    primary-key read per POLL_SECS).
    """
    added: set[str] = set()
    if admission is not None:
        admission.refresh()
        events, added = admission.admit(events)
        if not events:
            return 0
    serial.lock_writes()  # before any row lock: the sweeps and backfills queue behind the batch
    # Every statement below is index-bounded (the EXPLAIN guardrail); on PostgreSQL it is also
    # planned that way while statistics lag a fast-growing table (Dialect.index_planning_sql).
    # Its writes reach PostgreSQL with the next read, or all together at the end (sql.write).
    with index_planned(), sql.one_round_trip():
        return _apply(config, events, admission, added)


def _apply(config: FeedsConfig, events, admission: Admission | None, added: set[str]) -> int:
    commits = [event for event in events if isinstance(event, CommitEvent)]
    renamed = [event.did for event in events if isinstance(event, IdentityEvent)]
    if renamed:
        identities.forget_handles(renamed)
    changed = 0
    mutating = follows_changed = False
    followed: set[str] = set()
    unfollowed: set[str] = set()
    for step in apply_commits(config, commits).steps:
        changed += 1
        mutating = mutating or step.event.collection in config.feed_mutating_nsids
        if step.is_follow:
            follows_changed = True
            if step.event.operation == "create" and step.subject_after:
                followed.add(step.subject_after)
            if step.unfollows:
                unfollowed.add(step.unfollows)
    if mutating:
        prune_state.mark_dirty()
    if admission is not None and follows_changed:
        # The filter already holds the new followees and probes the unfollowed ones after the
        # commit (admission.py: no version bump, no rebuild); the new followees' past records
        # come from their PDS (tasks/authors.py fetch_tick).
        admission.unfollowed(unfollowed)
        fetches.request(followed)
    unwritten = sorted(added - followed)
    if unwritten:
        # Follows the filter admitted that no step of this batch wrote: already stored (a replay of a
        # kept follow) or refused (a replay of a deleted one). This transaction's view says which.
        admission.refused([s for s in unwritten if not served.followed(config, s)])
    return changed


def handler(config: FeedsConfig, settings=None):
    """One Admission per handler: the ingesting process's in-memory filter (admission.py)."""
    mode = getattr(settings, "feed_serve", "all")
    admission = None if mode == "all" else Admission(config, mode)

    def apply(events) -> None:
        apply_batch(config, events, admission)
    apply.admission = admission
    return apply

