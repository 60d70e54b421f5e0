"""The batch transaction: every handler's writes and the cursor that covers them, together.

This module alone writes `jetstream_cursor`: a cursor moves forward (`save_cursor`) except by the
deliberate rewinds (`rewind_cursor`: a resharding, a narrow shard whose new members must be
replayed) and the hand-over between streams that take turns (`place_cursor`), and is forgotten
only by `forget_cursor`.
"""
from __future__ import annotations

from dataclasses import dataclass

from feather import sql
from feather.db import checkpoint_soon, current_dialect, db
from feather.jetstream.events import Event
from feather.jetstream.subscriptions import Subscription


@dataclass(frozen=True)
class Cursor:
    time_us: int
    seq: int | None = None


# Legacy hosts resume by time, and events sharing a microsecond may straddle the saved cursor:
# rewind this far and let the idempotent handlers absorb the overlap.
REPLAY_OVERLAP_US = 5_000_000


def resume_point(applied: Cursor | None, first_seen: Cursor | None, lookback_us: int | None,
                 now_us: int) -> tuple[int | None, int | None]:
    """(cursor to connect with or None for live tail, saved time_us that fell out of the host's
    lookback window or None). Pure: the caller reports a gap."""
    if (applied is None or applied.time_us <= 0) and first_seen is not None:
        # Nothing applied yet, but we did start receiving: never fall back to live tail, which
        # would silently skip whatever was received and not yet written.
        return (first_seen.seq or max(0, first_seen.time_us - REPLAY_OVERLAP_US)), None
    if applied is None or applied.time_us <= 0:
        return None, None
    # Judged by its time on every host: a v2 cursor carries the applied event's time_us too, and a
    # sequence older than the window is as much a gap as a legacy time is. The window's start is a
    # time, which a v2 host reads as one (any cursor of 10^15 or more).
    if lookback_us and applied.time_us < now_us - lookback_us:
        return now_us - lookback_us, applied.time_us
    if applied.seq:
        return applied.seq, None  # v2 hosts: resume by sequence, exact and inclusive
    return applied.time_us - REPLAY_OVERLAP_US, None


def load_cursor(name: str) -> Cursor | None:
    row = sql.one("SELECT time_us, seq FROM jetstream_cursor WHERE name = ?", (name,))
    return Cursor(row[0], row[1]) if row else None


@dataclass(frozen=True)
class CursorRow:
    """One saved position as operators see it (`/health`, `/admin`)."""
    name: str
    time_us: int
    last_applied_at: int | None
    paused_reason: str | None


def cursor_rows(prefix: str = "") -> list[CursorRow]:
    """Every saved cursor whose name starts with `prefix`, by name."""
    found = sql.rows("SELECT name, time_us, last_applied_at, paused_reason FROM jetstream_cursor"
                     " WHERE name LIKE ? ORDER BY name", (prefix.replace("%", "") + "%",))
    return [CursorRow(*row) for row in found]


def rewind_cursor(name: str, time_us: int) -> bool:
    """Move `name` back to `time_us` (or make it there), never forward; the sequence goes too, as
    a resume prefers a sequence and this is the later position being undone. A row at 0 is no
    cursor (a pause flag written before anything was applied). True if a row changed."""
    now = sql.now_s()
    made = sql.execute("INSERT INTO jetstream_cursor (name, time_us, updated_at) VALUES (?, ?, ?)"
                       " ON CONFLICT (name) DO NOTHING", (name, time_us, now)).rowcount
    moved = sql.execute("UPDATE jetstream_cursor SET time_us = ?, seq = NULL, updated_at = ?"
                        " WHERE name = ? AND (time_us <= 0 OR time_us > ?)", (time_us, now, name, time_us)).rowcount
    return bool(made or moved)


def place_cursor(name: str, time_us: int) -> None:
    """Set `name` to `time_us` exactly, forward or back, without a sequence: the hand-over between
    streams that take turns carrying the same events (feather/feeds/ingest/narrow.py). Only for
    a stream that is switched off at the time, whose writer has nothing left to apply."""
    sql.execute("INSERT INTO jetstream_cursor (name, time_us, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET time_us = excluded.time_us, seq = NULL,"
                " updated_at = excluded.updated_at", (name, time_us, sql.now_s()))


def forget_cursor(name: str) -> None:
    """The next connection of `name` starts from the live tail (or its feature's own start)."""
    sql.execute("DELETE FROM jetstream_cursor WHERE name = ?", (name,))


def save_cursor(name: str, cursor: Cursor) -> None:
    """Upsert that only ever moves forward, whatever order saves arrive in."""
    d = current_dialect()
    now = sql.now_s()
    sql.execute(
        (
            "INSERT INTO jetstream_cursor (name, time_us, seq, last_applied_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (name) DO UPDATE SET"
            f" time_us = {d.greatest('jetstream_cursor.time_us', 'excluded.time_us')},"
            " seq = CASE WHEN excluded.seq IS NULL THEN jetstream_cursor.seq"
            f" ELSE {d.greatest('COALESCE(jetstream_cursor.seq, 0)', 'excluded.seq')} END,"
            " last_applied_at = excluded.last_applied_at, updated_at = excluded.updated_at"
        ),
        (name, cursor.time_us, cursor.seq, now, now),
    )


def set_paused(name: str, reason: str | None) -> None:
    now = sql.now_s()
    sql.execute(
        (
            "INSERT INTO jetstream_cursor (name, time_us, paused_reason, updated_at) VALUES (?, 0, ?, ?)"
            " ON CONFLICT (name) DO UPDATE SET paused_reason = excluded.paused_reason, updated_at = excluded.updated_at"
        ),
        (name, reason, now),
    )


def dispatch(sub: Subscription, events: list[Event]) -> None:
    """Hand each handler the events it wants. Callers own the transaction."""
    for handler in sub.handlers:
        wanted = [event for event in events if handler.wants(event)]
        if wanted:
            handler.apply_batch(wanted)


def apply_batch(sub: Subscription, events: list[Event], cursor: Cursor | None) -> None:
    """One transaction: all handlers' writes for these events, plus the cursor if given."""
    with db.atomic():
        dispatch(sub, events)
        if cursor is not None:
            save_cursor(sub.name, cursor)
    checkpoint_soon()  # SQLite: the WAL goes back into the file off the event loop (db.py)


def db_size_bytes() -> int:
    return int(sql.one(current_dialect().size_bytes_sql())[0])
