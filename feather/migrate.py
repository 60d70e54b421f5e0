"""Numbered, forward-only migrations from `migrations/NNNN_name.py`.

Each file defines `up(m)`; `m.execute(sql)` runs a statement and `m.d` is the dialect, so a
file can say `BIGINT` vs `INTEGER` once. Every migration runs in its own transaction under a
lock (an IMMEDIATE transaction on SQLite, an advisory lock on PostgreSQL) and re-checks the
version table inside it, so two processes starting at once apply each file exactly once.
"""
from __future__ import annotations

import importlib.util
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import peewee

from feather.dialect import Dialect, dialect_for

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.py$")
# Any fixed 64-bit number; it only has to be the same in every process of this app.
_PG_LOCK_KEY = 0x6665617468657201


@dataclass(frozen=True)
class MigrationFile:
    version: int
    name: str
    up: Callable


class _Context:
    def __init__(self, database: peewee.Database, dialect: Dialect):
        self.db = database
        self.d = dialect

    def execute(self, sql: str, params=()):
        return self.db.execute_sql(sql, params)


def discover(directory: Path = MIGRATIONS_DIR) -> list[MigrationFile]:
    found: dict[int, MigrationFile] = {}
    for path in sorted(directory.glob("*.py")):
        match = _FILE.match(path.name)
        if not match:
            continue
        version = int(match.group(1))
        if version in found:
            raise RuntimeError(f"two migrations share number {version:04d}: {found[version].name}, {match.group(2)}")
        spec = importlib.util.spec_from_file_location(f"feather_migration_{version:04d}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found[version] = MigrationFile(version, match.group(2), module.up)
    return [found[v] for v in sorted(found)]


def _ensure_version_table(database: peewee.Database, dialect: Dialect) -> None:
    with _locked_transaction(database, dialect):
        database.execute_sql(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)"
        )


class _locked_transaction:
    def __init__(self, database: peewee.Database, dialect: Dialect):
        self.database, self.dialect = database, dialect

    def __enter__(self):
        if self.dialect.is_sqlite:
            self.txn = self.database.transaction(lock_type="IMMEDIATE")
            self.txn.__enter__()
        else:
            self.txn = self.database.atomic()
            self.txn.__enter__()
            self.database.execute_sql(self.dialect.q("SELECT pg_advisory_xact_lock(?)"), (_PG_LOCK_KEY,))
        return self

    def __exit__(self, *exc):
        return self.txn.__exit__(*exc)


def applied_versions(database: peewee.Database) -> set[int]:
    return {row[0] for row in database.execute_sql("SELECT version FROM schema_version").fetchall()}


def upgrade(database: peewee.Database, directory: Path = MIGRATIONS_DIR) -> list[int]:
    """Apply every pending migration; return the versions this call applied."""
    dialect = dialect_for(database)
    applied_now: list[int] = []
    with database.connection_context():
        _ensure_version_table(database, dialect)
        for migration in discover(directory):
            if migration.version in applied_versions(database):
                continue
            with _locked_transaction(database, dialect):
                if migration.version in applied_versions(database):
                    continue  # another process got there while we waited for the lock
                migration.up(_Context(database, dialect))
                database.execute_sql(
                    dialect.q("INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)"),
                    (migration.version, migration.name, int(time.time())),
                )
            log.info("applied migration %04d_%s", migration.version, migration.name)
            applied_now.append(migration.version)
    return applied_now
