"""The sync set: one row per owner (its apps, on/off, pause, parking, backfill runs), the activity
log, and shard membership. The one module that writes sync_sets and sync_activity.

Times are Unix seconds passed in by the caller (`now`), so every rule can be tested with a fake
clock. Shard membership is computed in Python from a stable hash of the DID, so changing
SYNC_SHARD_COUNT needs no migration (what it does to the shard cursors: shards.py).
"""
from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass

from feather import sql
from feather.db import current_dialect
from feather.sync import queue

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SyncSet:
    owner_did: str
    apps: tuple[str, ...]
    enabled: bool
    paused: bool
    paused_at: int | None
    pause_reason: str | None
    auth_failures: int
    parked_until: int
    backfill_run: int
    backfill_total: int
    union_run: int
    next_sweep_at: int


_SET_COLUMNS = ("owner_did, apps, enabled, paused, paused_at, pause_reason, auth_failures, parked_until,"
                " backfill_run, backfill_total, union_run, next_sweep_at")


def _set(row) -> SyncSet:
    apps = tuple(k for k in (row[1] or "").split(",") if k)
    return SyncSet(row[0], apps, bool(row[2]), bool(row[3]), row[4], row[5], row[6], row[7], row[8], row[9],
                   row[10], row[11])


def get_set(owner: str) -> SyncSet | None:
    found = sql.rows(f"SELECT {_SET_COLUMNS} FROM sync_sets WHERE owner_did = ?", (owner,))
    return _set(found[0]) if found else None


def ensure_set(owner: str, now: int) -> SyncSet:
    sql.execute("INSERT INTO sync_sets (owner_did, created_at, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (owner_did) DO NOTHING", (owner, now, now))
    return get_set(owner)


def set_apps(owner: str, keys: list[str], now: int) -> SyncSet:
    ensure_set(owner, now)
    sql.execute("UPDATE sync_sets SET apps = ?, updated_at = ? WHERE owner_did = ?", (",".join(keys), now, owner))
    return get_set(owner)


def set_enabled(owner: str, enabled: bool, now: int) -> None:
    sql.execute("UPDATE sync_sets SET enabled = ?, paused = 0, paused_at = NULL, pause_reason = NULL,"
                " auth_failures = 0, updated_at = ? WHERE owner_did = ?", (int(enabled), now, owner))


def pause(owner: str, reason: str, now: int) -> bool:
    """Pause the set (it stays subscribed, so its events keep queuing in order). True if it changed."""
    cur = sql.execute("UPDATE sync_sets SET paused = 1, paused_at = ?, pause_reason = ?, updated_at = ?"
                      " WHERE owner_did = ? AND paused = 0", (now, reason, now, owner))
    if cur.rowcount:
        record_activity(owner, now, "", "paused", None, 0, reason)
        log.info("sync: paused %s (%s)", owner, reason)
    return bool(cur.rowcount)


def resume(owner: str, now: int) -> bool:
    """Sign-in again: resume, let every parked row go now, and make a sweep due."""
    cur = sql.execute("UPDATE sync_sets SET paused = 0, paused_at = NULL, pause_reason = NULL, auth_failures = 0,"
                      " parked_until = 0, next_sweep_at = ?, updated_at = ? WHERE owner_did = ? AND paused = 1",
                      (now, now, owner))
    if not cur.rowcount:
        return False
    queue.release_parked(owner)
    record_activity(owner, now, "", "resumed", None, 0, None)
    return True


def park_account(owner: str, until: int, now: int) -> None:
    sql.execute(f"UPDATE sync_sets SET parked_until = {current_dialect().greatest('parked_until', '?')},"
                " updated_at = ? WHERE owner_did = ?", (until, now, owner))


def record_activity(owner: str, at: int, app: str, kind: str, subject: str | None, points: int,
                    detail: str | None) -> None:
    sql.execute("INSERT INTO sync_activity (owner_did, at, app, kind, subject, points, detail)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)", (owner, at, app, kind, subject, points, detail))


def touch(owner: str, now: int) -> None:
    """Write the set's row first in a transaction: the row lock serialises the owner's lanes on
    PostgreSQL (SQLite serialises every writer anyway)."""
    sql.execute("UPDATE sync_sets SET updated_at = ? WHERE owner_did = ?", (now, owner))


