"""The runner: drains the write queue one lane at a time, at most eight lanes at once.

A lane is one (owner, app) pair and always runs its oldest pending row first, so an unfollow and
a later re-follow apply in order. Each row goes through three short steps, and no transaction
is ever open across a network call (SQLite would block every other greenlet):
  1. prepare (transaction): re-verify, check the budget, choose the TID rkey and insert the
     `created_by_sync` mirror row BEFORE the PDS call (so the Jetstream echo finds it), spend points;
  2. the PDS call (a retry first asks whether the rkey's record already exists, so a write that
     timed out after succeeding never makes a second record);
  3. record the outcome (transaction).
Every prepare starts by touching the set row, which serialises the budget check-and-spend of two
lanes of one owner on both databases.

Lanes are leased (lanes.py), so at most MAX_LANES run across the whole cluster, not per
process: every worker process ticks its own runner, each tick leases free lanes first, renews a
lease before each row and clears it when the lane finishes.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from feather.db import db
from feather.sync import apps as registry
from feather.sync import pacer, queue
from feather.sync.lanes import MAX_LANES, lease_lanes, process_id, release_lease, renew_lease
from feather.sync.store import execute, get_set, now_s, park_account, pause, record_activity, rows, scalar
from feather.sync.writer import (AuthExpired, AuthInvalid, BadRequest, FollowWriter, NetworkError, PdsError,
                                 RateLimited, ScopeMissing, ServerError, SessionGone)

log = logging.getLogger(__name__)

ROWS_PER_LANE = 25  # per tick, so one busy owner cannot hold a lane slot for ever
LANE_AUTH_PARK_SECS = 300
AUTH_STREAK_PAUSE = 5
_ROW = "id, owner_did, app, kind, subject, rkey, record_created_at, attempts, cause_us"


@dataclass
class Row:
    id: int
    owner: str
    app: str
    kind: str
    subject: str
    rkey: str | None
    created_at: str | None
    attempts: int
    cause_us: int = 0


def listing_done(owner: str, app: str) -> bool:
    """A lane never writes a follow on an app whose most recent listing is not done."""
    status = scalar("SELECT status FROM sync_backfill_tasks WHERE owner_did = ? AND app = ?"
                    " ORDER BY id DESC LIMIT 1", owner, app)
    return status == "done"


def _iso(now: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(now))


@dataclass
class Runner:
    writer: FollowWriter
    settings: object
    clock: Callable[[], int] = now_s
    budget: pacer.Budget = field(default=None)
    holder: str = field(default_factory=process_id)  # the name this runner leases lanes under

    def __post_init__(self):
        if self.budget is None:
            self.budget = pacer.Budget.from_settings(self.settings)

    # --- scheduling
    def tick(self, max_lanes: int = MAX_LANES, rows_per_lane: int = ROWS_PER_LANE, concurrent: bool = True) -> int:
        """Lease free runnable lanes (at most max_lanes leased across the cluster) and run them
        concurrently; the number of rows that finished."""
        lanes = lease_lanes(self.holder, self.clock(), max_lanes)
        if not concurrent or len(lanes) < 2:
            return sum(self._run_leased(owner, app, rows_per_lane) for owner, app in lanes)
        from flask import current_app
        from gevent.pool import Pool

        # A pool greenlet starts with no context of its own: give each lane the app's (the writer
        # reaches the owner's session through it) and a database connection of its own.
        flask_app = current_app._get_current_object()

        def one(lane):
            with flask_app.app_context(), db.connection_context():
                return self._run_leased(lane[0], lane[1], rows_per_lane)

        return sum(Pool(max_lanes).map(one, lanes))

    def _run_leased(self, owner: str, app: str, max_rows: int) -> int:
        try:
            return self.run_lane(owner, app, max_rows, leased=True)
        except Exception:
            # A database error in one lane must not take the other lanes of the tick with it.
            log.exception("sync lane %s/%s failed; it runs again at the next tick", owner, app)
            return 0
        finally:
            release_lease(self.holder, owner, app)

    def run_lane(self, owner: str, app: str, max_rows: int = ROWS_PER_LANE, leased: bool = False) -> int:
        """Run the lane's rows in order. leased: renew the lease before each further row and stop
        if it was lost (this process stalled past LEASE_SECS and another took the lane)."""
        finished = 0
        for n in range(max_rows):
            if leased and n and not renew_lease(self.holder, owner, app, self.clock()):
                log.warning("sync lane %s/%s: lease lost, leaving the lane to its new holder", owner, app)
                break
            outcome = self.step(owner, app)
            if outcome != "next":
                break
            finished += 1
        return finished

    # --- one row
    def step(self, owner: str, app: str) -> str:
        """Process the lane's head row. "next": it finished, take the following one; "stop": wait."""
        row, verdict = self._prepare(owner, app)
        if row is None:
            return verdict
        try:
            if verdict == "check-profile":
                verdict = self._check_profile_and_claim(row)
                if verdict != "claimed":
                    return verdict
            self._call(row, retry=(verdict == "retry"))
        except PdsError as exc:
            return self._failed(row, exc)
        except Exception as exc:  # a fault of ours, not the PDS's answer: never hidden, never charged
            log.exception("sync lane %s/%s: row %d failed before any answer from the PDS", owner, app, row.id)
            return self._errored(row, exc)
        self._succeeded(row)
        return "next"

    def _head(self, owner: str, app: str, now: int) -> Row | None:
        found = rows(f"SELECT {_ROW} FROM sync_queue WHERE status = 'pending' AND owner_did = ? AND app = ?"
                     f" ORDER BY id LIMIT 1", owner, app)
        if not found:
            return None
        row = Row(*found[0])
        not_before = scalar("SELECT not_before FROM sync_queue WHERE id = ?", row.id)
        return row if not_before <= now else None

    def _prepare(self, owner: str, app: str) -> tuple[Row | None, str]:
        """(row ready for the PDS call, "fresh"|"retry") or (None, "next"|"stop")."""
        now = self.clock()
        with db.atomic():
            execute("UPDATE sync_sets SET updated_at = ? WHERE owner_did = ?", now, owner)  # serialise the owner
            sync_set = get_set(owner)
            if sync_set is None or not sync_set.enabled or sync_set.paused or sync_set.parked_until > now:
                return None, "stop"
            row = self._head(owner, app, now)
            if row is None:
                return None, "stop"
            if row.kind == "unfollow":
                return self._prepare_unfollow(row, now)
            return self._prepare_follow(row, now)

    def _prepare_unfollow(self, row: Row, now: int):
        known = queue.mirror_state(row.owner, row.app, row.rkey)
        if known is None or known[1] == "gone":
            self._finish(row, "skipped", "the record is already gone", now)
            return None, "next"
        if not self.budget.allows(row.owner, pacer.DELETE_POINTS, now):
            return None, "stop"
        queue.set_mirror_state(row.owner, row.app, row.rkey, "deleting", now)
        _sending(row, pacer.DELETE_POINTS, now)
        return row, "fresh"

    def _prepare_follow(self, row: Row, now: int):
        if not listing_done(row.owner, row.app):
            return None, "stop"
        ours = row.rkey is not None and queue.mirror_state(row.owner, row.app, row.rkey) is not None
        on = queue.followed_on(row.owner, row.subject)
        others_on_target = scalar("SELECT COUNT(*) FROM sync_follow_mirror WHERE owner_did = ? AND subject = ?"
                                  " AND app = ? AND state IN ('live', 'pending') AND rkey <> ?",
                                  row.owner, row.subject, row.app, row.rkey or "", default=0)
        if others_on_target:
            self._finish(row, "skipped", "already followed on this app", now)
            return None, "next"
        if not (on - {row.app}):
            self._finish(row, "skipped", "no longer followed on any app", now)
            return None, "next"
        if not self.budget.app_cap_allows(row.owner, row.app, now):
            return None, "stop"
        if not self.budget.allows(row.owner, pacer.CREATE_POINTS, now):
            return None, "stop"
        if row.rkey is None:
            return row, "check-profile"  # needs the network: checked outside this transaction
        if not ours:  # a parked retry whose mirror row the sweep dropped: it is ours again
            queue.upsert_mirror(row.owner, row.app, row.rkey, row.subject, now, by_sync=True, state="pending",
                                born_us=row.cause_us)
        _sending(row, pacer.CREATE_POINTS, now)
        return row, "retry"

    def _call(self, row: Row, retry: bool) -> None:
        app = registry.BY_KEY[row.app]
        if row.kind == "unfollow":
            self.writer.delete_follow(row.owner, app.follow, row.rkey)
        elif retry and self.writer.get_follow(row.owner, app.follow, row.rkey) == row.subject:
            return  # an earlier try succeeded (timed out after the write): done, no second record
        else:
            self.writer.create_follow(row.owner, app.follow, row.rkey, row.subject, row.created_at)

    def _check_profile_and_claim(self, row: Row) -> str:
        """No profile: the waiting list ("next"). Else choose the rkey and insert the pending mirror
        row before any write is sent ("claimed"), unless the budget went meanwhile ("stop")."""
        from feather.atproto.syntax import next_tid

        app = registry.BY_KEY[row.app]
        exists = self.writer.profile_exists(row.subject, app.profile)  # PdsError -> backoff in _failed
        now = self.clock()
        with db.atomic():
            execute("UPDATE sync_sets SET updated_at = ? WHERE owner_did = ?", now, row.owner)
            if not exists:
                days = registry.recheck_days(app, self.settings)
                queue.add_waiting(row.owner, row.app, row.subject, now, now + days * pacer.DAY, row.cause_us)
                self._finish(row, "waiting", f"no {app.name} profile yet", now)
                record_activity(row.owner, now, row.app, "waiting", row.subject, 0, None)
                return "next"
            if not self.budget.allows(row.owner, pacer.CREATE_POINTS, now):
                return "stop"
            row.rkey, row.created_at = next_tid(), _iso(now)
            execute("UPDATE sync_queue SET rkey = ?, record_created_at = ?, updated_at = ? WHERE id = ?",
                    row.rkey, row.created_at, now, row.id)
            queue.upsert_mirror(row.owner, row.app, row.rkey, row.subject, now, by_sync=True, state="pending",
                                born_us=row.cause_us)
            _sending(row, pacer.CREATE_POINTS, now)
        return "claimed"

    # --- outcomes
    def _finish(self, row: Row, status: str, error: str | None, now: int) -> None:
        execute("UPDATE sync_queue SET status = ?, last_error = ?, updated_at = ? WHERE id = ?",
                status, error, now, row.id)

    def _sent(self, row: Row, kind: str | None) -> None:
        """Settle the in-flight activity row: relabel it (points kept) or drop it (refund)."""
        if kind is None:
            execute("DELETE FROM sync_activity WHERE owner_did = ? AND app = ? AND kind = 'sending'", row.owner, row.app)
        else:
            execute("UPDATE sync_activity SET kind = ? WHERE owner_did = ? AND app = ? AND kind = 'sending'",
                    kind, row.owner, row.app)

    def _succeeded(self, row: Row) -> None:
        now = self.clock()
        with db.atomic():
            self._finish(row, "done", None, now)
            self._sent(row, row.kind)
            if row.kind == "unfollow":
                queue.set_mirror_state(row.owner, row.app, row.rkey, "gone", now)
            else:
                execute("UPDATE sync_follow_mirror SET state = 'live' WHERE owner_did = ? AND app = ? AND rkey = ?"
                        " AND state = 'pending'", row.owner, row.app, row.rkey)
            execute("UPDATE sync_sets SET auth_failures = 0 WHERE owner_did = ? AND auth_failures > 0", row.owner)

    def _failed(self, row: Row, exc: PdsError) -> str:
        now = self.clock()
        with db.atomic():
            if isinstance(exc, RateLimited):  # the PDS did nothing: no attempt spent, points refunded
                self._sent(row, None)
                park_account(row.owner, pacer.rate_limit_until(exc.reset_at, now), now)
                record_activity(row.owner, now, row.app, "rate_limited", row.subject, 0, str(exc))
                return "stop"
            if isinstance(exc, (SessionGone, ScopeMissing)):
                self._sent(row, None)
                pause(row.owner, "signed out" if isinstance(exc, SessionGone) else "missing write permission", now)
                return "stop"
            if isinstance(exc, (AuthExpired, AuthInvalid)):
                self._sent(row, None)
                execute("UPDATE sync_sets SET auth_failures = auth_failures + 1 WHERE owner_did = ?", row.owner)
                streak = scalar("SELECT auth_failures FROM sync_sets WHERE owner_did = ?", row.owner, default=0)
                execute("UPDATE sync_queue SET not_before = ?, last_error = ? WHERE id = ?",
                        now + LANE_AUTH_PARK_SECS, str(exc)[:500], row.id)
                if streak >= AUTH_STREAK_PAUSE:
                    pause(row.owner, f"the PDS refused sync's credentials {streak} times in a row", now)
                return "stop"
            self._sent(row, "retry")
            attempts = row.attempts + 1
            final = attempts >= pacer.MAX_ATTEMPTS or (isinstance(exc, BadRequest) and row.kind != "unfollow")
            if not final:
                execute("UPDATE sync_queue SET attempts = ?, not_before = ?, last_error = ?, updated_at = ?"
                        " WHERE id = ?", attempts, now + pacer.backoff_secs(attempts), str(exc)[:500], now, row.id)
                return "stop"
            execute("UPDATE sync_queue SET attempts = ?, status = 'failed', last_error = ?, updated_at = ?"
                    " WHERE id = ?", attempts, str(exc)[:500], now, row.id)
            record_activity(row.owner, now, row.app, "failed", row.subject, 0, f"{row.kind}: {exc}"[:500])
            if row.kind == "unfollow":  # the record is still there: the mirror must say so
                queue.set_mirror_state(row.owner, row.app, row.rkey, "live", now)
            elif row.rkey is not None:
                # Not a follow any more (nothing may take it for one: a later unfollow on this app
                # must propagate), but remembered: the write may have landed. Its echo or the next
                # complete listing makes it live; a listing that lacks it drops it.
                queue.set_mirror_state(row.owner, row.app, row.rkey, "failed", now)
            return "stop"

    def _errored(self, row: Row, exc: Exception) -> str:
        """An unexpected fault before the PDS answered: refund, retry with backoff, tell the owner."""
        now = self.clock()
        attempts = row.attempts + 1
        reason = f"{type(exc).__name__}: {exc}"[:500]
        with db.atomic():
            self._sent(row, None)
            final = attempts >= pacer.MAX_ATTEMPTS
            execute("UPDATE sync_queue SET attempts = ?, not_before = ?, last_error = ?, updated_at = ?, status = ?"
                    " WHERE id = ?", attempts, now + pacer.backoff_secs(attempts), reason, now,
                    "failed" if final else "pending", row.id)
            record_activity(row.owner, now, row.app, "failed" if final else "error", row.subject, 0,
                            f"{row.kind}: {reason}"[:500])
            if final and row.kind == "unfollow":
                queue.set_mirror_state(row.owner, row.app, row.rkey, "live", now)
            elif final and row.rkey is not None:
                queue.set_mirror_state(row.owner, row.app, row.rkey, "failed", now)
        return "stop"


def _sending(row: Row, points: int, now: int) -> None:
    """Spend the points of the write about to be sent. A `sending` row still there is the write a
    crash interrupted: it keeps its points (it may have reached the PDS) and shows as such."""
    execute("UPDATE sync_activity SET kind = 'interrupted' WHERE owner_did = ? AND app = ? AND kind = 'sending'",
            row.owner, row.app)
    record_activity(row.owner, now, row.app, "sending", row.subject, points, None)


_ = (NetworkError, ServerError)  # retried with backoff: the generic branch of _failed
