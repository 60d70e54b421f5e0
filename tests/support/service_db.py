"""A read-only look at a running or stopped service's database, for the whole-process tests.

The service owns its database; a test only reads it, next to what it checks over HTTP, to see
what HTTP cannot show (rows no page lists, who holds a lease). SQLite opens the file with
`mode=ro`, PostgreSQL with read-only transactions, so a test can never write behind the service.
"""
from __future__ import annotations

import contextlib
import sqlite3
from typing import Callable, Iterator

Query = Callable[[str, list], list[tuple]]


@contextlib.contextmanager
def read_only(database_url: str) -> Iterator[Query]:
    """Yields run_all(sql, params) -> rows; `?` placeholders on both databases."""
    if database_url.startswith("sqlite"):
        conn = sqlite3.connect(f"file:{database_url.split(':///', 1)[1]}?mode=ro", uri=True)
        try:
            yield lambda sql, params=(): conn.execute(sql, list(params)).fetchall()
        finally:
            conn.close()
        return
    import psycopg2

    conn = psycopg2.connect(database_url, options="-c default_transaction_read_only=on")
    conn.autocommit = True  # each query sees what the service has committed by then
    cur = conn.cursor()

    def run_all(sql: str, params=()) -> list[tuple]:
        cur.execute(sql.replace("?", "%s"), list(params))
        return cur.fetchall()
    try:
        yield run_all
    finally:
        conn.close()
