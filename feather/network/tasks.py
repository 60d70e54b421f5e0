"""The catalogue's scheduled work: the rebuild driver and a small maintenance tick.

The maintenance tick leaves a heartbeat (so a boot can tell how long the live stream was away),
forgets tombstones no rebuild can still need, and under disk pressure prunes the catalogue
first: it is what a stranger subscribed to, and everything else here is what users read.
"""
from __future__ import annotations

import logging

from feather.db import current_dialect, db
from feather.network import rebuild, store

log = logging.getLogger(__name__)

REBUILD_CHECK_SECS = 600.0
MAINTENANCE_SECS = 60.0
TOMBSTONE_KEEP_US = 7 * 24 * 3600 * 1_000_000
DISK_PRUNE_FRACTION = 0.10
DISK_PRUNE_MIN_ROWS = 1000

_boot_rebuild_done = False  # FEATHERREADER_NET_REBUILD acts once per process, at its first tick


def kit_from_settings(settings) -> rebuild.Kit:
    from feather.atproto.identity import resolver_from_settings
    from feather.network.httpclient import PacedClient, client_from_settings

    paced = PacedClient(client_from_settings(settings), interval=1.0)
    return rebuild.Kit(client_from_settings(settings), list(settings.featherreader_relay_hosts),
                       resolver_from_settings(settings, http=paced), paced)


def rebuild_tick(settings, kit: rebuild.Kit | None = None) -> None:
    global _boot_rebuild_done
    if settings.featherreader_net_rebuild and not _boot_rebuild_done:
        _boot_rebuild_done = True
        log.warning("network: FEATHERREADER_NET_REBUILD=1: EMPTYING the network catalogue and rebuilding it "
                    "from the relays now. Unset the variable once this restart is done.")
        with db.atomic():
            store.truncate_projection()
        rebuild.start("FEATHERREADER_NET_REBUILD=1")
    reason = rebuild.needs_rebuild()
    if reason is None:
        return
    if store.get_state("backfill.status") not in ("running", "retry"):
        rebuild.start(reason)
    rebuild.run(kit or kit_from_settings(settings), settings)


def maintenance_tick(settings) -> None:
    now = store.now_us()
    with db.atomic():
        store.set_state("live.heartbeat_us", str(now))
        t0 = int(store.get_state("backfill.cursor_us") or now)
        horizon = min(now - TOMBSTONE_KEEP_US, t0 - 1)
        db.execute_sql(current_dialect().q("DELETE FROM net_tombstone WHERE time_us < ?"), (horizon,))
    prune_for_disk_pressure(settings)


def prune_for_disk_pressure(settings) -> int:
    """Over the size watermark, drop the oldest catalogue rows; the reader's data is never touched here."""
    limit = settings.featherreader_db_size_watermark_bytes
    if not limit:
        return 0
    from feather.jetstream.store import db_size_bytes

    size = db_size_bytes()
    if size < limit:
        return 0
    total = db.execute_sql("SELECT count(*) FROM net_subscription").fetchone()[0]
    n = min(total, max(DISK_PRUNE_MIN_ROWS, int(total * DISK_PRUNE_FRACTION)))
    with db.atomic():
        touched: set[str] = set()
        removed = store.evict_oldest(n, touched)
        store.refresh_rollup(touched)
    if removed:
        log.warning("network: database is %d bytes (watermark %d): pruned the %d oldest catalogue rows first",
                    size, limit, removed)
    return removed
