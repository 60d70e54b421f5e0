"""The Jetstream handler: database only, synchronous, inside the batch transaction.

Because it runs in the engine's one transaction per batch, queue insertion order is event order.
Branches (specs/graph-sync.md, Flow 2):
  follow create  -> mirror it; queue a follow on every other app of the set that lacks the subject.
                    An rkey already mirrored is sync's own echo (or a replay): it propagates nothing.
  follow delete  -> THE ONLY PLACE AN UNFOLLOW IS QUEUED. Remove the mirror row; unless the owner
                    still follows the subject on that app (a duplicate was cleaned up), cancel queued
                    follows of the subject, purge its waits and queue an unfollow for each of its
                    mirrored records on the other apps. The echo of sync's own delete propagates nothing.
  profile create -> queue a follow for every owner waiting on that subject on that app.
Replays are harmless: every branch is keyed by (owner, app, rkey) and re-applying finds its work done.
"""
from __future__ import annotations

import logging

from feather.atproto.syntax import is_valid_did
from feather.jetstream.events import CommitEvent
from feather.sync import apps as registry
from feather.sync import queue
from feather.sync.store import SyncSet, execute, get_set, rows

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


def follow_created(sets: _Sets, event: CommitEvent, now: int) -> None:
    app = registry.BY_FOLLOW[event.collection]
    owner = event.did
    sync_set = sets.member(owner, app.key)
    subject = (event.record or {}).get("subject")
    if sync_set is None or not is_valid_did(subject):
        return  # Semble may follow a collection URI: only did: subjects are synced
    known = queue.mirror_state(owner, app.key, event.rkey)
    if known is not None:
        if known[1] == "pending":  # the echo of sync's own write: now confirmed
            queue.set_mirror_state(owner, app.key, event.rkey, "live", now)
        return
    queue.upsert_mirror(owner, app.key, event.rkey, subject, now)
    have = queue.followed_on(owner, subject, staying=True)
    waiting = {r[0] for r in rows("SELECT app FROM sync_waiting WHERE owner_did = ? AND subject = ?", owner, subject)}
    for other in sync_set.apps:
        if other not in have and other not in waiting:
            queue.enqueue_follow(owner, other, subject, "event", now)


def follow_deleted(sets: _Sets, event: CommitEvent, now: int) -> None:
    app = registry.BY_FOLLOW[event.collection]
    owner = event.did
    if sets.member(owner, app.key) is None:
        return
    known = queue.mirror_state(owner, app.key, event.rkey)
    if known is None:
        return  # never mirrored (not a DID subject, older than the set) or a replay
    subject, state = known
    execute("DELETE FROM sync_follow_mirror WHERE owner_did = ? AND app = ? AND rkey = ?", owner, app.key, event.rkey)
    if state in ("deleting", "gone"):
        return  # the echo of sync's own unfollow
    if app.key in queue.followed_on(owner, subject):
        return  # one of two duplicate records went: cleanup, not an unfollow
    for other_app, rkey in queue.active_records(owner, subject):
        # The one unfollow insert in the code base (see module docstring and test_sync_safety).
        execute("INSERT INTO sync_queue (owner_did, app, kind, subject, rkey, origin, status, created_at, updated_at)"
                " VALUES (?, ?, 'unfollow', ?, ?, 'event', 'pending', ?, ?)",
                owner, other_app, subject, rkey, now, now)
    queue.cancel_pending_follows(owner, subject, now)
    execute("DELETE FROM sync_waiting WHERE owner_did = ? AND subject = ?", owner, subject)


def profile_created(settings, event: CommitEvent, now: int) -> None:
    if event.rkey != registry.PROFILE_RKEY:
        return
    for app in registry.apps_for_profile(event.collection, settings):
        waiting = rows("SELECT w.owner_did FROM sync_waiting w JOIN sync_sets s ON s.owner_did = w.owner_did"
                       " WHERE w.subject = ? AND w.app = ? AND s.enabled = 1", event.did, app.key)
        for (owner,) in waiting:
            queue.enqueue_follow(owner, app.key, event.did, "waitlist", now)
        execute("DELETE FROM sync_waiting WHERE subject = ? AND app = ?"
                " AND owner_did IN (SELECT owner_did FROM sync_sets WHERE enabled = 1)", event.did, app.key)


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
    from feather.sync.store import now_s

    clock = clock or now_s

    def follows(events) -> None:
        apply_follow_batch(events, clock())

    def profiles(events) -> None:
        apply_profile_batch(settings, events, clock())

    return follows, profiles
