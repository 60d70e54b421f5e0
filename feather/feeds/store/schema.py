"""The per-collection records tables, created from the feeds config when a process starts.

They depend on the operator's TOML (one `feed_records_<short>` per collection), so a numbered
migration cannot name them. `ensure()` runs right after the migrations (`flask db upgrade`, and
every web or worker process as it starts: the feature's ensure_schema hook, feather/features.py),
so a batch, a request or a job finds them in place. It is idempotent (`CREATE … IF NOT EXISTS`); on PostgreSQL
a transaction-scoped advisory lock keeps two processes from racing on the catalog. Renaming a
short name starts an empty table.
"""
from __future__ import annotations

from feather import sql
from feather.db import current_dialect, db
from feather.feeds.store import search, serial
from feather.feeds.config import FeedsConfig

_PG_DDL_LOCK_KEY = 0x6665617468657210


def subject_expr(alias: str = "r") -> str:
    """The follow record's `$.subject`, written exactly as the index is (so the planner uses it)."""
    return current_dialect().json_text(f"{alias}.record" if alias else "record", "subject")


def _objects(config: FeedsConfig) -> list[tuple[str, str, bool]]:
    """(statement, the table or index it names, whether that object exists afterwards)."""
    d = current_dialect()
    t = d.byte_text
    out: list[tuple[str, str, bool]] = []
    follows = {config.collections[f.follow].short for f in config.feeds.values()}

    def add(statement: str, name: str, present: bool = True) -> None:
        out.append((statement, name, present))

    for c in config.collections.values():
        add(
            f"CREATE TABLE IF NOT EXISTS {c.table} ("
            f" uri {t} PRIMARY KEY,"
            f" did {t} NOT NULL,"
            f" rkey TEXT NOT NULL,"
            f" cid TEXT,"
            f" record TEXT,"
            f" time_us {d.bigint} NOT NULL,"
            f" indexed_at {d.bigint} NOT NULL,"
            f" arrival {d.bigint} NOT NULL)", c.table
        )
        # Author's newest records: follow backfill, bootstrap, hybrid merge, listRecords?actor=.
        add(f"CREATE INDEX IF NOT EXISTS {c.table}_did_time ON {c.table} (did, time_us DESC)", f"{c.table}_did_time")
        # listRecords over the whole collection, newest first with the uri tie-break. Only where
        # listRecords is served (follows and profiles are private by default): on every other
        # table it would be one more index write per ingested record for no read.
        if "listRecords" in config.methods_of(c.short):
            add(f"CREATE INDEX IF NOT EXISTS {c.table}_time ON {c.table} (time_us DESC, uri)", f"{c.table}_time")
        else:
            add(f"DROP INDEX IF EXISTS {c.table}_time", f"{c.table}_time", present=False)
        if c.short in follows:
            # The fan-out join: every follower of an author, covering (subject → did).
            add(f"CREATE INDEX IF NOT EXISTS {c.table}_subject ON {c.table} "
                f"({d.json_text('record', 'subject')}, did)", f"{c.table}_subject")
    # Full-text indexes of the searchable collections (store/search.py), and none of the others.
    out += search.objects(config)
    return out


def ensure(config: FeedsConfig) -> None:
    """Create the records tables for this config if they are missing. Run once when a process
    starts (feather.feeds.ensure_schema), never by a batch, a request or a job."""
    objects = _objects(config)
    found = _found(objects)
    if all((name in found) == present for _, name, present in objects):
        # One catalog read instead of a dozen DDL statements. On PostgreSQL even a CREATE INDEX
        # IF NOT EXISTS of an index that exists takes its table's SHARE lock, held to commit: run
        # by a web process starting up while the ingest batch wrote, it deadlocked the batch
        # (which was replayed).
        return
    d = current_dialect()
    with db.atomic():
        # Creating takes table locks: queue with every writer of these tables first, in the order
        # the ingest batch takes the two locks, so the DDL never waits on a batch holding a row.
        serial.lock_writes()
        if not d.is_sqlite:
            sql.execute("SELECT pg_advisory_xact_lock(?)", (_PG_DDL_LOCK_KEY,))
        for statement, _, _ in objects:
            sql.execute(statement)
        for c in search.searchable(config):
            if not search.names(c) <= found:  # a new index: what is stored already is indexed now
                search.rebuild(c)


def _found(objects: list[tuple[str, str, bool]]) -> set[str]:
    """Which of the objects the statements name exist (one catalog read)."""
    d = current_dialect()
    names = [name for _, name, _ in objects]
    marks = ", ".join("?" * len(names))
    if d.is_sqlite:
        statement = f"SELECT name FROM sqlite_master WHERE name IN ({marks})"
    else:
        statement = (f"SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
               f" WHERE n.nspname = current_schema() AND c.relname IN ({marks})")
    return {row[0] for row in sql.rows(statement, names)}

