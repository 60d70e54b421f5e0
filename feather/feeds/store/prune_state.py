"""feed_prune_state, the prune's one row: this module alone writes it (docs/design.md, "Tables by
owner").

- The prune flag (dirty): ingest and the author fetch set it when they changed a feed
  (mark_dirty); the prune tick (tasks/prune.py) reads and clears it.
- The prune sweep's cursor and its clocks (the last slice, the last completed full pass).
- The records sweep's cursor (tasks/records_sweep.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from feather import sql


@dataclass(frozen=True)
class PruneState:
    cursor: str | None
    dirty: bool
    last_full_pass_ms: int
    last_slice_ms: int


def load() -> PruneState:
    row = sql.one("SELECT actor, dirty, last_full_pass_ms, last_slice_ms FROM feed_prune_state WHERE id = 1")
    return PruneState(row[0], bool(row[1]), int(row[2]), int(row[3]))


def mark_dirty() -> None:
    """One primary-key write, and only on the 0 → 1 edge, so busy batches do not churn the row."""
    sql.write("UPDATE feed_prune_state SET dirty = 1 WHERE id = 1 AND dirty = 0")


def clear_dirty() -> None:
    sql.execute("UPDATE feed_prune_state SET dirty = 0 WHERE id = 1")


def save_cursor(cursor: str | None) -> None:
    """Saving None clears the cursor (the next slice starts a pass from the first actor)."""
    sql.execute("UPDATE feed_prune_state SET actor = ? WHERE id = 1", (cursor,))


def stamp_slice(now_ms: int) -> None:
    sql.execute("UPDATE feed_prune_state SET last_slice_ms = ? WHERE id = 1", (now_ms,))


def stamp_full_pass(now_ms: int) -> None:
    sql.execute("UPDATE feed_prune_state SET last_full_pass_ms = ? WHERE id = 1", (now_ms,))


def records_cursor() -> tuple[str | None, str | None]:
    """The records sweep's (table short name, did) to continue after."""
    row = sql.one("SELECT records_table, records_did FROM feed_prune_state WHERE id = 1")
    return row[0], row[1]


def save_records_cursor(table: str | None, did: str | None) -> None:
    sql.execute("UPDATE feed_prune_state SET records_table = ?, records_did = ? WHERE id = 1", (table, did))
