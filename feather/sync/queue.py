"""The write queue, the follow mirror, the waiting list and the observed deletes: every write to them.

The one module that writes sync_queue, sync_follow_mirror, sync_waiting and sync_observed_deletes.
The safety rule (only an observed unfollow deletes a follow) is held by who calls what: the one
statement that inserts an unfollow row is in the function below made for it, and only the handler's
delete branch (feather/sync/handler.py) calls that function; everything else here adds follows or
changes the status of rows already queued. tests/test_sync_apps.py fails if an unfollow insert, or
a call of that function, appears anywhere else.
"""
from __future__ import annotations

from feather import sql
from feather.atproto.syntax import decode_tid, is_valid_tid

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


def enqueue_observed_unfollow(owner: str, app: str, subject: str, rkey: str, now: int) -> None:
    """Queue the unfollow of one record. Only the handler's delete branch calls this, for a delete
    the owner made (tests/test_sync_apps.py holds the code base to that)."""
    sql.execute("INSERT INTO sync_queue (owner_did, app, kind, subject, rkey, origin, status, created_at, updated_at)"
                " VALUES (?, ?, 'unfollow', ?, ?, 'event', 'pending', ?, ?)", (owner, app, subject, rkey, now, now))


def born_of_listed(rkey: str, now: int) -> int:
    """A listed record's birth: its TID's time (follow rkeys are TIDs), else the listing time."""
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


def cancel_pending(owner: str, now: int, *, app: str | None = None, reason: str | None = None) -> int:
    """Cancel the owner's pending rows (on one app only, with `app`); `reason` becomes their last_error."""
    because = ", last_error = ?" if reason is not None else ""
    on_app = " AND app = ?" if app is not None else ""
    params = ((reason,) if reason is not None else ()) + (now, owner) + ((app,) if app is not None else ())
    return sql.execute(f"UPDATE sync_queue SET status = 'cancelled'{because}, updated_at = ? WHERE owner_did = ?"
                       f"{on_app} AND status = 'pending'", params).rowcount


def release_parked(owner: str) -> None:
    """Let every pending row of the owner go now (a resumed set)."""
    sql.execute("UPDATE sync_queue SET not_before = 0 WHERE owner_did = ? AND status = 'pending'", (owner,))


# --- one row's fate (feather/sync/outcomes.py decides it; the runner fixes a follow's record)
def finish(row_id: int, status: str, error: str | None, now: int) -> None:
    sql.execute("UPDATE sync_queue SET status = ?, last_error = ?, updated_at = ? WHERE id = ?",
                (status, error, now, row_id))


def hold(row_id: int, not_before: int, error: str) -> None:
    """Not before `not_before`, without spending an attempt."""
    sql.execute("UPDATE sync_queue SET not_before = ?, last_error = ? WHERE id = ?", (not_before, error, row_id))


def retry_later(row_id: int, attempts: int, not_before: int, error: str, now: int) -> None:
    sql.execute("UPDATE sync_queue SET attempts = ?, not_before = ?, last_error = ?, updated_at = ?"
                " WHERE id = ?", (attempts, not_before, error, now, row_id))


def give_up(row_id: int, attempts: int, error: str, now: int) -> None:
    sql.execute("UPDATE sync_queue SET attempts = ?, status = 'failed', last_error = ?, updated_at = ?"
                " WHERE id = ?", (attempts, error, now, row_id))


def record_fault(row_id: int, attempts: int, not_before: int, error: str, now: int, final: bool) -> None:
    """A fault of ours: backoff like a retry, and failed for good on the last attempt."""
    sql.execute("UPDATE sync_queue SET attempts = ?, not_before = ?, last_error = ?, updated_at = ?, status = ?"
                " WHERE id = ?", (attempts, not_before, error, now, "failed" if final else "pending", row_id))


def choose_record(row_id: int, rkey: str, created_at: str, now: int) -> None:
    """The follow record's rkey and createdAt, chosen once so every retry sends the same record."""
    sql.execute("UPDATE sync_queue SET rkey = ?, record_created_at = ?, updated_at = ? WHERE id = ?",
                (rkey, created_at, now, row_id))


