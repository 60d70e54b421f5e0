"""What the owner can do (the page and the JSON API call these), the state they see, and cleanup.

One contract for both surfaces: `configure(owner, enabled=…, paused=…, apps=…)` returns `state()`.
"""
from __future__ import annotations

from feather import sql
from feather.db import current_dialect, db
from feather.jetstream import subscriptions
from feather.locks import lock_key
from feather.sync import apps as registry
from feather.sync import backfill, lanes, pacer, people, queue, status
from feather.sync.store import (
    ensure_set,
    forget_activity_before,
    get_set,
    pause,
    record_activity,
    resume,
    schedule_sweep,
    set_apps,
    set_enabled,
    shard_members,
    shard_of,
)

PAUSED_BY_YOU = "paused by you"
PAUSED_CANCEL_DAYS = 30
KEEP_HISTORY_DAYS = 30
TOMBSTONE_SECS = 2 * pacer.DAY  # longer than the Jetstream lookback, so a late echo still finds it


def state(owner: str, settings, now: int | None = None) -> dict:
    """The counters (unchanged since the first API) and what explains them: per_app, next_write and
    problems (feather/sync/status.py; docs/api.md, "Graph sync")."""
    sync_set = get_set(owner)
    return {
        "enabled": bool(sync_set and sync_set.enabled),
        "paused": bool(sync_set and sync_set.paused),
        "pause_reason": sync_set.pause_reason if sync_set else None,
        "apps": list(sync_set.apps) if sync_set else [],
        "available_apps": registry.offered_keys(settings),
        "backfill": {k: v for k, v in backfill.progress(owner).items() if k in ("listed", "total", "done")},
        "queue": queue.counts(owner),
        "waiting": queue.waiting_count(owner),
        **status.overview(owner, sync_set, settings, sql.now_s() if now is None else now),
    }


def configure(owner: str, settings, now: int, *, enabled: bool | None = None, paused: bool | None = None,
              apps: list[str] | None = None) -> dict:
    """Apply any of the three changes in one transaction. Raises ValueError for a bad app list."""
    keys = registry.normalize_keys(apps, settings) if apps is not None else None
    with db.atomic():
        before = ensure_set(owner, now)
        if keys is not None and tuple(keys) != before.apps:
            _change_apps(owner, before, keys, now)
        current = get_set(owner)
        if enabled is True and not current.enabled:
            if len(current.apps) < 2:
                raise ValueError("Choose at least two apps to keep in sync.")
            _check_capacity(owner, settings)
            set_enabled(owner, True, now)
            schedule_sweep(owner, now + pacer.DAY)
            backfill.start_run(owner, current.apps, "backfill", now)
            record_activity(owner, now, "", "enabled", None, 0, ",".join(current.apps))
        elif enabled is False and current.enabled:
            set_enabled(owner, False, now)
            queue.cancel_pending(owner, now)
            backfill.cancel_pending_tasks(owner)
            # What sync had in flight or waiting is not a follow the owner has: turned on again, the
            # fresh listing decides (a write that landed is found and becomes live again), so the
            # backfill queues exactly what the preview, which lists afresh, promises.
            queue.fail_pending_mirror(owner)
            queue.forget_all_waiting(owner)
            record_activity(owner, now, "", "disabled", None, 0, None)
        if paused is True:
            pause(owner, PAUSED_BY_YOU, now)
        elif paused is False:
            resume(owner, now)
    return state(owner, settings)


class InstanceFull(ValueError):
    """The owner's shard already holds as many DIDs as one Jetstream subscription takes."""


def _check_capacity(owner: str, settings) -> None:
    """Enabling never puts more than MAX_DIDS owners in one shard subscription (Jetstream refuses
    more, and the whole shard would stop). Serialised on PostgreSQL so two enables cannot both
    take the last place; SQLite serialises writers anyway."""
    lock = current_dialect().xact_lock_sql(lock_key("sync-capacity"))
    if lock:
        sql.execute(lock)
    count = settings.sync_shard_count
    if len(shard_members(shard_of(owner, count), count)) >= subscriptions.MAX_DIDS:
        raise InstanceFull("This instance is full: it already syncs as many accounts as it can follow "
                           "on the stream. Ask its operator to raise SYNC_SHARD_COUNT, then try again.")


def resume_after_sign_in(owner: str, now: int) -> bool:
    """Signing in again resumes a set that paused because its session was gone or refused (never
    one the owner paused): resume() lets every parked row go, and makes a sweep due now."""
    with db.atomic():
        sync_set = get_set(owner)
        if sync_set is None or not sync_set.enabled or not sync_set.paused or sync_set.pause_reason == PAUSED_BY_YOU:
            return False
        return resume(owner, now)


def _change_apps(owner: str, before, keys: list[str], now: int) -> None:
    removed = [k for k in before.apps if k not in keys]
    added = [k for k in keys if k not in before.apps]
    if before.enabled and len(keys) < 2:
        raise ValueError("A set that is on needs at least two apps; turn sync off first.")
    set_apps(owner, keys, now)
    for key in removed:  # forget the app entirely: its records no longer count as "followed somewhere"
        queue.cancel_pending(owner, now, app=key)
        queue.forget_app(owner, key)
        backfill.forget_app(owner, key)
    if before.enabled and added:
        backfill.start_run(owner, added, "backfill", now)


