"""Backfill, union and sweep: listing the owner's follows and adding what is missing. Follows only.

Enabling sync (or adding apps) starts a run: one listing task per unseeded app, worked in short
resumable bursts (the page cursor is saved after every page). When every listing of the run is
done, one guarded union step queues a follow for every (subject, app) pair the mirror lacks.
The daily sweep re-lists: a record the handler missed is mirrored and propagated like a create
event; once a listing is complete, mirror rows last seen before it started are dropped (the
record is gone). Nothing here can unfollow: it imports queue.enqueue_follow and nothing else.
The one module that writes sync_backfill_tasks.
"""
from __future__ import annotations

import logging
from typing import Callable

from feather import sql
from feather.atproto.syntax import is_valid_did
from feather.db import db
from feather.sync import apps as registry
from feather.sync import pacer, queue, store
from feather.sync.follow_writer import FollowWriter, PdsError
from feather.sync.store import get_set, record_activity, sets_due_for_sweep

log = logging.getLogger(__name__)

BURST_PAGES = 3  # pages of 100 per task per burst: short, so one big account never hogs the job
BURST_TASKS = 20
RETRY_CAP_SECS = 3600  # listing never gives up (it is resumable); it just waits longer


def start_run(owner: str, app_keys, kind: str, now: int) -> int:
    """Queue a listing task per app (skipping apps already being listed); the run number."""
    if kind == "backfill":
        store.next_backfill_run(owner)
    run = sql.scalar("SELECT backfill_run FROM sync_sets WHERE owner_did = ?", (owner,), default=0)
    busy = {r[0] for r in sql.rows("SELECT app FROM sync_backfill_tasks WHERE owner_did = ? AND status = 'pending'"
                                   " AND kind = ?", (owner, kind))}
    added = 0
    for key in app_keys:
        if key in busy:
            sql.execute("UPDATE sync_backfill_tasks SET run = ? WHERE owner_did = ? AND app = ? AND status = 'pending'",
                        (run, owner, key))
        else:
            sql.execute("INSERT INTO sync_backfill_tasks (owner_did, run, app, kind, started_at)"
                        " VALUES (?, ?, ?, ?, ?)",
                        (owner, run, key, kind, now))
        added += 1
    if kind == "backfill":
        store.set_backfill_total(owner, added)
    return run


def progress(owner: str) -> dict:
    sync_set = get_set(owner)
    if sync_set is None or not sync_set.backfill_run:
        return {"listed": 0, "total": 0, "done": False, "records": 0}
    listed, records = sql.execute(
        "SELECT COUNT(CASE WHEN status = 'done' THEN 1 END), COALESCE(SUM(listed), 0) FROM sync_backfill_tasks"
        " WHERE owner_did = ? AND run = ? AND kind = 'backfill'", (owner, sync_set.backfill_run)).fetchone()
    return {"listed": listed, "total": sync_set.backfill_total,
            "done": sync_set.union_run >= sync_set.backfill_run, "records": int(records)}


def _store_page(task, page: list[tuple[str, str]], next_cursor: str | None, now: int) -> None:
    task_id, owner, app, kind, started_at = task
    sync_set = get_set(owner)
    for rkey, subject in page:
        if not is_valid_did(subject):
            continue  # Semble collection follows, junk: never synced
        known = queue.mirror_state(owner, app, rkey)
        born = queue.born_of_listed(rkey, now)
        queue.upsert_mirror(owner, app, rkey, subject, now, born_us=born)
        if known is None and kind == "sweep" and sync_set is not None:
            # Missed by the handler (e.g. an outage): propagate exactly as a create event would.
            have = queue.followed_on(owner, subject, staying=True)
            for other in sync_set.apps:
                if other not in have:
                    queue.enqueue_follow(owner, other, subject, "sweep", now, cause_us=born)
        elif known is not None and known[1] in ("pending", "failed", "dropped"):
            queue.set_mirror_state(owner, app, rkey, "live", now)  # the record is there after all
    # A page that arrived clears the last failure: the page shows listing trouble only while it lasts.
    sql.execute("UPDATE sync_backfill_tasks SET cursor = ?, listed = listed + ?, attempts = 0, last_error = NULL"
                " WHERE id = ?", (next_cursor, len(page), task_id))
    if next_cursor is None:
        sql.execute("UPDATE sync_backfill_tasks SET status = 'done', finished_at = ? WHERE id = ?", (now, task_id))
        # Backfill too: a set turned off and on again kept mirror rows of records deleted meanwhile,
        # and those must not count as followed (the preview, which lists afresh, does not count them).
        queue.drop_gone(owner, app, started_at, now)
        union(owner, now)


