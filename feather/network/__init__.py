"""The network catalogue (spec: /work/shared/specs/network.md, Capabilities 1 and 2, §7.2, §8).

Capability 1, on by default: a periodic relay count of repos holding rss subscription records.
Capability 2, off unless FEATHERREADER_NETWORK_INDEX: a projection of those public records
(live Jetstream + rebuild), shown only on /network above a k-anonymity floor.
Consent (opt-out without login, attribution opt-in with a session) is always served.
Capability 3 (the social join) is deliberately not built.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)

SUBSCRIPTION = "network"


def init_app(app) -> None:
    from feather.network import views

    views.init_app(app)
    from feather.network import cli

    cli.init_app(app)


def operator_status(settings) -> dict:
    """The catalogue's figures for /admin (feather/features.py collects them)."""
    from feather.network import operator

    return operator.status(settings)


def subscriptions(settings) -> list:
    from feather.jetstream.subscriptions import Handler, Subscription
    from feather.network.apply import handler
    from feather.network.relay import COLLECTION

    if not settings.featherreader_network_index:
        return []
    _before_stream_starts()
    # No max_lookback_us: on this trickle of a collection the cursor ages without any gap, so the
    # engine's age check would cry wolf daily. The heartbeat check in rebuild.needs_rebuild() is
    # the gap test that fits (how long the process was away, not how old the last event is).
    return [Subscription(SUBSCRIPTION, [COLLECTION],
                         [Handler("network", handler(settings), frozenset({COLLECTION}),
                                  identity_and_account=True)])]


def _before_stream_starts() -> None:
    """Seed the stream's cursor, and note a gap, before the engine loads the cursor and connects.

    Seeding: without a cursor, a stream that has applied no event reconnects "live" and silently
    skips whatever happened while it was away; with one, Jetstream replays from there. It also
    puts the stream's coverage before any rebuild's T0 (rebuild.py), which is what lets the
    rebuild and the live stream run side by side.
    Gap: this is the last moment the evidence exists. Once the stream replays, its cursor jumps
    to recent events and a boot after two days away would look like a boot after two seconds.
    """
    from feather.db import db
    from feather.jetstream import store as jstore
    from feather.network import rebuild

    opened = db.is_closed()
    try:
        if opened:
            db.connect()
        with db.atomic():
            if jstore.load_cursor(SUBSCRIPTION) is None:
                jstore.save_cursor(SUBSCRIPTION, jstore.Cursor(_now_us()))
            else:
                rebuild.note_gap_at_boot(_now_us())
    except Exception as exc:  # no tables yet, database down: the stream then starts live, as before
        log.warning("network: could not prepare the stream cursor: %s", exc)
    finally:
        if opened and not db.is_closed():
            db.close()


def _now_us() -> int:
    import time

    return int(time.time() * 1_000_000)


def jobs(settings) -> list:
    from feather.network import adoption, tasks as netjobs
    from feather.scheduler import Job

    found = []
    interval = settings.featherreader_adoption_interval_secs
    if interval > 0:
        # ±10 %: APScheduler adds uniform [0, jitter], so start at 90 % and jitter by 20 %.
        found.append(Job("network-adoption", lambda: adoption.run_job(settings), interval * 0.9,
                         jitter=interval * 0.2, first_run_delay=60.0))
    if settings.featherreader_network_index:
        found.append(Job("network-rebuild", lambda: netjobs.rebuild_tick(settings), netjobs.REBUILD_CHECK_SECS,
                         first_run_delay=5.0))
        found.append(Job("network-maintenance", lambda: netjobs.maintenance_tick(settings),
                         netjobs.MAINTENANCE_SECS, first_run_delay=1.0))
    return found