def schedule_sweep(owner: str, at: int) -> None:
    sql.execute("UPDATE sync_sets SET next_sweep_at = ? WHERE owner_did = ?", (at, owner))


def sweep_everyone_now() -> None:
    sql.execute("UPDATE sync_sets SET next_sweep_at = 0 WHERE enabled = 1")


def clear_auth_failures(owner: str) -> None:
    sql.execute("UPDATE sync_sets SET auth_failures = 0 WHERE owner_did = ? AND auth_failures > 0", (owner,))


def count_auth_failure(owner: str) -> int:
    """One more refusal of sync's credentials in a row; the streak so far."""
    sql.execute("UPDATE sync_sets SET auth_failures = auth_failures + 1 WHERE owner_did = ?", (owner,))
    return sql.scalar("SELECT auth_failures FROM sync_sets WHERE owner_did = ?", (owner,), default=0)


# --- backfill runs (feather/sync/backfill.py runs them)
def next_backfill_run(owner: str) -> None:
    sql.execute("UPDATE sync_sets SET backfill_run = backfill_run + 1, backfill_total = 0 WHERE owner_did = ?",
                (owner,))


def set_backfill_total(owner: str, total: int) -> None:
    sql.execute("UPDATE sync_sets SET backfill_total = ? WHERE owner_did = ?", (total, owner))


def claim_union(owner: str, run: int) -> bool:
    """Once per run, when all its listings are done: True for the one caller that may run the union."""
    return bool(sql.execute(
        "UPDATE sync_sets SET union_run = backfill_run WHERE owner_did = ? AND union_run < backfill_run"
        " AND NOT EXISTS (SELECT 1 FROM sync_backfill_tasks t WHERE t.owner_did = ? AND t.run = ?"
        " AND t.kind = 'backfill' AND t.status <> 'done')", (owner, owner, run)).rowcount)


# --- the activity log (what sync did, and the points each write spent: feather/sync/pacer.py)
def settle_sending(owner: str, app: str, kind: str | None, detail: str | None = None) -> None:
    """Relabel the in-flight `sending` row as `kind` (its points kept), or drop it (kind None: a refund)."""
    if kind is None:
        sql.execute("DELETE FROM sync_activity WHERE owner_did = ? AND app = ? AND kind = 'sending'", (owner, app))
    else:
        sql.execute("UPDATE sync_activity SET kind = ?, detail = ? WHERE owner_did = ? AND app = ?"
                    " AND kind = 'sending'", (kind, detail, owner, app))


def interrupt_sending(owner: str, app: str) -> None:
    """A `sending` row still there is a write a crash interrupted: it keeps its points."""
    sql.execute("UPDATE sync_activity SET kind = 'interrupted' WHERE owner_did = ? AND app = ? AND kind = 'sending'",
                (owner, app))


def forget_activity_before(horizon: int) -> None:
    sql.execute("DELETE FROM sync_activity WHERE at < ?", (horizon,))


def forget_owner(owner: str) -> None:
    """The owner's activity log, then the set itself (the tables hanging off it go first: personal.py)."""
    sql.execute("DELETE FROM sync_activity WHERE owner_did = ?", (owner,))
    sql.execute("DELETE FROM sync_sets WHERE owner_did = ?", (owner,))


# --- shards
def shard_of(did: str, count: int) -> int:
    """Stable across processes and restarts (Python's hash() is salted per process)."""
    return zlib.crc32(did.encode()) % max(1, count)


def shard_members(shard: int, count: int) -> list[str]:
    """Every enabled owner hashed to this shard, paused ones included (their events keep queuing)."""
    owners = [r[0] for r in sql.rows("SELECT owner_did FROM sync_sets WHERE enabled = 1")]
    return sorted(o for o in owners if shard_of(o, count) == shard)


def sets_due_for_sweep(now: int, limit: int) -> list[str]:
    return [r[0] for r in sql.rows("SELECT owner_did FROM sync_sets WHERE enabled = 1 AND paused = 0"
                                   " AND next_sweep_at <= ? ORDER BY next_sweep_at LIMIT ?", (now, limit))]
