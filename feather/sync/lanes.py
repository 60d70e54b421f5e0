"""Lane leases (table sync_lanes): at most MAX_LANES lanes run across the whole cluster.

Every worker process ticks its own runner; a tick first leases up to MAX_LANES − (live leases
cluster-wide) free lanes in one short transaction. A lease is renewed before each row and cleared
when the lane finishes. A dead process's leases expire after LEASE_SECS and another takes them,
or at once when the dead process ran on the same machine and namespace (feather/locks.py): a
restart after a `kill -9` then writes again at its first tick instead of a minute later.
"""
from __future__ import annotations

import logging
import os

from feather import locks, sql
from feather.db import current_dialect, db
from feather.locks import lock_key

log = logging.getLogger(__name__)

MAX_LANES = 8
LEASE_SECS = 60  # a lane lease lives this long unless renewed (one row's network calls take far less)

# Each runnable lane's head row (owner_did, app, id); parameters: now, now.
_RUNNABLE = ("SELECT h.owner_did, h.app, h.id FROM sync_queue h WHERE h.not_before <= ? AND h.id IN ("
             " SELECT MIN(q.id) FROM sync_queue q JOIN sync_sets s ON s.owner_did = q.owner_did"
             " WHERE q.status = 'pending' AND s.enabled = 1 AND s.paused = 0 AND s.parked_until <= ?"
             " GROUP BY q.owner_did, q.app)")


_process: tuple[int, str] = (0, "")


def process_id() -> str:
    """This process's lease-holder name (recomputed after a fork, so forked children differ)."""
    global _process
    if _process[0] != os.getpid():
        _process = (os.getpid(), locks.holder_name())
    return _process[1]


def _lease_lock_key() -> int:
    return lock_key("sync-lanes")


def lease_lanes(holder: str, now: int, max_lanes: int = MAX_LANES) -> list[tuple[str, str]]:
    """Lease up to max_lanes − (live leases cluster-wide) runnable lanes to holder, oldest head first.

    One short transaction: serialise with other leasing ticks (PostgreSQL advisory transaction
    lock), add a sync_lanes row for every runnable lane that has none, free the leases of holders
    that are provably gone (free_dead_holders), count the live leases, claim
    free lanes (`FOR UPDATE SKIP LOCKED` on PostgreSQL: a lane row another transaction holds is
    passed over, never waited for) and stamp them with holder and now + LEASE_SECS.
    """
    d = current_dialect()
    with db.atomic():
        lock = d.xact_lock_sql(_lease_lock_key())
        if lock:
            sql.execute(lock)
        sql.execute(f"INSERT INTO sync_lanes (owner_did, app) SELECT r.owner_did, r.app FROM ({_RUNNABLE}) r"
                    f" WHERE NOT EXISTS (SELECT 1 FROM sync_lanes l WHERE l.owner_did = r.owner_did AND l.app = r.app)"
                    f" ORDER BY r.owner_did, r.app ON CONFLICT (owner_did, app) DO NOTHING", (now, now))
        free_dead_holders(now)
        live = sql.scalar("SELECT COUNT(*) FROM sync_lanes WHERE lease_until >= ?", (now,), default=0)
        free = max_lanes - live
        if free <= 0:
            return []
        found = sql.rows(f"SELECT l.owner_did, l.app FROM sync_lanes l JOIN ({_RUNNABLE}) r"
                         f" ON r.owner_did = l.owner_did AND r.app = l.app WHERE l.lease_until < ?"
                         f" ORDER BY r.id LIMIT ?{d.skip_locked('l')}", (now, now, now, free))
        for owner, app in found:
            sql.execute("UPDATE sync_lanes SET leased_by = ?, lease_until = ? WHERE owner_did = ? AND app = ?",
                        (holder, now + LEASE_SECS, owner, app))
    return [(r[0], r[1]) for r in found]


def free_dead_holders(now: int) -> None:
    """Clear the live leases of holders that are provably gone (each one logged)."""
    holders = sql.rows("SELECT DISTINCT leased_by FROM sync_lanes WHERE leased_by IS NOT NULL AND lease_until >= ?"
                       " ORDER BY leased_by", (now,))
    for (holder,) in holders:
        if locks.gone(holder):
            n = sql.execute("UPDATE sync_lanes SET leased_by = NULL, lease_until = 0 WHERE leased_by = ?",
                            (holder,)).rowcount
            log.warning("sync: freed %d lane lease(s) of %s at once: that process is gone", n, holder)


def renew_lease(holder: str, owner: str, app: str, now: int) -> bool:
    """Extend holder's lease on the lane; False when holder no longer holds it (expired and taken)."""
    return sql.execute("UPDATE sync_lanes SET lease_until = ? WHERE owner_did = ? AND app = ? AND leased_by = ?",
                       (now + LEASE_SECS, owner, app, holder)).rowcount == 1


def forget_idle(now: int) -> None:
    """Lane rows left behind by a process that died holding them, once they have no pending work."""
    sql.execute("DELETE FROM sync_lanes WHERE lease_until < ? AND NOT EXISTS (SELECT 1 FROM sync_queue q"
                " WHERE q.owner_did = sync_lanes.owner_did AND q.app = sync_lanes.app AND q.status = 'pending')",
                (now,))


def forget_owner(owner: str) -> None:
    sql.execute("DELETE FROM sync_lanes WHERE owner_did = ?", (owner,))


def release_lease(holder: str, owner: str, app: str) -> None:
    """Free the lane; drop its row when it has no pending work left (the next tick re-adds it if needed)."""
    with db.atomic():
        sql.execute("DELETE FROM sync_lanes WHERE owner_did = ? AND app = ? AND leased_by = ? AND NOT EXISTS ("
                    " SELECT 1 FROM sync_queue q WHERE q.owner_did = ? AND q.app = ? AND q.status = 'pending')",
                    (owner, app, holder, owner, app))
        sql.execute("UPDATE sync_lanes SET leased_by = NULL, lease_until = 0 WHERE owner_did = ? AND app = ?"
                    " AND leased_by = ?", (owner, app, holder))
