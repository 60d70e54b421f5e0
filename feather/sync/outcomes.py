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

from feather.db import db
from feather.sync import pacer, queue, store
from feather.sync.follow_writer import (
    AuthExpired,
    AuthInvalid,
    BadRequest,
    PdsError,
    RateLimited,
    ScopeMissing,
    SessionGone,
)
from feather.sync.store import park_account, pause, record_activity

LANE_AUTH_PARK_SECS = 300
AUTH_STREAK_PAUSE = 5


def finish(row, status: str, error: str | None, now: int) -> None:
    queue.finish(row.id, status, error, now)


def sent(row, kind: str | None, detail: str | None = None) -> None:
    """Settle the in-flight activity row: relabel it (points kept) or drop it (refund)."""
    store.settle_sending(row.owner, row.app, kind, detail)


def succeeded(row, now: int) -> None:
    with db.atomic():
        finish(row, "done", None, now)
        sent(row, row.kind)
        if row.kind == "unfollow":
            queue.set_mirror_state(row.owner, row.app, row.rkey, "gone", now)
        else:
            queue.confirm_mirror(row.owner, row.app, row.rkey)
        store.clear_auth_failures(row.owner)


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
            streak = store.count_auth_failure(row.owner)
            queue.hold(row.id, now + LANE_AUTH_PARK_SECS, str(exc)[:500])
            if streak >= AUTH_STREAK_PAUSE:
                pause(row.owner, f"the PDS refused sync's credentials {streak} times in a row", now)
            return "stop"
        sent(row, "retry", str(exc)[:500])
        attempts = row.attempts + 1
        final = attempts >= pacer.MAX_ATTEMPTS or (isinstance(exc, BadRequest) and row.kind != "unfollow")
        if not final:
            queue.retry_later(row.id, attempts, now + pacer.backoff_secs(attempts), str(exc)[:500], now)
            return "stop"
        queue.give_up(row.id, attempts, str(exc)[:500], now)
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
        queue.record_fault(row.id, attempts, now + pacer.backoff_secs(attempts), reason, now, final)
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
    store.interrupt_sending(row.owner, row.app)
    record_activity(row.owner, now, row.app, "sending", row.subject, points, None)
