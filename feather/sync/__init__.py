"""Follow-graph sync across Bluesky, Tangled, Sifa, Grain and Semble (docs/design.md, "Graph sync").

Feature hooks (feather/features.py):
  subscriptions    shards `sync:<n>` (members: enabled owners hashed to n, paused ones included;
                   collections: the offered apps' follow collections) and, on the shared "global"
                   stream, profile creates of the apps watched live (late joiners).
  jobs             runner, backfill bursts, sweep, cleanup, and the people cache (names for the
                   pages). They need a FollowWriter that can write with the owner's session:
                   `follow_writer.app_writer(app)`, the one installed with
                   `follow_writer.install_writer(app, writer)` or else the production one over
                   feather/auth's sessions. Without one the write jobs skip their turn (the handler
                   still mirrors and queues, so nothing is lost).
  operator_status  the counts /admin shows (operator.py).
Module map: apps (registry) · store (sets, activity log, shards) · shards (shard cursors across a
count change) · handler (Jetstream; the only caller that queues an unfollow) · queue (queue, mirror,
waiting list, observed deletes) · runner (lanes) · lanes (leases) · pacer (points) · backfill
(listing, union, sweep) · service (owner operations, cleanup) · follow_writer (PDS protocol +
adapter; the app's writer) · memory (in-memory PDS) · preview (what enabling would write) · outcomes
(a row's result) · status (what the owner sees) · people (handles and names) · operator (figures
for /admin) · views (pages) · api (JSON for scripts). Each table has one module that writes it
(docs/design.md, "Tables by owner").
"""
from __future__ import annotations

import logging

from flask import current_app

from feather import sql
from feather.auth.service import declare_scopes
from feather.db import db
from feather.features import Job
from feather.jetstream.subscriptions import Handler, Subscription
from feather.sync import api, backfill, operator, people, personal, service, shards, views
from feather.sync import apps as registry
from feather.sync.apps import APPS
from feather.sync.follow_writer import app_writer
from feather.sync.handler import make_handlers
from feather.sync.runner import Runner
from feather.sync.service import resume_after_sign_in, write_scopes
from feather.sync.store import shard_members, sweep_everyone_now

log = logging.getLogger(__name__)

RUNNER_SECS = 5.0
BACKFILL_SECS = 10.0
SWEEP_SECS = 300.0
CLEANUP_SECS = 3600.0


def init_app(app) -> None:
    app.extensions.setdefault("sync_writer", None)
    # Declared for every app (not only the offered ones): the OAuth client metadata must list each
    # scope we may ever ask for, and an operator changing the allow list must not need new metadata.
    declare_scopes(*write_scopes(a.key for a in APPS))
    app.extensions.setdefault("sign_in_hooks", []).append(_resume_on_sign_in)
    app.register_blueprint(views.bp)
    app.register_blueprint(api.bp)
    personal.register(app)


def operator_status(settings) -> dict | None:
    """Graph sync's figures for /admin (feather/features.py collects them)."""
    return operator.status(settings)


def _resume_on_sign_in(did: str) -> None:
    """feather/auth calls this after a sign-in (inside the request, with its connection)."""
    if resume_after_sign_in(did, sql.now_s()):
        log.info("sync: resumed %s after a new sign-in", did)


def _members(shard: int, count: int):
    def dids() -> list[str]:
        if db.is_closed():
            with db.connection_context():
                return shard_members(shard, count)
        return shard_members(shard, count)
    return dids


def _on_gap(name: str):
    def report(saved_time_us: int) -> None:
        # The accepted residual risk: unfollows inside the gap are never recovered. Follows are:
        # make every sweep of this shard due now (sweeps only ever add).
        log.warning("sync %s: resumed past the lookback window (saved cursor %d); unfollows in the gap are "
                    "lost, follows will be recovered by the sweep", name, saved_time_us)
        try:
            with db.connection_context():
                sweep_everyone_now()
        except Exception:
            log.exception("sync %s: could not schedule sweeps after a gap", name)
    return report


def subscriptions(settings) -> list:
    offered = registry.offered(settings)
    if len(offered) < 2:
        return []
    follows, profiles = make_handlers(settings)
    follow_nsids = sorted(app.follow for app in offered)
    count = settings.sync_shard_count
    _seed_cursors(count)
    subs = [Subscription(f"sync:{n}", follow_nsids,
                         [Handler("sync", follows, frozenset(follow_nsids))],
                         dids=_members(n, count), max_lookback_us=settings.sync_jetstream_max_lookback_us,
                         on_gap=_on_gap(f"sync:{n}"))
            for n in range(count)]
    live = registry.live_profile_collections(settings)
    if live:
        subs.append(Subscription("global", live, [Handler("sync-profiles", profiles, frozenset(live))]))
    return subs


def _seed_cursors(count: int) -> None:
    """Before any shard loads its cursor: a shard whose owners changed with the count goes back to
    the oldest cursor they had, a shard without one starts from the oldest (feather/sync/shards.py)."""
    if db.obj is None:
        return
    try:
        with db.connection_context():
            if not {"jetstream_cursor", "app_state", "sync_sets"} <= set(db.get_tables()):
                return  # a fresh install before migrating: nothing was applied, shards start live
            moved = shards.reshard_cursors(count)
    except Exception:
        # Said out loud: a shard that kept a cursor ahead of an owner moved into it skips that
        # owner's events, unfollows included, until the count is checked at the next start.
        log.exception("sync: could not check the shard cursors against SYNC_SHARD_COUNT")
        return
    if moved:
        log.info("sync: shards resume from the oldest cursor their owners had: %s",
                 ", ".join(f"{name} from {time_us}" for name, time_us in moved.items()))


def jobs(settings) -> list:
    lookback = settings.sync_jetstream_max_lookback_us
    out = [Job("sync-cleanup", lambda: service.cleanup(sql.now_s(), lookback), CLEANUP_SECS, jitter=30.0, first_run_delay=60.0),
           Job("sync-sweep", lambda: backfill.sweep_due(sql.now_s, settings), SWEEP_SECS, jitter=30.0,
               first_run_delay=120.0)]
    out.append(Job("sync-people", lambda: people.refresh_due(sql.now_s()), people.RUN_SECS, jitter=5.0, first_run_delay=30.0))

    def writer():
        return app_writer(current_app)

    def run() -> None:
        if writer() is not None:
            Runner(writer(), settings).tick()

    def burst() -> None:
        if writer() is not None:
            backfill.burst(writer(), sql.now_s)

    # Not claimed: every worker process ticks its runner; lane leases (lanes.lease_lanes) keep the
    # total at MAX_LANES across the cluster.
    out += [Job("sync-runner", run, RUNNER_SECS, jitter=1.0, first_run_delay=10.0, claimed=False),
            Job("sync-backfill", burst, BACKFILL_SECS, jitter=2.0, first_run_delay=15.0)]
    return out
