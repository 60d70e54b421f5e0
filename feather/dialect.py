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

    # --- full-text search (feeds/store/search.py builds the words; only their storage differs)
    def search_objects(self, table: str) -> list[tuple[str, str]]:
        """(DDL, the object it names) for one collection's search index, keyed by record URI.

        SQLite: `table` maps each URI to a docid (its INTEGER PRIMARY KEY, which VACUUM keeps,
        unlike a records table's implicit rowid) and `<table>_fts`, an FTS5 table whose rowid is
        that docid. Its `ascii` tokenizer splits only on ASCII punctuation and spaces, so the words
        search.py wrote, joined by spaces, come back exactly. PostgreSQL: one table with the words
        as a tsvector and a GIN index over it."""
        if not table.replace("_", "").isalnum():
            raise ValueError(f"unsafe table name: {table!r}")
        if self.is_sqlite:
            return [(f"CREATE TABLE IF NOT EXISTS {table} (docid INTEGER PRIMARY KEY, uri TEXT NOT NULL UNIQUE)",
                     table),
                    (f"CREATE VIRTUAL TABLE IF NOT EXISTS {table}_fts USING fts5(body, tokenize = 'ascii')",
                     f"{table}_fts")]
        return [(f'CREATE TABLE IF NOT EXISTS {table} (uri TEXT COLLATE "C" PRIMARY KEY, doc tsvector NOT NULL)',
                 table),
                (f"CREATE INDEX IF NOT EXISTS {table}_doc ON {table} USING GIN (doc)", f"{table}_doc")]

    def search_upsert_sql(self, table: str, rows: int) -> list[str]:
        """Statements that (re)index `rows` records; each takes the same parameters, (uri, document)
        per row, the document as search_document made it."""
        v = self.values_cte("v", ("uri", "doc"), rows)
        if self.is_sqlite:
            # FTS5 takes OR REPLACE: an edited record's old words go with its old row, in one
            # statement rather than a delete of every row first (nearly all are new).
            return [f"{v} INSERT INTO {table} (uri) SELECT uri FROM v WHERE true ON CONFLICT (uri) DO NOTHING",
                    f"{v} INSERT OR REPLACE INTO {table}_fts (rowid, body)"
                    f" SELECT k.docid, v.doc FROM v JOIN {table} k ON k.uri = v.uri"]
        return [f"{v} INSERT INTO {table} (uri, doc) SELECT uri, CAST(doc AS tsvector) FROM v"
                " ON CONFLICT (uri) DO UPDATE SET doc = excluded.doc"]

    def search_delete_sql(self, table: str, uris: str) -> list[str]:
        """Statements that remove the index rows of the URIs `uris` lists (bound values, or a
        SELECT of a records table); each takes the same parameters, those of `uris`."""
        if self.is_sqlite:
            return [f"DELETE FROM {table}_fts WHERE rowid IN (SELECT docid FROM {table} WHERE uri IN ({uris}))",
                    f"DELETE FROM {table} WHERE uri IN ({uris})"]
        return [f"DELETE FROM {table} WHERE uri IN ({uris})"]

    def search_join(self, table: str, alias: str = "s", probe: bool = False) -> tuple[str, str]:
        """(a JOIN of the index to the records alias `r` keeping only matches, taking the query as
        its one parameter; the relevance, higher is better). SQLite's bm25 is lower-is-better
        and weighs each word by how rare it is in the collection; PostgreSQL's ts_rank counts
        the words' occurrences in the one record, so the two order matches alike but not equally.

        probe: the rows come from a smaller table joined before (a reader's timeline), so each is
        probed in the index by rowid, instead of every match in the collection joined to them
        (SQLite, which plans without statistics, keeps a CROSS JOIN's order; PostgreSQL's planner
        weighs the two with its statistics)."""
        if not (table + alias).replace("_", "").isalnum():
            raise ValueError(f"unsafe identifier: {table!r}, {alias!r}")
        if self.is_sqlite:
            join = "CROSS JOIN" if probe else "JOIN"
            return (f"{join} {table} {alias}_k ON {alias}_k.uri = r.uri {join} {table}_fts {alias}"
                    f" ON {alias}.rowid = {alias}_k.docid AND {alias}.{table}_fts MATCH ?",
                    f"(-bm25({alias}.{table}_fts))")
        return (f"CROSS JOIN (SELECT CAST(? AS tsquery) AS q) {alias}_q"
                f" JOIN {table} {alias} ON {alias}.uri = r.uri AND {alias}.doc @@ {alias}_q.q",
                f"CAST(ts_rank({alias}.doc, {alias}_q.q) AS DOUBLE PRECISION)")

    def search_document(self, words: list[str]) -> str:
        """The stored form of a record's words (letters, digits and marks only: no quote, no space)."""
        if self.is_sqlite:
            return " ".join(words)
        positions: dict[str, list[str]] = {}
        for i, word in enumerate(words, 1):
            positions.setdefault(word, []).append(str(i))
        return " ".join(f"{_tsquote(w)}:{','.join(p)}" for w, p in positions.items())

    def search_query(self, groups) -> str:
        """The match expression for groups (every group must match; a group is terms joined by
        OR; a term is (words, prefix): one word, or a phrase of adjacent words, the last one a
        prefix when prefix is true). Built only from search.py's words, never from raw text."""
        def term(words, prefix):
            if self.is_sqlite:
                return '"' + " ".join(words) + '"' + ("*" if prefix else "")
            parts = [_tsquote(w) for w in words]
            if prefix:
                parts[-1] += ":*"
            return parts[0] if len(parts) == 1 else "(" + " <-> ".join(parts) + ")"

        joiner = (" OR ", " AND ") if self.is_sqlite else (" | ", " & ")
        out = []
        for group in groups:
            terms = [term(words, prefix) for words, prefix in group]
            out.append(terms[0] if len(terms) == 1 else "(" + joiner[0].join(terms) + ")")
        return joiner[1].join(out)

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


def _tsquote(word: str) -> str:
    """A word as a tsvector/tsquery lexeme literal, taken as is (no parser, no dictionary)."""
    return "'" + word.replace("\\", "\\\\").replace("'", "''") + "'"


SQLITE = Dialect("sqlite")
POSTGRESQL = Dialect("postgresql")


def dialect_for(database: peewee.Database) -> Dialect:
    return POSTGRESQL if isinstance(database, peewee.PostgresqlDatabase) else SQLITE
