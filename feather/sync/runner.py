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

from flask import current_app
from gevent.pool import Pool

from feather import sql
from feather.atproto.syntax import next_tid
from feather.db import db
from feather.sync import apps as registry
from feather.sync import outcomes, pacer, queue, store
from feather.sync.follow_writer import FollowWriter, PdsError
from feather.sync.lanes import MAX_LANES, lease_lanes, process_id, release_lease, renew_lease
from feather.sync.store import get_set, record_activity

log = logging.getLogger(__name__)

ROWS_PER_LANE = 25  # per tick, so one busy owner cannot hold a lane slot for ever
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
    status = sql.scalar("SELECT status FROM sync_backfill_tasks WHERE owner_did = ? AND app = ?"
                        " ORDER BY id DESC LIMIT 1", (owner, app))
    return status == "done"


def _iso(now: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(now))


@dataclass
class Runner:
    writer: FollowWriter
    settings: object
    clock: Callable[[], int] = sql.now_s
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
            return outcomes.failed(row, exc, self.clock())
        except Exception as exc:  # a fault of ours, not the PDS's answer: never hidden, never charged
            log.exception("sync lane %s/%s: row %d failed before any answer from the PDS", owner, app, row.id)
            return outcomes.errored(row, exc, self.clock())
        outcomes.succeeded(row, self.clock())
        return "next"

    def _head(self, owner: str, app: str, now: int) -> Row | None:
        found = sql.rows(f"SELECT {_ROW} FROM sync_queue WHERE status = 'pending' AND owner_did = ? AND app = ?"
                         f" ORDER BY id LIMIT 1", (owner, app))
        if not found:
            return None
        row = Row(*found[0])
        not_before = sql.scalar("SELECT not_before FROM sync_queue WHERE id = ?", (row.id,))
        return row if not_before <= now else None

    def _prepare(self, owner: str, app: str) -> tuple[Row | None, str]:
        """(row ready for the PDS call, "fresh"|"retry") or (None, "next"|"stop")."""
        now = self.clock()
        with db.atomic():
            store.touch(owner, now)  # serialise the owner
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
            outcomes.finish(row, "skipped", "the record is already gone", now)
            return None, "next"
        if not self.budget.allows(row.owner, pacer.DELETE_POINTS, now):
            return None, "stop"
        queue.set_mirror_state(row.owner, row.app, row.rkey, "deleting", now)
        outcomes.sending(row, pacer.DELETE_POINTS, now)
        return row, "fresh"

    def _prepare_follow(self, row: Row, now: int):
        if not listing_done(row.owner, row.app):
            return None, "stop"
        ours = row.rkey is not None and queue.mirror_state(row.owner, row.app, row.rkey) is not None
        on = queue.followed_on(row.owner, row.subject)
        others_on_target = sql.scalar("SELECT COUNT(*) FROM sync_follow_mirror WHERE owner_did = ? AND subject = ?"
                                      " AND app = ? AND state IN ('live', 'pending') AND rkey <> ?",
                                      (row.owner, row.subject, row.app, row.rkey or ""), default=0)
        if others_on_target:
            outcomes.finish(row, "skipped", "already followed on this app", now)
            return None, "next"
        if not (on - {row.app}):
            outcomes.finish(row, "skipped", "no longer followed on any app", now)
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
        outcomes.sending(row, pacer.CREATE_POINTS, now)
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
        app = registry.BY_KEY[row.app]
        exists = self.writer.profile_exists(row.subject, app.profile)  # PdsError -> backoff in _failed
        now = self.clock()
        with db.atomic():
            store.touch(row.owner, now)
            if not exists:
                days = registry.recheck_days(app, self.settings)
                queue.add_waiting(row.owner, row.app, row.subject, now, now + days * pacer.DAY, row.cause_us)
                outcomes.finish(row, "waiting", f"no {app.name} profile yet", now)
                record_activity(row.owner, now, row.app, "waiting", row.subject, 0, None)
                return "next"
            if not self.budget.allows(row.owner, pacer.CREATE_POINTS, now):
                return "stop"
            row.rkey, row.created_at = next_tid(), _iso(now)
            queue.choose_record(row.id, row.rkey, row.created_at, now)
            queue.upsert_mirror(row.owner, row.app, row.rkey, row.subject, now, by_sync=True, state="pending",
                                born_us=row.cause_us)
            outcomes.sending(row, pacer.CREATE_POINTS, now)
        return "claimed"