def write_scopes(keys) -> list[str]:
    """The OAuth permissions sync writes with: create and delete on each app's follow collection."""
    return [f"repo:{registry.BY_KEY[k].follow}?action=create&action=delete" for k in keys]


def check_change(owner: str, settings, *, enabled: bool | None = None, paused: bool | None = None,
                 apps: list[str] | None = None) -> list[str]:
    """Validate a change before anything is stored, for the page and the API alike. Returns the write
    scopes the change needs granted first (empty when it starts no writes). Raises ValueError."""
    current = get_set(owner)
    keys = registry.normalize_keys(apps, settings) if apps is not None else list(current.apps if current else ())
    on_before = bool(current and current.enabled)
    on_after = on_before if enabled is None else enabled
    if paused is not None and not on_after:
        raise ValueError("Sync is off, so there is nothing to pause or resume.")
    if on_after and len(keys) < 2:
        raise ValueError("Choose at least two apps to keep in sync.")
    # Writes start when sync is turned on, when apps are added (their backfill), and on resume.
    starts = on_after and (not on_before or bool(set(keys) - set(current.apps))
                           or (paused is False and current.paused))
    return write_scopes(keys) if starts else []


def activity(owner: str, limit: int = 50, now: int | None = None) -> list[dict]:
    """The newest rows, every kind (an attempt in flight or interrupted is shown, never hidden), each
    with `message`: a plain sentence naming people by handle (status.activity_words). The list's
    `groups` are the page's lines: consecutive rows that differ only by the person, as one line
    with the names (status.group_activity; the list is a status.Activity)."""
    now = sql.now_s() if now is None else now
    found = [dict(zip(("id", "at", "app", "kind", "subject", "points", "detail"), r)) for r in sql.rows(
        "SELECT id, at, app, kind, subject, points, detail FROM sync_activity WHERE owner_did = ?"
        " ORDER BY at DESC, id DESC LIMIT ?", (owner, limit))]
    names = people.labels([a["subject"] for a in found], now)
    retries = _retry_context(owner, [a for a in found if a["kind"] in ("retry", "error")])
    sync_set = get_set(owner)
    parked = sync_set.parked_until if sync_set else 0
    newest_park = next((a["id"] for a in found if a["kind"] == "rate_limited"), None)
    context = {a["id"]: (retries.get(a["id"]), parked if a["id"] == newest_park else 0) for a in found}

    def words(row: dict, who: str | None = None) -> str:
        known = names if who is None else {row["subject"] or "": who}
        return status.activity_words(row, known, now, *context[row["id"]])

    for a in found:
        a["message"] = words(a)
    out = status.Activity(found)
    out.groups = status.group_activity(found, names, words)
    for a in found:
        del a["id"]
    return out


def _retry_context(owner: str, failed: list[dict]) -> dict[int, dict]:
    """For each retry/error row: which try it was (failed tries since the subject's last outcome on
    that app) and, for the newest one, the queue row's reason and next try while it is pending."""
    if not failed:
        return {}
    subjects = sorted({a["subject"] for a in failed})
    marks = ", ".join("?" * len(subjects))
    history = sql.rows(f"SELECT id, app, subject, kind FROM sync_activity WHERE owner_did = ? AND subject IN ({marks})"
                       f" AND kind IN ('retry', 'error', 'follow', 'unfollow', 'failed', 'waiting') ORDER BY id",
                       (owner, *subjects))
    tries, count = {}, {}
    for row_id, app, subject, kind in history:
        key = (app, subject)
        count[key] = count.get(key, 0) + 1 if kind in ("retry", "error") else 0
        tries[row_id] = count[key]
    pending = {(r[0], r[1]): r[2:] for r in sql.rows(
        f"SELECT app, subject, last_error, not_before FROM sync_queue WHERE owner_did = ? AND status = 'pending'"
        f" AND attempts > 0 AND subject IN ({marks}) ORDER BY id", (owner, *subjects))}
    out, newest = {}, set()
    for a in failed:  # newest first
        key = (a["app"], a["subject"])
        context = {"try": tries.get(a["id"]), "reason": None, "next_at": None}
        if key not in newest and key in pending:
            context["reason"], context["next_at"] = pending[key]
        newest.add(key)
        out[a["id"]] = context
    return out


def cleanup(now: int, lookback_us: int = 0) -> dict:
    """Cancel the pending rows of sets paused 30 days; trim tombstones and old history.
    Observed deletes are kept for the replay window and the lookback (with a day to spare)."""
    stale = [r[0] for r in sql.rows("SELECT owner_did FROM sync_sets WHERE paused = 1 AND paused_at <= ?",
                                    (now - PAUSED_CANCEL_DAYS * pacer.DAY,))]
    cancelled = 0
    for owner in stale:
        cancelled += queue.cancel_pending(owner, now, reason=f"paused for {PAUSED_CANCEL_DAYS} days")
    keep = max(TOMBSTONE_SECS, lookback_us // 1_000_000 + pacer.DAY)
    horizon = now - KEEP_HISTORY_DAYS * pacer.DAY
    tombstones = queue.trim(now, keep, horizon)
    forget_activity_before(horizon)
    lanes.forget_idle(now)
    return {"cancelled": cancelled, "tombstones": tombstones}
