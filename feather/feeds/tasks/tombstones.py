"""The tombstone sweep (the `feeds-tombstones` job): forget deletes no replay can meet again.

A tombstone (feed_tombstones) keeps a replayed write from before a record's delete from bringing
it back (plan.py). Once the ingest cursor is far past it, no reconnect replays that far back.
"""
from __future__ import annotations

from feather.db import db
from feather.feeds.store import records, serial
from feather.jetstream import store

TOMBSTONE_MARGIN_US = 600_000_000  # far behind any replay: a reconnect resumes 5 s before the cursor


def sweep_tombstones(streams=("global",)) -> int:
    """Tombstones older than the oldest cursor of the streams that carry the feeds' collections
    (minus a margin) can never meet a replay again."""
    saved = [row.time_us for row in store.cursor_rows() if row.name in set(streams) and row.time_us > 0]
    if not saved:
        return 0
    with db.atomic():
        serial.lock_writes()
        return records.sweep_tombstones(min(saved) - TOMBSTONE_MARGIN_US)