# --- the mirror
def confirm_mirror(owner: str, app: str, rkey: str) -> None:
    """Sync's own follow landed: pending becomes live (any other state is left alone)."""
    sql.execute("UPDATE sync_follow_mirror SET state = 'live' WHERE owner_did = ? AND app = ? AND rkey = ?"
                " AND state = 'pending'", (owner, app, rkey))


def fail_pending_mirror(owner: str) -> None:
    sql.execute("UPDATE sync_follow_mirror SET state = 'failed' WHERE owner_did = ? AND state = 'pending'", (owner,))


def delete_mirror(owner: str, app: str, rkey: str) -> None:
    sql.execute("DELETE FROM sync_follow_mirror WHERE owner_did = ? AND app = ? AND rkey = ?", (owner, app, rkey))


def drop_gone(owner: str, app: str, started_at: int, now: int) -> int:
    """Records a complete listing no longer shows (last seen before it started) become 'dropped'.
    They stop counting as follows but stay, as 'dropped', until the cleanup: the stream may not have
    delivered the record's delete yet (a lagging or reconnecting shard), and that delete is still an
    unfollow to propagate (the handler finds its subject here). Nothing is deleted anywhere."""
    return sql.execute("UPDATE sync_follow_mirror SET state = 'dropped', last_seen_at = ? WHERE"
                       " owner_did = ? AND app = ?"
                       " AND last_seen_at < ? AND state IN ('live', 'pending', 'failed') AND rkey NOT IN (SELECT rkey"
                       " FROM sync_queue WHERE owner_did = ? AND app = ? AND status = 'pending' AND rkey IS NOT NULL)",
                       (now, owner, app, started_at, owner, app)).rowcount


# --- the waiting list
def remove_waiting(owner: str, app: str, subject: str) -> None:
    sql.execute("DELETE FROM sync_waiting WHERE owner_did = ? AND app = ? AND subject = ?", (owner, app, subject))


def forget_waiting_of(owner: str, subject: str) -> None:
    """The owner unfollowed subject: nothing waits for them on any app any more."""
    sql.execute("DELETE FROM sync_waiting WHERE owner_did = ? AND subject = ?", (owner, subject))


def clear_waiting_for(subject: str, app: str) -> None:
    """subject made a profile on app: the enabled sets' waits for it are over (they were queued)."""
    sql.execute("DELETE FROM sync_waiting WHERE subject = ? AND app = ?"
                " AND owner_did IN (SELECT owner_did FROM sync_sets WHERE enabled = 1)", (subject, app))


def forget_all_waiting(owner: str) -> None:
    sql.execute("DELETE FROM sync_waiting WHERE owner_did = ?", (owner,))


# --- observed deletes: so a replay cannot unfollow twice (feather/sync/handler.py reads them)
def record_observed_delete(owner: str, app: str, rkey: str, subject: str | None, time_us: int, now: int) -> None:
    sql.execute("INSERT INTO sync_observed_deletes (owner_did, app, rkey, subject, time_us, seen_at)"
                " VALUES (?, ?, ?, ?, ?, ?)", (owner, app, rkey, subject, time_us, now))


# --- forgetting
def forget_app(owner: str, app: str) -> None:
    """An app left the set: its records no longer count as "followed somewhere"."""
    for table in ("sync_follow_mirror", "sync_waiting"):
        sql.execute(f"DELETE FROM {table} WHERE owner_did = ? AND app = ?", (owner, app))


def forget_owner(owner: str) -> None:
    for table in ("sync_queue", "sync_waiting", "sync_follow_mirror", "sync_observed_deletes"):
        sql.execute(f"DELETE FROM {table} WHERE owner_did = ?", (owner,))


def trim(now: int, keep_secs: int, horizon: int) -> int:
    """The cleanup: tombstones (mirror rows gone or dropped, observed deletes) older than keep_secs,
    and settled queue rows older than horizon. The number of tombstones removed."""
    tombstones = sql.execute("DELETE FROM sync_follow_mirror WHERE state IN ('gone', 'dropped') AND last_seen_at < ?",
                             (now - keep_secs,)).rowcount
    tombstones += sql.execute("DELETE FROM sync_observed_deletes WHERE seen_at < ?", (now - keep_secs,)).rowcount
    sql.execute("DELETE FROM sync_queue WHERE status IN ('done', 'skipped', 'cancelled') AND updated_at < ?",
                (horizon,))
    return tombstones
