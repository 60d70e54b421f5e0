"""Graph sync's figures for the operator's status page (/admin): counts only, no DID.

Sync's tables are read inside the feature; /admin asks for these numbers through the
`operator_status` hook in feather/features.py. The budget figure applies the pacer's own rule
(pacer.CREATE_POINTS against both rolling windows), so the page cannot drift from what the
runner does.
"""
from __future__ import annotations

from feather import sql
from feather.db import db
from feather.sync import pacer

# Points an owner spent inside a window; `p` is the owner row of the query it is put into.
_SPENT = "(SELECT coalesce(sum(a.points), 0) FROM sync_activity a WHERE a.owner_did = p.owner_did AND a.at > ?)"


def status(settings, now: int | None = None) -> dict | None:
    """None until sync's tables exist (an older schema): /admin then leaves the section out."""
    tables = set(db.get_tables())
    if "sync_sets" not in tables:
        return None
    now = sql.now_s() if now is None else now
    sets = sql.one("SELECT count(*), coalesce(sum(CASE WHEN enabled = 1 THEN 1 ELSE 0 END), 0),"
                   " coalesce(sum(CASE WHEN paused = 1 THEN 1 ELSE 0 END), 0),"
                   " coalesce(sum(CASE WHEN parked_until > ? THEN 1 ELSE 0 END), 0) FROM sync_sets", (now,))
    queue = dict(sql.rows("SELECT status, count(*) FROM sync_queue WHERE status IN ('pending', 'sending')"
                          " GROUP BY status"))
    lanes = sql.scalar("SELECT count(*) FROM sync_lanes WHERE leased_by IS NOT NULL AND lease_until >= ?", (now,),
                       default=0) if "sync_lanes" in tables else 0
    # Waiting on the points budget: accounts with pending writes whose rolling hour or day has no
    # room left for a follow (Budget.allows). A 429 parks the whole account (parked_until), which
    # is counted as rate_limited instead.
    budget = sql.scalar(f"SELECT count(*) FROM (SELECT DISTINCT owner_did FROM sync_queue WHERE status = 'pending') p"
                        f" WHERE {_SPENT} + ? > ? OR {_SPENT} + ? > ?",
                        (now - pacer.HOUR, pacer.CREATE_POINTS, settings.sync_hourly_points,
                         now - pacer.DAY, pacer.CREATE_POINTS, settings.sync_daily_points), default=0)
    failed = sql.scalar("SELECT count(*) FROM sync_queue WHERE status = 'failed' AND updated_at >= ?",
                        (now - pacer.DAY,), default=0)
    return {"sets": sets[0], "enabled": sets[1], "paused": sets[2], "rate_limited": sets[3],
            "queue_pending": queue.get("pending", 0), "queue_sending": queue.get("sending", 0),
            "lanes_running": lanes, "waiting_on_budget": budget, "failed_last_day": failed}
