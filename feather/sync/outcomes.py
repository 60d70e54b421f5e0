"""What becomes of a queue row once its PDS call is over (or never happened): the runner's third
step, each a short transaction of its own.

  succeeded  the row is done; the mirror says so (live, or gone for an unfollow).
  failed     the PDS answered an error: 429 parks the account, a lost or refused session pauses
             or parks, anything else retries with backoff until the fifth attempt fails it.
  errored    a fault of ours before the PDS answered: refunded, retried, shown to the owner.
Points are spent when a write is sent (a `sending` activity row) and refunded here when the PDS
did nothing; a `sending` row a crash left behind becomes `interrupted` and keeps its points.
"""
from __future__ import annotations

from feather import sql
from feather.db import db
from feather.sync import pacer, queue
from feather.sync.store import park_account, pause, record_activity
from feather.sync.follow_writer import AuthExpired, AuthInvalid, BadRequest, PdsError, RateLimited, ScopeMissing, SessionGone

LANE_AUTH_PARK_SECS = 300
AUTH_STREAK_PAUSE = 5


def finish(row, status: str, error: str | None, now: int) -> None:
    sql.execute("UPDATE sync_queue SET status = ?, last_error = ?, updated_at = ? WHERE id = ?",
                (status, error, now, row.id))


def sent(row, kind: str | None, detail: str | None = None) -> None:
    """Settle the in-flight activity row: relabel it (points kept) or drop it (refund)."""
    if kind is None:
        sql.execute("DELETE FROM sync_activity WHERE owner_did = ? AND app = ? AND kind = 'sending'",
                    (row.owner, row.app))
    else:
        sql.execute("UPDATE sync_activity SET kind = ?, detail = ? WHERE owner_did = ? AND app = ?"
                    " AND kind = 'sending'",
                    (kind, detail, row.owner, row.app))


def succeeded(row, now: int) -> None:
    with db.atomic():
        finish(row, "done", None, now)
        sent(row, row.kind)
        if row.kind == "unfollow":
            queue.set_mirror_state(row.owner, row.app, row.rkey, "gone", now)
        else:
            sql.execute("UPDATE sync_follow_mirror SET state = 'live' WHERE owner_did = ? AND app = ? AND rkey = ?"
                        " AND state = 'pending'", (row.owner, row.app, row.rkey))
        sql.execute("UPDATE sync_sets SET auth_failures = 0 WHERE owner_did = ? AND auth_failures > 0", (row.owner,))


def failed(row, exc: PdsError, now: int) -> str:
    with db.atomic():
        if isinstance(exc, RateLimited):  # the PDS did nothing: no attempt spent, points refunded
            sent(row, None)
            park_account(row.owner, pacer.rate_limit_until(exc.reset_at, now), now)
            record_activity(row.owner, now, row.app, "rate_limited", row.subject, 0, str(exc))
            return "stop"
        if isinstance(exc, (SessionGone, ScopeMissing)):
            sent(row, None)
            pause(row.owner, "signed out" if isinstance(exc, SessionGone) else "missing write permission", now)
            return "stop"
        if isinstance(exc, (AuthExpired, AuthInvalid)):
            sent(row, None)
            sql.execute("UPDATE sync_sets SET auth_failures = auth_failures + 1 WHERE owner_did = ?", (row.owner,))
            streak = sql.scalar("SELECT auth_failures FROM sync_sets WHERE owner_did = ?", (row.owner,), default=0)
            sql.execute("UPDATE sync_queue SET not_before = ?, last_error = ? WHERE id = ?",
                        (now + LANE_AUTH_PARK_SECS, str(exc)[:500], row.id))
            if streak >= AUTH_STREAK_PAUSE:
                pause(row.owner, f"the PDS refused sync's credentials {streak} times in a row", now)
            return "stop"
        sent(row, "retry", str(exc)[:500])
        attempts = row.attempts + 1
        final = attempts >= pacer.MAX_ATTEMPTS or (isinstance(exc, BadRequest) and row.kind != "unfollow")
        if not final:
            sql.execute("UPDATE sync_queue SET attempts = ?, not_before = ?, last_error = ?, updated_at = ?"
                        " WHERE id = ?", (attempts, now + pacer.backoff_secs(attempts), str(exc)[:500], now, row.id))
            return "stop"
        sql.execute("UPDATE sync_queue SET attempts = ?, status = 'failed', last_error = ?, updated_at = ?"
                    " WHERE id = ?", (attempts, str(exc)[:500], now, row.id))
        record_activity(row.owner, now, row.app, "failed", row.subject, 0, f"{row.kind}: {exc}"[:500])
        if row.kind == "unfollow":  # the record is still there: the mirror must say so
            queue.set_mirror_state(row.owner, row.app, row.rkey, "live", now)
        elif row.rkey is not None:
            # Not a follow any more (nothing may take it for one: a later unfollow on this app
            # must propagate), but remembered: the write may have landed. Its echo or the next
            # complete listing makes it live; a listing that lacks it drops it.
            queue.set_mirror_state(row.owner, row.app, row.rkey, "failed", now)
        return "stop"


def errored(row, exc: Exception, now: int) -> str:
    """An unexpected fault before the PDS answered: refund, retry with backoff, tell the owner."""
    attempts = row.attempts + 1
    reason = f"{type(exc).__name__}: {exc}"[:500]
    with db.atomic():
        sent(row, None)
        final = attempts >= pacer.MAX_ATTEMPTS
        sql.execute("UPDATE sync_queue SET attempts = ?, not_before = ?, last_error = ?, updated_at = ?, status = ?"
                    " WHERE id = ?", (attempts, now + pacer.backoff_secs(attempts), reason, now,
                    "failed" if final else "pending", row.id))
        record_activity(row.owner, now, row.app, "failed" if final else "error", row.subject, 0,
                        f"{row.kind}: {reason}"[:500])
        if final and row.kind == "unfollow":
            queue.set_mirror_state(row.owner, row.app, row.rkey, "live", now)
        elif final and row.rkey is not None:
            queue.set_mirror_state(row.owner, row.app, row.rkey, "failed", now)
    return "stop"


def sending(row, points: int, now: int) -> None:
    """Spend the points of the write about to be sent. A `sending` row still there is the write a
    crash interrupted: it keeps its points (it may have reached the PDS) and shows as such."""
    sql.execute("UPDATE sync_activity SET kind = 'interrupted' WHERE owner_did = ? AND app = ? AND kind = 'sending'",
                (row.owner, row.app))
    record_activity(row.owner, now, row.app, "sending", row.subject, points, None)
