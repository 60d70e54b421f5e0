"""Graph sync's part of "your data" (feather/personal.py) and its panel on the signed-in home page.

Everything sync keeps about an owner hangs off their sync_sets row; the tables are emptied one by one
rather than trusting ON DELETE CASCADE, so the delete does not depend on how a connection was opened.
Each table is emptied by the module that writes it, the set itself last.
"""
from __future__ import annotations

from flask import current_app, url_for

from feather import sql
from feather.personal import Holding, register_panel
from feather.personal import register as add
from feather.sync import apps as registry
from feather.sync import backfill, lanes, people, queue, service, status, store
from feather.sync.store import get_set

EXPORT_COLUMNS = {
    "sync_sets": "apps, enabled, paused, pause_reason, created_at, updated_at",
    "sync_follow_mirror": "app, rkey, subject, created_by_sync, state, last_seen_at",
    "sync_queue": "app, kind, subject, rkey, origin, status, attempts, last_error, created_at, updated_at",
    "sync_waiting": "app, subject, since, next_check_at",
    "sync_activity": "at, app, kind, subject, points, detail",
}


def _count(table: str, did: str) -> int:
    return int(sql.scalar(f"SELECT COUNT(*) FROM {table} WHERE owner_did = ?", (did,), default=0) or 0)


def _n(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def describe(did: str) -> list[str]:
    sync_set = get_set(did)
    if sync_set is None:
        return []
    state = "on" if sync_set.enabled else "off"
    lines = [f"Your choice of apps ({', '.join(sync_set.apps) or 'none'}) and whether sync is on (it is {state})."]
    mirror, queue = _count("sync_follow_mirror", did), _count("sync_queue", did)
    waiting, activity = _count("sync_waiting", did), _count("sync_activity", did)
    if mirror:
        lines.append(f"A copy of {_n(mirror, 'follow record')} on those apps (who you follow; public records).")
    if queue:
        lines.append(f"{_n(queue, 'follow or unfollow')} to write or already written (the queue).")
    if waiting:
        lines.append(f"{_n(waiting, 'follow')} waiting for someone to make a profile on an app.")
    if activity:
        lines.append(f"{_n(activity, 'line')} of activity log (what was written, when, and any error).")
    return lines


def export(did: str) -> dict:
    out = {}
    for table, columns in EXPORT_COLUMNS.items():
        names = [c.strip() for c in columns.split(",")]
        out[table.removeprefix("sync_")] = [dict(zip(names, r)) for r in sql.rows(
            f"SELECT {columns} FROM {table} WHERE owner_did = ?", (did,))]
    return out


def delete(did: str) -> None:
    queue.forget_owner(did)  # the queue, waiting list, mirror and observed deletes
    backfill.forget_owner(did)
    lanes.forget_owner(did)
    status.forget_following(did)
    store.forget_owner(did)  # the activity log, then the set
    people.forget(did)


def panel(account):
    """Home: sync's state and its newest activity line, with the way to the owner's page."""
    settings = current_app.config["FEATHER"]
    if len(registry.offered(settings)) < 2:
        return None
    sync_set = get_set(account.did)
    newest = service.activity(account.did, 1)
    return "sync/_home.html", {
        "set": sync_set, "apps": status.app_names(sync_set.apps) if sync_set else "",
        "pause_words": status.pause_words(sync_set.pause_reason) if sync_set else "",
        "newest": newest[0] if newest else None,
        "url": url_for("sync.manage", handle=account.handle or account.did)}


def register(app) -> None:
    add(app, Holding("sync", "Graph sync", describe, export, delete, order=20))
    register_panel(app, panel, order=20)
