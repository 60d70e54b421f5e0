"""The facts on /admin that the features do not report themselves: timelines and the database.

The catalogue and graph sync hand /admin their figures through the operator_status hook
(feather/features.py), reading their own tables. The timelines section still reads the feeds
tables here, with plain read-only SQL, until feeds reports through the hook too. Every query is a
count or a small aggregate, and each section survives its tables being absent (an older schema).
"""
from __future__ import annotations

from feather import sql
from feather.db import current_dialect

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
