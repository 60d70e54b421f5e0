"""The write queue and the follow mirror: the shared, follow-only half.

This module can only ever add follows. The one statement that inserts an unfollow row lives in
feather/sync/handler.py (the delete branch), which is the safety rule enforced by construction:
backfill, the waiting list and the sweep import this module and nothing that could unfollow.
tests/test_sync_apps.py fails if an unfollow insert appears anywhere else.
"""
from __future__ import annotations

from feather import sql


# Mirror states: live, pending (sync is writing it), failed (sync's write failed for good; it may
# have landed), deleting / gone (sync's unfollow and its tombstone), dropped (a complete listing
# found the record gone; kept until the cleanup so a delete the stream brings late still unfollows).
ACTIVE = ("live", "pending")  # mirror states that mean "the owner follows this subject here"
_ACTIVE_SQL = "('live', 'pending')"
# Records an unfollow must reach: also a follow that failed for good, whose write may have landed
# (deleting a record that is not there is harmless; leaving one that is breaks the sync).
_DELETABLE_SQL = "('live', 'pending', 'failed')"


def enqueue_follow(owner: str, app: str, subject: str, origin: str, now: int, cause_us: int = 0) -> bool:
    """Queue a follow unless one is already pending for (owner, app, subject). True if queued.
    cause_us: when the follow that causes this one came to be (becomes the record's born_us)."""
    if sql.scalar("SELECT 1 FROM sync_queue WHERE owner_did = ? AND subject = ? AND status = 'pending'"
                  " AND app = ? AND kind = 'follow'", (owner, subject, app)):
        return False
    sql.execute("INSERT INTO sync_queue (owner_did, app, kind, subject, origin, status, created_at, updated_at,"
                " cause_us) VALUES (?, ?, 'follow', ?, ?, 'pending', ?, ?, ?)",
                (owner, app, subject, origin, now, now, cause_us))
    return True


def born_of_listed(rkey: str, now: int) -> int:
    """A listed record's birth: its TID's time (follow rkeys are TIDs), else the listing time."""
    from feather.atproto.syntax import decode_tid, is_valid_tid

    return decode_tid(rkey)[0] if is_valid_tid(rkey) else now * 1_000_000


def mirror_state(owner: str, app: str, rkey: str) -> tuple[str, str] | None:
    """(subject, state) of one mirrored record."""
    found = sql.rows("SELECT subject, state FROM sync_follow_mirror WHERE owner_did = ? AND app = ? AND rkey = ?",
                     (owner, app, rkey))
    return (found[0][0], found[0][1]) if found else None


def upsert_mirror(owner: str, app: str, rkey: str, subject: str, now: int, *, by_sync: bool = False,
                  state: str = "live", born_us: int = 0) -> None:
    """Insert a mirror row, or refresh last_seen_at of an existing one (state and born_us are left alone)."""
    sql.execute("INSERT INTO sync_follow_mirror (owner_did, app, rkey, subject, created_by_sync, state, last_seen_at,"
                " born_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (owner_did, app, rkey) DO UPDATE SET"
                " last_seen_at = excluded.last_seen_at", (owner, app, rkey, subject, int(by_sync), state, now, born_us))


def set_mirror_state(owner: str, app: str, rkey: str, state: str, now: int) -> None:
    sql.execute("UPDATE sync_follow_mirror SET state = ?, last_seen_at = ? WHERE owner_did = ? AND"
                " app = ? AND rkey = ?",
                (state, now, owner, app, rkey))


def followed_on(owner: str, subject: str, *, staying: bool = False, states: str = _ACTIVE_SQL) -> set[str]:
    """Apps on which the owner has an active (live or pending) follow of subject. `staying`: leave
    out records an unfollow row is about to delete (a re-follow must not be mistaken for present)."""
    extra = (" AND NOT EXISTS (SELECT 1 FROM sync_queue q WHERE q.owner_did = m.owner_did AND q.subject = m.subject"
             " AND q.status = 'pending' AND q.kind = 'unfollow' AND q.app = m.app AND q.rkey = m.rkey)"
             if staying else "")
    return {r[0] for r in sql.rows(f"SELECT DISTINCT m.app FROM sync_follow_mirror m WHERE m.owner_did = ?"
                                   f" AND m.subject = ? AND m.state IN {states}{extra}", (owner, subject))}


def live_on(owner: str, subject: str) -> set[str]:
    """Apps with a confirmed record of subject: what tells a duplicate's cleanup from an unfollow
    (a write sync has in flight, or one that failed, is not the owner following there)."""
    return followed_on(owner, subject, states="('live')")


def records_born_before(owner: str, subject: str, time_us: int) -> list[tuple[str, str]]:
    """(app, rkey) of every record of subject an unfollow at time_us must delete: live, in flight
    or failed (it may exist), and born before the unfollow (0: born before this was recorded)."""
    return [(r[0], r[1]) for r in sql.rows(
        f"SELECT app, rkey FROM sync_follow_mirror WHERE owner_did = ? AND subject = ? AND state IN {_DELETABLE_SQL}"
        f" AND born_us < ? ORDER BY app, rkey", (owner, subject, time_us))]


def cancel_pending_follows(owner: str, subject: str, now: int, before_us: int) -> int:
    """Cancel the queued follows of subject that an unfollow at before_us undoes: those caused by a
    record born before it. A follow caused by a newer record (the owner followed again since, and a
    listing saw it before the stream brought the unfollow) stays queued."""
    return sql.execute("UPDATE sync_queue SET status = 'cancelled', updated_at = ? WHERE owner_did = ? AND subject = ?"
                       " AND status = 'pending' AND kind = 'follow' AND cause_us < ?", (now, owner, subject,
                       before_us)).rowcount


def add_waiting(owner: str, app: str, subject: str, now: int, next_check_at: int, cause_us: int = 0) -> None:
    sql.execute("INSERT INTO sync_waiting (owner_did, app, subject, since, next_check_at, cause_us)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (owner_did, app, subject) DO UPDATE SET"
                " next_check_at = excluded.next_check_at", (owner, app, subject, now, next_check_at, cause_us))


def counts(owner: str) -> dict:
    found = dict(sql.rows("SELECT status, COUNT(*) FROM sync_queue WHERE owner_did = ? GROUP BY status", (owner,)))
    return {"pending": found.get("pending", 0), "done": found.get("done", 0), "failed": found.get("failed", 0)}


def waiting_count(owner: str) -> int:
    return sql.scalar("SELECT COUNT(*) FROM sync_waiting WHERE owner_did = ?", (owner,), default=0)
