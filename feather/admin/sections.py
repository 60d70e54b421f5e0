"""The facts on /admin that live in the sync and timeline tables, read with plain read-only SQL.

The status page is core, not a feature: it reads these tables directly rather than importing
the features (which never import each other, and which it must not couple to). The catalogue is
the exception: its tables are read only inside feather/network, which hands /admin its figures
through the operator_status hook. Every query is a count or a small aggregate, and each section
survives its tables being absent (a feature turned off, an older schema).
"""
from __future__ import annotations

from feather import sql
from feather.db import current_dialect


def sync(settings, tables: set[str], now: int | None = None) -> dict | None:
    if "sync_sets" not in tables:
        return None
    now = sql.now_s() if now is None else now
    sets = sql.one("SELECT count(*), coalesce(sum(CASE WHEN enabled = 1 THEN 1 ELSE 0 END), 0),"
                   " coalesce(sum(CASE WHEN paused = 1 THEN 1 ELSE 0 END), 0),"
                   " coalesce(sum(CASE WHEN parked_until > ? THEN 1 ELSE 0 END), 0) FROM sync_sets", (now,))
    queue = dict(sql.rows("SELECT status, count(*) FROM sync_queue WHERE status IN ('pending', 'sending')"
                          " GROUP BY status"))
    lanes = sql.one("SELECT count(*) FROM sync_lanes WHERE leased_by IS NOT NULL AND lease_until >= ?", (now,))[0] \
        if "sync_lanes" in tables else 0
    # Waiting on the points budget: accounts with pending writes whose rolling hour or day has no
    # room left for a follow (3 points; sync's pacer rule). A 429 parks the whole account
    # (parked_until), counted as rate_limited above.
    spent = "(SELECT coalesce(sum(a.points), 0) FROM sync_activity a WHERE a.owner_did = p.owner_did AND a.at > ?)"
    budget = sql.one(f"SELECT count(*) FROM (SELECT DISTINCT owner_did FROM sync_queue WHERE status = 'pending') p"
                     f" WHERE {spent} + 3 > ? OR {spent} + 3 > ?",
                     (now - 3600, settings.sync_hourly_points, now - 86400, settings.sync_daily_points))[0]
    failed = sql.one("SELECT count(*) FROM sync_queue WHERE status = 'failed' AND updated_at >= ?",
                     (now - 86400,))[0]
    return {"sets": sets[0], "enabled": sets[1], "paused": sets[2], "rate_limited": sets[3],
            "queue_pending": queue.get("pending", 0), "queue_sending": queue.get("sending", 0),
            "lanes_running": lanes, "waiting_on_budget": budget, "failed_last_day": failed}


# A full index holds tens of millions of feed rows, and an exact count reads every one of them
# on each /admin load; past this many the page says "over". Distinct actors are counted by
# seeking from one actor's key to the next (one index probe each), not by walking their rows.
COUNT_CAP = 1_000_000
ACTORS_SQL = ("WITH RECURSIVE a(actor, n) AS (SELECT min(actor), 1 FROM feed_items"
              " UNION ALL SELECT (SELECT min(f.actor) FROM feed_items f WHERE f.actor > a.actor), a.n + 1"
              " FROM a WHERE a.actor IS NOT NULL AND a.n <= ?) SELECT count(actor) FROM a")


def _capped(n: int) -> str | int:
    return f"over {COUNT_CAP:,}" if n > COUNT_CAP else n


def timelines(tables: set[str]) -> dict | None:
    if "feed_items" not in tables:
        return None
    prune = sql.one("SELECT last_full_pass_ms, last_slice_ms, dirty FROM feed_prune_state WHERE id = 1") \
        if "feed_prune_state" in tables else None
    return {
        "actors": _capped(sql.one(ACTORS_SQL, (COUNT_CAP,))[0]),
        "rows": _capped(sql.one("SELECT count(*) FROM (SELECT 1 FROM feed_items LIMIT ?) t", (COUNT_CAP + 1,))[0]),
        "last_full_prune_at": (prune[0] / 1000) if prune and prune[0] else None,
        "last_prune_slice_at": (prune[1] / 1000) if prune and prune[1] else None,
    }


def database(settings) -> dict:
    size = int(sql.one(current_dialect().size_bytes_sql())[0])
    limit = settings.featherreader_db_size_watermark_bytes
    return {"size_bytes": size, "watermark_bytes": limit or None,
            "percent_of_watermark": round(100 * size / limit, 1) if limit else None,
            "engine": current_dialect().name}