def union(owner: str, now: int) -> int:
    """Once per run, when all its listings are done: follow every subject on every app lacking it."""
    run = sql.scalar("SELECT backfill_run FROM sync_sets WHERE owner_did = ?", (owner,), default=0)
    if not store.claim_union(owner, run):
        return 0
    sync_set = get_set(owner)
    followed: dict[str, set[str]] = {}
    cause: dict[str, int] = {}  # the newest record of the subject: what the new follows stand for
    for subject, app, born in sql.rows("SELECT subject, app, born_us FROM sync_follow_mirror WHERE owner_did = ?"
                                       " AND state IN ('live', 'pending') ORDER BY subject", (owner,)):
        followed.setdefault(subject, set()).add(app)
        cause[subject] = max(cause.get(subject, 0), born)
    waiting = set(sql.rows("SELECT subject, app FROM sync_waiting WHERE owner_did = ?", (owner,)))
    queued = 0
    for subject, have in followed.items():
        for app in sync_set.apps:
            if app not in have and (subject, app) not in waiting:
                queued += queue.enqueue_follow(owner, app, subject, "backfill", now, cause_us=cause[subject])
    record_activity(owner, now, "", "backfill_done", None, 0, f"{queued} follows queued")
    return queued


def cancel_pending_tasks(owner: str) -> None:
    sql.execute("DELETE FROM sync_backfill_tasks WHERE owner_did = ? AND status = 'pending'", (owner,))


def forget_app(owner: str, app: str) -> None:
    sql.execute("DELETE FROM sync_backfill_tasks WHERE owner_did = ? AND app = ?", (owner, app))


def forget_owner(owner: str) -> None:
    sql.execute("DELETE FROM sync_backfill_tasks WHERE owner_did = ?", (owner,))


def burst(writer: FollowWriter, clock: Callable[[], int], max_tasks: int = BURST_TASKS,
          pages: int = BURST_PAGES) -> int:
    """Work the due listing tasks a few pages each; the number of pages stored."""
    now = clock()
    due = sql.rows("SELECT t.id, t.owner_did, t.app, t.kind, t.started_at FROM sync_backfill_tasks t"
                   " JOIN sync_sets s ON s.owner_did = t.owner_did WHERE t.status = 'pending' AND t.not_before <= ?"
                   " AND s.enabled = 1 ORDER BY t.id LIMIT ?", (now, max_tasks))
    stored = 0
    for task in due:
        task_id, owner, app = task[0], task[1], task[2]
        for _ in range(pages):
            cursor = sql.scalar("SELECT cursor FROM sync_backfill_tasks WHERE id = ?", (task_id,))
            try:
                page, next_cursor = writer.list_follows(owner, registry.BY_KEY[app].follow, cursor)
            except PdsError as exc:
                attempts = sql.scalar("SELECT attempts FROM sync_backfill_tasks WHERE id = ?",
                                      (task_id,), default=0) + 1
                wait = min(RETRY_CAP_SECS, pacer.backoff_secs(attempts))
                sql.execute("UPDATE sync_backfill_tasks SET attempts = ?, not_before = ?, last_error = ? WHERE id = ?",
                            (attempts, clock() + wait, str(exc)[:500], task_id))
                break
            with db.atomic():
                _store_page(task, page, next_cursor, clock())
            stored += 1
            if next_cursor is None:
                break
    return stored


def sweep_due(clock: Callable[[], int], settings, limit: int = 50) -> list[str]:
    """Start the daily sweep of every set that is due, and release waits whose re-check is due."""
    now = clock()
    started = []
    for owner in sets_due_for_sweep(now, limit):
        with db.atomic():
            sync_set = get_set(owner)
            start_run(owner, sync_set.apps, "sweep", now)
            store.schedule_sweep(owner, now + pacer.DAY)
            started.append(owner)
    recheck_waiting(now)
    return started


def recheck_waiting(now: int, limit: int = 500) -> int:
    """A due wait becomes a queued follow again; the runner's profile check decides once more."""
    due = sql.rows("SELECT w.owner_did, w.app, w.subject, w.cause_us FROM sync_waiting w JOIN sync_sets s"
                   " ON s.owner_did = w.owner_did WHERE w.next_check_at <= ? AND s.enabled = 1 AND s.paused = 0"
                   " ORDER BY w.next_check_at LIMIT ?", (now, limit))
    for owner, app, subject, cause_us in due:
        with db.atomic():
            queue.remove_waiting(owner, app, subject)
            queue.enqueue_follow(owner, app, subject, "recheck", now, cause_us=cause_us)
    return len(due)
