"""The catalogue's scheduled work: the rebuild driver and a small maintenance tick.

The maintenance tick checks the live stream for a gap (rebuild.note_gap: its applied position,
never the clock), re-verifies attribution handles, forgets tombstones no rebuild can still
need, and under disk pressure prunes the catalogue first: it is what a stranger subscribed
to, and everything else here is what users read.
"""
from __future__ import annotations

import logging

from feather import diskguard, sql
from feather.atproto.identity import resolver_from_settings
from feather.db import current_dialect, db
from feather.jetstream.store import db_size_bytes
from feather.network import names, rebuild, store
from feather.network.httpclient import PacedClient, client_from_settings

log = logging.getLogger(__name__)

REBUILD_CHECK_SECS = 600.0
MAINTENANCE_SECS = 60.0
TOMBSTONE_KEEP_US = 7 * 24 * 3600 * 1_000_000
DISK_PRUNE_FRACTION = 0.10
DISK_PRUNE_MIN_ROWS = 1000
# What a prune deletes from, and so what it hands back to the file system afterwards.
CATALOGUE_TABLES = ("net_subscription", "net_feed_rollup", "net_tombstone")


def kit_from_settings(settings) -> rebuild.Kit:
    paced = PacedClient(client_from_settings(settings), interval=1.0)
    return rebuild.Kit(client_from_settings(settings), list(settings.featherreader_relay_hosts),
                       resolver_from_settings(settings, http=paced), paced)


def rebuild_tick(settings, kit: rebuild.Kit | None = None) -> None:
    reason = rebuild.needs_rebuild()
    if reason is None:
        return
    size = over_watermark(settings)
    if size is not None:
        # The reader always wins the disk: a rebuild writes rows, the prune would delete them.
        log.info("network rebuild: waiting, the disk is under pressure (the database %d bytes)", size)
        return
    if store.get_state("backfill.status") not in ("running", "retry"):
        rebuild.start(reason)
    rebuild.run(kit or kit_from_settings(settings), settings)


def maintenance_tick(settings, resolver=None) -> None:
    now = sql.now_us()
    with db.atomic():
        rebuild.note_gap(now, settings.featherreader_net_stale_cursor_secs * 1_000_000)
        t0 = int(store.get_state("backfill.cursor_us") or now)
        horizon = min(now - TOMBSTONE_KEEP_US, t0 - 1)
        store.sweep_tombstones(horizon)
    prune_for_disk_pressure(settings)
    if resolver is None:
        resolver = resolver_from_settings(settings)
    names.refresh(resolver, now)


def db_size() -> int:
    return db_size_bytes()


def over_watermark(settings) -> int | None:
    """The database's size while the disk is under pressure (feather/diskguard.py), else None."""
    found = diskguard.pressure(settings)
    return None if found is None else found.size


def prune_for_disk_pressure(settings) -> int:
    """Under disk pressure (the byte watermark, or the disk's free space), drop the oldest catalogue
    rows until it is relieved.

    A slice at a time (10 %, at least 1,000 rows), each followed by reclaiming the space and
    measuring again, so it stops as soon as it is under: the engine's own watermark check
    (the same measure) then resumes the streams. The reader's data is never touched here; if
    the catalogue is gone and the database is still over, that is the reader's to solve.
    """

    found = diskguard.pressure(settings)
    if found is None:
        return 0
    start, removed, reason = found.size, 0, found.reason
    while found is not None:
        total = sql.execute("SELECT count(*) FROM net_subscription").fetchone()[0]
        if not total:
            break
        with db.atomic():
            touched: set[str] = set()
            removed += store.evict_oldest(min(total, max(DISK_PRUNE_MIN_ROWS, int(total * DISK_PRUNE_FRACTION))),
                                          touched)
            store.refresh_rollup(touched)
        current_dialect().reclaim(db, CATALOGUE_TABLES)
        found = diskguard.pressure(settings)
    if removed:
        log.warning("network: %s (the database %d bytes): pruned the %d oldest catalogue rows first; now %d bytes%s",
                    reason, start, removed, db_size(), "" if found is None else ", still pressed: the catalogue is empty")
    return removed
