"""The catalogue's tables may be dropped by an operator (nothing derived from the network is a
source of truth), so the catalogue re-creates any that are missing when a process starts, and a
read of a table dropped while the process runs answers as the empty catalogue instead of failing
(feather/network/absent.py).

The statements here are the shape migrations 0030, 0031 and 0050 leave, kept equal to a migrated
database by tests/test_network_droppable.py. A re-created table starts empty, with consequences:
- a lost part of the projection (records, rollup, tombstones, the rebuild's work list or its state)
  makes the rest of it untrustworthy, so the whole projection is emptied and, with indexing on,
  rebuilt from the relays;
- a lost `net_optout` forgets every opt-out, and a lost `net_attribution` names nobody: both are
  logged as warnings, because only the operator's own DROP can have done it.
"""
from __future__ import annotations

import logging

from feather import sql
from feather.db import current_dialect, db
from feather.network import store

log = logging.getLogger(__name__)

# The projection: emptied and rebuilt together (store.truncate_projection), with its state.
PROJECTION = ("net_subscription", "net_feed_rollup", "net_tombstone", "net_backfill_queue", "network_state")
CONSENT = ("net_optout", "net_attribution")


def statements(table: str) -> list[str]:
    """CREATE TABLE then its indexes, in this database's types."""
    d = current_dialect()
    t, big = d.byte_text, d.bigint
    return {
        "network_stat": [f"CREATE TABLE network_stat (key TEXT NOT NULL, source TEXT NOT NULL, value {big} NOT NULL,"
                         f" truncated INTEGER NOT NULL DEFAULT 0, observed_at TEXT NOT NULL, PRIMARY KEY (key, source))"],
        "net_subscription": [
            f"CREATE TABLE net_subscription (did TEXT NOT NULL, rkey TEXT NOT NULL, feed_url {t} NOT NULL,"
            f" created_at TEXT, indexed_at {big} NOT NULL, rev_us {big} NOT NULL, PRIMARY KEY (did, rkey))",
            "CREATE INDEX net_subscription_feed ON net_subscription (feed_url, did)",
            "CREATE INDEX net_subscription_indexed ON net_subscription (indexed_at, did, rkey)"],
        "net_feed_rollup": [
            f"CREATE TABLE net_feed_rollup (feed_url {t} PRIMARY KEY, subscriber_count INTEGER NOT NULL,"
            f" first_seen {big} NOT NULL, last_seen {big} NOT NULL)",
            "CREATE INDEX net_feed_rollup_count ON net_feed_rollup (subscriber_count DESC, feed_url)",
            "CREATE INDEX net_feed_rollup_recent ON net_feed_rollup (first_seen DESC, feed_url, subscriber_count)"],
        "network_state": [f"CREATE TABLE network_state (key TEXT PRIMARY KEY, value TEXT NOT NULL,"
                          f" updated_at {big} NOT NULL)"],
        "net_optout": [f"CREATE TABLE net_optout (did TEXT PRIMARY KEY, created_at {big} NOT NULL)"],
        "net_attribution": [f"CREATE TABLE net_attribution (did TEXT PRIMARY KEY, handle TEXT,"
                            f" created_at {big} NOT NULL, handle_checked_us {big} NOT NULL DEFAULT 0)"],
        "net_tombstone": [f"CREATE TABLE net_tombstone (did TEXT NOT NULL, rkey TEXT NOT NULL,"
                          f" time_us {big} NOT NULL, PRIMARY KEY (did, rkey))",
                          "CREATE INDEX net_tombstone_time ON net_tombstone (time_us)"],
        "net_backfill_queue": [f"CREATE TABLE net_backfill_queue (did TEXT PRIMARY KEY, state TEXT NOT NULL,"
                               f" records INTEGER NOT NULL DEFAULT 0, updated_at {big} NOT NULL)",
                               "CREATE INDEX net_backfill_queue_state ON net_backfill_queue (state, did)"],
    }[table]


TABLES = ("network_stat", *PROJECTION, *CONSENT)


def ensure() -> list[str]:
    """Re-create the catalogue's missing tables (one transaction); the names re-created. Does nothing
    on a database the migrations have not reached yet (no schema_version row for 0030)."""
    present = set(db.get_tables())
    missing = [table for table in TABLES if table not in present]
    if not missing or not _migrated(present):
        return []
    with db.atomic():
        for table in missing:
            for statement in statements(table):
                db.execute_sql(statement)
        if any(table in PROJECTION for table in missing):
            # With the rebuild's state gone too, the rebuild job (indexing on) finds no completed
            # rebuild recorded and starts one (rebuild.needs_rebuild).
            store.truncate_projection()
    for table in missing:
        if table in CONSENT:
            log.warning("network: table %s was missing and is re-created EMPTY: %s", table,
                        "every opt-out is forgotten" if table == "net_optout" else "nobody is named")
        else:
            log.warning("network: table %s was missing and is re-created empty%s", table,
                        "; the catalogue's projection is emptied and rebuilt" if table in PROJECTION else "")
    return missing


def _migrated(present: set[str]) -> bool:
    if "schema_version" not in present:
        return False
    return sql.execute("SELECT 1 FROM schema_version WHERE version = 30").fetchone() is not None
