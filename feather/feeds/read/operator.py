"""The timelines' figures for /admin (the operator_status hook): how many actors have a timeline,
how many rows the timelines hold, and when the prune last ran. Counts, never contents."""
from __future__ import annotations

from feather import sql
from feather.db import db
from feather.feeds.store import prune_state

# A full index holds tens of millions of feed rows, and an exact count reads every one of them
# on each /admin load; past this many the page says "over". Distinct actors are counted by
# seeking from one actor's key to the next (one index probe each), not by walking their rows.
COUNT_CAP = 1_000_000
ACTORS_SQL = ("WITH RECURSIVE a(actor, n) AS (SELECT min(actor), 1 FROM feed_items"
              " UNION ALL SELECT (SELECT min(f.actor) FROM feed_items f WHERE f.actor > a.actor), a.n + 1"
              " FROM a WHERE a.actor IS NOT NULL AND a.n <= ?) SELECT count(actor) FROM a")


def _capped(n: int) -> str | int:
    return f"over {COUNT_CAP:,}" if n > COUNT_CAP else n


def status() -> dict | None:
    """None on a database the migrations have not reached yet."""
    tables = set(db.get_tables())
    if "feed_items" not in tables:
        return None
    prune = prune_state.load() if "feed_prune_state" in tables else None
    return {
        "actors": _capped(sql.one(ACTORS_SQL, (COUNT_CAP,))[0]),
        "rows": _capped(sql.one("SELECT count(*) FROM (SELECT 1 FROM feed_items LIMIT ?) t", (COUNT_CAP + 1,))[0]),
        "last_full_prune_at": (prune.last_full_pass_ms / 1000) if prune and prune.last_full_pass_ms else None,
        "last_prune_slice_at": (prune.last_slice_ms / 1000) if prune and prune.last_slice_ms else None,
    }
