"""The SQL that differs between SQLite and PostgreSQL, and nothing else.

Both databases accept `INSERT … ON CONFLICT … DO NOTHING/UPDATE` and `excluded.col`, so
upserts are written once; what remains here is DDL types, JSON extraction, scalar max,
row claiming (FOR UPDATE SKIP LOCKED, advisory transaction locks), size probes, space
reclamation and query-plan inspection.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass

import peewee

# Bound parameters one statement may carry: SQLite's default limit (32,766 since 3.32, 999
# before) and PostgreSQL's protocol limit (65,535). Batch statements are chunked under it.
_SQLITE_MAX_PARAMS = 32_766 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999


@dataclass(frozen=True)
class Dialect:
    name: str  # "sqlite" | "postgresql"

    @property
    def is_sqlite(self) -> bool:
        return self.name == "sqlite"

    def q(self, sql: str) -> str:
        """Write SQL once with `?` placeholders; PostgreSQL's driver wants `%s` (and `%%`)."""
        if self.is_sqlite:
            return sql
        return sql.replace("%", "%%").replace("?", "%s")

    # --- DDL
    @property
    def id_pk(self) -> str:
        return "INTEGER PRIMARY KEY AUTOINCREMENT" if self.is_sqlite else "BIGSERIAL PRIMARY KEY"

    @property
    def bigint(self) -> str:
        return "INTEGER" if self.is_sqlite else "BIGINT"

    @property
    def boolean(self) -> str:
        return "INTEGER" if self.is_sqlite else "BOOLEAN"

    @property
    def false(self) -> str:
        return "0" if self.is_sqlite else "FALSE"

    @property
    def true(self) -> str:
        return "1" if self.is_sqlite else "TRUE"

    @property
    def max_params(self) -> int:
        return _SQLITE_MAX_PARAMS if self.is_sqlite else 65_535

    # --- batch statements (feeds ingest)
    def values_cte(self, name: str, columns: tuple[str, ...], rows: int) -> str:
        """`WITH name(cols) AS (VALUES (?, …), …)`: a batch's rows as a table both databases
        join against, so one statement serves every row (rows × len(columns) parameters)."""
        for ident in (name, *columns):
            if not ident.replace("_", "").isalnum():
                raise ValueError(f"unsafe identifier: {ident!r}")
        row = "(" + ", ".join("?" * len(columns)) + ")"
        return f"WITH {name}({', '.join(columns)}) AS (VALUES {', '.join([row] * rows)})"

    def newest_per_row(self, table: str, alias: str, match: str, order: str, key: str = "uri") -> str:
        """A join that keeps, for each row of the preceding FROM item, the first LIMIT ? rows of
        `table` matching `match` in `order` (bounded by the index that serves match + order).

        PostgreSQL has LATERAL for this. SQLite has not; its correlated `IN (… LIMIT ?)` on the
        primary key runs the same index walk per outer row, then looks each key up. `match`
        and `order` name the table's columns with the `{alias}_n` prefix."""
        for ident in (table, alias, key):
            if not ident.replace("_", "").isalnum():
                raise ValueError(f"unsafe identifier: {ident!r}")
        inner = f"{alias}_n"
        if self.is_sqlite:
            return (f"JOIN {table} {alias} ON {alias}.{key} IN (SELECT {inner}.{key} FROM {table} {inner}"
                    f" WHERE {match} ORDER BY {order} LIMIT ?)")
        return f"CROSS JOIN LATERAL (SELECT * FROM {table} {inner} WHERE {match} ORDER BY {order} LIMIT ?) {alias}"

    # --- expressions
    def json_text(self, column: str, key: str) -> str:
        """A top-level JSON member as text, usable in an expression index on both databases."""
        if not key.replace("_", "").isalnum():
            raise ValueError(f"unsafe JSON key: {key!r}")
        if self.is_sqlite:
            return f"json_extract({column}, '$.{key}')"
        return f"(({column})::jsonb ->> '{key}')"

    def json_path_text(self, column: str, path: tuple[str, ...] | list[str]) -> str:
        """A nested JSON member (path already validated as identifiers) as text. (feeds)"""
        if not path or not all(p.replace("_", "").isalnum() for p in path):
            raise ValueError(f"unsafe JSON path: {path!r}")
        if len(path) == 1:
            return self.json_text(column, path[0])
        if self.is_sqlite:
            return f"json_extract({column}, '$.{'.'.join(path)}')"
        return f"(({column})::jsonb #>> '{{{','.join(path)}}}')"

    def at_uri_did(self, expr: str) -> str:
        """The authority of an at:// URI (`at://<did>/…` → `<did>`), '' when it has no path. (feeds)"""
        if self.is_sqlite:
            return f"substr({expr}, 6, instr(substr({expr}, 6), '/') - 1)"
        return f"split_part({expr}, '/', 3)"

    @property
    def byte_text(self) -> str:
        """TEXT that compares byte-wise on both databases, so prefix ranges and keyset order agree. (feeds)"""
        return "TEXT" if self.is_sqlite else 'TEXT COLLATE "C"'

    def greatest(self, a: str, b: str) -> str:
        return f"max({a}, {b})" if self.is_sqlite else f"GREATEST({a}, {b})"

    # --- claiming rows across processes (sync lanes)
    def skip_locked(self, alias: str) -> str:
        """Appended to a SELECT that claims rows: on PostgreSQL, lock the chosen rows of `alias` and
        pass over rows another transaction holds. SQLite has one writer process and a transaction
        never yields to another greenlet, so there is nothing to lock or skip."""
        if not alias.replace("_", "").isalnum():
            raise ValueError(f"unsafe alias: {alias!r}")
        return "" if self.is_sqlite else f" FOR UPDATE OF {alias} SKIP LOCKED"

    def xact_lock_sql(self, key: int) -> str | None:
        """A statement that serialises transactions on `key` until commit (PostgreSQL: a
        transaction-level advisory lock); None on SQLite, where write transactions already are."""
        return None if self.is_sqlite else f"SELECT pg_advisory_xact_lock({int(key)})"

    def xact_lock_pair_sql(self, space: int, key: int) -> str | None:
        """Like xact_lock_sql, on a (32-bit space, 32-bit key) pair: PostgreSQL keeps these apart
        from the single 64-bit keys (claims, migrations), so hashing many names into one space
        can never wait on a session-level claim. None on SQLite."""
        for n in (space, key):
            if not -2**31 <= int(n) < 2**31:
                raise ValueError(f"advisory lock key {n} does not fit in 32 bits")
        return None if self.is_sqlite else f"SELECT pg_advisory_xact_lock({int(space)}, {int(key)})"

    # --- probes
    def size_bytes_sql(self) -> str:
        """Bytes the database holds in live data: what the disk watermark compares.

        SQLite: pages in use (the file's pages minus the freelist). Deleting rows moves pages to
        the freelist without shrinking the file; new writes reuse them first, so pages in use is
        what grows the file, and what a delete gives back. PostgreSQL: the database's size on
        disk, which reclaim_sql() shrinks after a delete."""
        if self.is_sqlite:
            return ("SELECT (page_count - freelist_count) * page_size"
                    " FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()")
        return "SELECT pg_database_size(current_database())"

    def reclaim(self, database: peewee.Database, tables: tuple[str, ...] | list[str]) -> None:
        """Give the space of deleted rows back (outside any transaction).

        SQLite: an incremental vacuum returns free pages to the file system where the database
        was created with auto_vacuum=incremental (db.make_database; a no-op otherwise, and the
        size measure above already discounts free pages). It runs through executescript because
        the sqlite3 module steps a row-less statement once, and each step frees one page.
        PostgreSQL: a plain VACUUM only makes the space reusable inside the table, and
        pg_database_size would never come back under the watermark, so the tables are rewritten
        (VACUUM FULL holds an exclusive lock on each table while it is copied: seconds for the
        catalogue's 200,000-row cap)."""
        for table in tables:
            if not table.replace("_", "").isalnum():
                raise ValueError(f"unsafe table name: {table!r}")
        if self.is_sqlite:
            database.connection().executescript("PRAGMA incremental_vacuum;")
            return
        for table in tables:
            database.execute_sql(f"VACUUM FULL {table}")

    def index_planning_sql(self, on: bool) -> str | None:
        """PostgreSQL: while on, plan joins as index nested loops and never a Seq Scan where an
        index can serve (SET LOCAL: this transaction only; off restores the session's settings).

        For statements that are index-bounded by design (the ingest batch's, pinned by the EXPLAIN
        guardrail). Their tables grow faster than autovacuum's ANALYZE follows, and on stale
        statistics the planner guessed that a 500-row VALUES table would match a large share of
        feed_items and hashed a Seq Scan of all of it, per batch. These only add a cost to the
        other paths, so a statement no index can serve still plans (and the guardrail catches it).
        """
        if self.is_sqlite:
            return None
        value = "= off" if on else "TO DEFAULT"
        return "; ".join(f"SET LOCAL enable_{path} {value}" for path in ("seqscan", "hashjoin", "mergejoin"))

    def explain(self, database: peewee.Database, sql: str, params=()) -> list[str]:
        """The query plan as lines of text, for tests that forbid bare table scans."""
        if self.is_sqlite:
            rows = database.execute_sql("EXPLAIN QUERY PLAN " + sql, params).fetchall()
            return [row[-1] for row in rows]
        rows = database.execute_sql("EXPLAIN " + sql, params).fetchall()
        return [row[0] for row in rows]

    def has_full_scan(self, plan: list[str], table: str) -> bool:
        if self.is_sqlite:
            return any(line.startswith(f"SCAN {table}") and "USING" not in line for line in plan)
        return any(f"Seq Scan on {table}" in line for line in plan)


SQLITE = Dialect("sqlite")
POSTGRESQL = Dialect("postgresql")


def dialect_for(database: peewee.Database) -> Dialect:
    return POSTGRESQL if isinstance(database, peewee.PostgresqlDatabase) else SQLITE
