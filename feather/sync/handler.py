"""The Jetstream handler: database only, synchronous, inside the batch transaction.

Because it runs in the engine's one transaction per batch, queue insertion order is event order.
Branches (docs/design.md, "Graph sync": the live flow):
  follow create  -> mirror it; queue a follow on every other app of the set that lacks the subject.
                    An rkey already mirrored is sync's own echo (or a replay): it propagates nothing.
  follow delete  -> THE ONLY PLACE AN UNFOLLOW IS QUEUED. Remember the delete, remove the mirror row;
                    unless the owner still has a confirmed record of the subject on that app (a
                    duplicate was cleaned up), cancel queued follows of the subject, purge its waits
                    and queue an unfollow for each of its records on the other apps that was born
                    before the delete; a record born after it (the owner's newer follow, mirrored
                    by a listing ahead of a lagging stream) stays and propagates again. The echo
                    of sync's own delete propagates nothing.
  profile create -> queue a follow for every owner waiting on that subject on that app.

Replays (cursor - 5 s after a restart, a host switch or a failed batch; up to the lookback for a
shard) must change nothing. Every observed delete is remembered in sync_observed_deletes with its
event time: a replayed delete finds it, and a replayed create of a record deleted later is
recognised and ignored. Records born after an unfollow are never its targets, so even a delete seen
late (a lagging shard) cannot reach a follow the owner made afterwards.
"""
from __future__ import annotations

import logging

from feather import sql
from feather.atproto.syntax import is_valid_did
from feather.jetstream.events import CommitEvent
from feather.sync import apps as registry
from feather.sync import queue
from feather.sync.store import SyncSet, get_set

log = logging.getLogger(__name__)


class _Sets:
    """Per-batch cache of sync sets: a batch of 500 events from 3 owners reads 3 rows."""

    def __init__(self):
        self._cache: dict[str, SyncSet | None] = {}

    def member(self, owner: str, app_key: str) -> SyncSet | None:
        if owner not in self._cache:
            self._cache[owner] = get_set(owner)
        found = self._cache[owner]
        return found if found is not None and found.enabled and app_key in found.apps else None


def deleted_at(owner: str, app: str, rkey: str) -> int | None:
    """The time of the observed delete of this record, if one was seen."""
    return sql.scalar("SELECT time_us FROM sync_observed_deletes WHERE owner_did = ? AND app = ? AND rkey = ?",
                      (owner, app, rkey))


def follow_created(sets: _Sets, event: CommitEvent, now: int) -> None:
    app = registry.BY_FOLLOW[event.collection]
    owner = event.did
    sync_set = sets.member(owner, app.key)
    subject = (event.record or {}).get("subject")
    if sync_set is None or not is_valid_did(subject):
        return  # Semble may follow a collection URI: only did: subjects are synced
    gone_at = deleted_at(owner, app.key, event.rkey)
    if gone_at is not None and gone_at >= event.time_us:
        return  # a replayed create of a record whose delete was already seen
    known = queue.mirror_state(owner, app.key, event.rkey)
    if known is not None:
        if known[1] in ("pending", "failed"):  # the echo of sync's own write: it landed
            queue.set_mirror_state(owner, app.key, event.rkey, "live", now)
        return
    queue.upsert_mirror(owner, app.key, event.rkey, subject, now, born_us=event.time_us)
    have = queue.followed_on(owner, subject, staying=True)
    waiting = {r[0] for r in sql.rows("SELECT app FROM sync_waiting WHERE owner_did = ? AND subject = ?",
                                      (owner, subject))}
    for other in sync_set.apps:
        if other not in have and other not in waiting:
            queue.enqueue_follow(owner, other, subject, "event", now, cause_us=event.time_us)


def follow_deleted(sets: _Sets, event: CommitEvent, now: int) -> None:
    app = registry.BY_FOLLOW[event.collection]
    owner = event.did
    sync_set = sets.member(owner, app.key)
    if sync_set is None:
        return
    if deleted_at(owner, app.key, event.rkey) is not None:
        return  # a replay, or a second delivery: it was handled the first time
    known = queue.mirror_state(owner, app.key, event.rkey)
    queue.record_observed_delete(owner, app.key, event.rkey, known[0] if known else None, event.time_us, now)
    if known is None:
        return  # never mirrored: not a DID subject, or older than the set
    subject, state = known
    queue.delete_mirror(owner, app.key, event.rkey)
    if state in ("deleting", "gone"):
        return  # the echo of sync's own unfollow
    if app.key in queue.live_on(owner, subject):
        return  # one of two duplicate records went: cleanup, not an unfollow
    for other_app, rkey in queue.records_born_before(owner, subject, event.time_us):
        # The one call that queues an unfollow (see the module docstring and tests/test_sync_apps.py).
        queue.enqueue_observed_unfollow(owner, other_app, subject, rkey, now)
    queue.cancel_pending_follows(owner, subject, now, event.time_us)
    queue.forget_waiting_of(owner, subject)
    # A record born after this delete is a follow the owner made since; a listing can mirror it
    # before a lagging stream brings this delete. It stays, so it propagates once more.
    newer = sql.scalar("SELECT MAX(born_us) FROM sync_follow_mirror WHERE owner_did = ? AND subject = ?"
                       " AND state IN ('live', 'pending') AND born_us >= ?", (owner, subject, event.time_us))
    if newer is not None:
        have = queue.followed_on(owner, subject, staying=True)
        for other in sync_set.apps:
            if other not in have:
                queue.enqueue_follow(owner, other, subject, "event", now, cause_us=newer)


def profile_created(settings, event: CommitEvent, now: int) -> None:
    if event.rkey != registry.PROFILE_RKEY:
        return
    for app in registry.apps_for_profile(event.collection, settings):
        waiting = sql.rows("SELECT w.owner_did, w.cause_us FROM sync_waiting w JOIN sync_sets s"
                           " ON s.owner_did = w.owner_did WHERE w.subject = ? AND w.app = ? AND s.enabled = 1",
                           (event.did, app.key))
        for owner, cause_us in waiting:
            queue.enqueue_follow(owner, app.key, event.did, "waitlist", now, cause_us=cause_us)
        queue.clear_waiting_for(event.did, app.key)


def apply_follow_batch(events, now: int) -> None:
    sets = _Sets()
    for event in events:
        if not isinstance(event, CommitEvent) or event.collection not in registry.BY_FOLLOW:
            continue
        if event.operation == "create":
            follow_created(sets, event, now)
        elif event.operation == "delete":
            follow_deleted(sets, event, now)


def apply_profile_batch(settings, events, now: int) -> None:
    live = set(registry.live_profile_collections(settings))
    for event in events:
        if isinstance(event, CommitEvent) and event.operation == "create" and event.collection in live:
            profile_created(settings, event, now)


def make_handlers(settings, clock=None):
    """(follow handler, profile handler) for the engine; `clock` returns Unix seconds (tests fake it)."""

    clock = clock or sql.now_s

    def follows(events) -> None:
        apply_follow_batch(events, clock())

    def profiles(events) -> None:
        apply_profile_batch(settings, events, clock())

    return follows, profiles
