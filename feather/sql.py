"""The one way Feather runs a statement, and the one clock its rows are stamped with.

Statements are plain SQL written once with `?` placeholders (there are no models: every query is
small and its plan is pinned by tests); `q` turns them into the bound database's placeholder
style. Params are always one tuple. Modules import this module (`from feather import sql`) and
call `sql.rows(...)`, so a test that moves the clock patches `sql.now_us` once for everyone.
"""
from __future__ import annotations

import time

from feather.db import current_dialect, db


def q(statement: str) -> str:
    """`statement` in the bound database's placeholder style (`?` on SQLite, `%s` on PostgreSQL)."""
    return current_dialect().q(statement)


def execute(statement: str, params: tuple | list = ()):
    """Run one statement; returns the driver's cursor (`rowcount`, `fetchone`)."""
    return db.execute_sql(q(statement), tuple(params))


def rows(statement: str, params: tuple | list = ()) -> list[tuple]:
    return list(execute(statement, params).fetchall())


def one(statement: str, params: tuple | list = ()) -> tuple | None:
    """The first row, or None."""
    return execute(statement, params).fetchone()


def scalar(statement: str, params: tuple | list = (), default=None):
    """The first column of the first row; `default` when there is no row or it is NULL."""
    row = one(statement, params)
    return default if row is None or row[0] is None else row[0]


def now_us() -> int:
    """Wall-clock microseconds: the unit of Jetstream's `time_us` and of every `*_us` column."""
    return time.time_ns() // 1000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def now_s() -> int:
    return int(time.time())
