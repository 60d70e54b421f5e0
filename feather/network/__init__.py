"""The network catalogue (docs/design.md, "The network catalogue").

Capability 1, on by default: a periodic relay count of repos holding rss subscription records.
Capability 2, off unless FEATHERREADER_NETWORK_INDEX: a projection of those public records
(live Jetstream + rebuild), shown only on /network above a k-anonymity floor.
Consent (opt-out without login, attribution opt-in with a session) is always served.
Capability 3 (the social join) is deliberately not built.
"""
from __future__ import annotations

import logging

from feather import sql
from feather.db import db
from feather.features import Job
from feather.jetstream import store as jstore
from feather.jetstream.subscriptions import Handler, Subscription
from feather.network import adoption, cli, operator, personal, rebuild, schema, store, views
from feather.network import tasks as netjobs
from feather.network.apply import handler
from feather.network.relay import COLLECTION

log = logging.getLogger(__name__)

SUBSCRIPTION = "network"


def init_app(app) -> None:
    views.init_app(app)
    personal.register(app)
    cli.init_app(app)


def ensure_schema(settings) -> None:
    """Process start: re-create any catalogue table an operator dropped (feather/network/schema.py)."""
    schema.ensure()


def operator_status(settings) -> dict:
    """The catalogue's figures for /admin (feather/features.py collects them)."""
    return operator.status(settings)


def subscriptions(settings) -> list:
    if not settings.featherreader_network_index:
        return []
    stale_us = settings.featherreader_net_stale_cursor_secs * 1_000_000
    # The lookback check runs at every (re)connect: after an outage or a watermark pause longer
    # than Jetstream keeps events, the replay cannot cover the gap and a rebuild must.
    return [Subscription(SUBSCRIPTION, [COLLECTION],
                         [Handler("network", handler(settings), frozenset({COLLECTION}),
                                  identity_and_account=True)],
                         max_lookback_us=stale_us, on_gap=_on_gap(stale_us),
                         # Run by the engine that claims the stream, once, before it loads the cursor;
                         # never by a mere reader of the list (the dev event injector): the one-shot
                         # rebuild's wipe must not follow every injected event.
                         extra={"prepare": lambda: before_stream_starts(settings)})]


def _on_gap(stale_us: int):
    def report(saved_time_us: int) -> None:
        try:
            with db.connection_context(), db.atomic():
                rebuild.note_gap(sql.now_us(), stale_us)  # a recent rebuild may already cover it
        except Exception:
            log.exception("network: could not record the stream's gap")
    return report


def before_stream_starts(settings) -> None:
    """Before the engine loads the stream's cursor and connects: the one-shot rebuild's wipe,
    seeding the cursor, and noting a gap.

    FEATHERREADER_NET_REBUILD: the catalogue is emptied here, before any stream has applied an
    event, so nothing indexed after boot is thrown away, and "Last updated" restarts with it.
    Seeding: without a cursor, a stream that has applied no event reconnects "live" and silently
    skips whatever happened while it was away; with one, Jetstream replays from there. It also
    puts the stream's coverage before any rebuild's T0 (rebuild.py), which is what lets the
    rebuild and the live stream run side by side.
    Gap: this is the last moment the evidence exists. Once the stream replays, its cursor jumps
    to recent events and a boot after two days away would look like a boot after two seconds.
    """

    opened = db.is_closed()
    try:
        if opened:
            db.connect()
        with db.atomic():
            if settings.featherreader_net_rebuild:
                log.warning("network: FEATHERREADER_NET_REBUILD=1: EMPTYING the network catalogue and rebuilding "
                            "it from the relays now. Unset the variable once this restart is done.")
                store.truncate_projection()
                store.clear_state("live.gap")
                jstore.forget_cursor(SUBSCRIPTION)
                store.set_state("rollup.updated_at", str(sql.now_us()))
            if jstore.load_cursor(SUBSCRIPTION) is None:
                jstore.save_cursor(SUBSCRIPTION, jstore.Cursor(sql.now_us()))
            else:
                rebuild.note_gap(sql.now_us(), settings.featherreader_net_stale_cursor_secs * 1_000_000)
            if settings.featherreader_net_rebuild:
                rebuild.start("FEATHERREADER_NET_REBUILD=1")  # T0 after the seeded cursor: no gap between
    except Exception as exc:  # no tables yet, database down: the stream then starts live, as before
        log.warning("network: could not prepare the stream cursor: %s", exc)
    finally:
        if opened and not db.is_closed():
            db.close()



def jobs(settings) -> list:
    found = []
    interval = settings.featherreader_adoption_interval_secs
    if interval > 0:
        # The job only asks whether a probe is due: the interval and its ±10 % are counted from
        # the last run, which the database remembers across restarts (adoption.run_if_due).
        found.append(Job("network-adoption", lambda: adoption.run_if_due(settings), adoption.check_every(interval),
                         first_run_delay=adoption.first_run_delay(interval)))
    if settings.featherreader_network_index:
        found.append(Job("network-rebuild", lambda: netjobs.rebuild_tick(settings), netjobs.REBUILD_CHECK_SECS,
                         first_run_delay=5.0))
        found.append(Job("network-maintenance", lambda: netjobs.maintenance_tick(settings),
                         netjobs.MAINTENANCE_SECS, first_run_delay=1.0))
    return found
