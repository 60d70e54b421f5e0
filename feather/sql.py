"""The one way Feather runs a statement, and the one clock its rows are stamped with.

Statements are plain SQL written once with `?` placeholders (there are no models: every query is
small and its plan is pinned by tests); `q` turns them into the bound database's placeholder
style. Params are always one tuple. Modules import this module (`from feather import sql`) and
call `sql.rows(...)`, so a test that moves the clock patches `sql.now_us` once for everyone.

Inside `one_round_trip()` a write whose result no one reads (`write`) waits, and goes to
PostgreSQL with the next statement that is run, or when the block ends: one round trip for many
statements, in the order they were written. Each round trip cost an ingest batch about 0.1 ms on
the wire plus the wait for the event loop to resume the writer, and a batch ran about fifty
(docs/performance.md, "Issue 36, fourth pass").
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from feather.db import current_dialect, db

# The writes waiting in this greenlet's one_round_trip block (None outside one), each already
# bound by the driver: PostgreSQL's text with its values in place.
_waiting: ContextVar[list[bytes] | None] = ContextVar("feather_sql_waiting", default=None)


def q(statement: str) -> str:
    """`statement` in the bound database's placeholder style (`?` on SQLite, `%s` on PostgreSQL)."""
    return current_dialect().q(statement)


def execute(statement: str, params: tuple | list = ()):
    """Run one statement; returns the driver's cursor (`rowcount`, `fetchone`). Writes waiting
    in a one_round_trip block go first, in the same round trip."""
    waiting = _waiting.get()
    if waiting:
        waiting.append(_bound(statement, params))
        return _send(waiting)
    return db.execute_sql(q(statement), tuple(params))


def write(statement: str, params: tuple | list = ()) -> None:
    """Run a statement whose result (rows, rowcount) no one reads: inside one_round_trip it waits
    for the next round trip; elsewhere it runs now."""
    waiting = _waiting.get()
    if waiting is None:
        db.execute_sql(q(statement), tuple(params))
    else:
        waiting.append(_bound(statement, params))


@contextmanager
def one_round_trip() -> Iterator[None]:
    """Writes inside (`write`) wait and go to the server together. Only for a block that talks to
    the database through this module alone: a statement run past it (peewee's execute_sql, a
    savepoint) would overtake the writes waiting. On an error nothing waiting is sent (the
    transaction around is rolled back). SQLite has no round trips to save: there `write` runs at
    once, as outside."""
    if current_dialect().is_sqlite or _waiting.get() is not None:
        yield
        return
    waiting: list[bytes] = []
    token = _waiting.set(waiting)
    try:
        yield
        if waiting:
            _send(waiting)
    finally:
        _waiting.reset(token)


def _bound(statement: str, params: tuple | list) -> bytes:
    return db.cursor().mogrify(q(statement), tuple(params))


def _send(waiting: list[bytes]):
    """The statements as one message (PostgreSQL runs them in order, inside the transaction; the
    cursor holds the last one's result). Through execute_sql like every statement: with no
    parameters left to bind, a literal % is written %%."""
    text = b";\n".join(waiting).replace(b"%", b"%%")
    waiting.clear()
    return db.execute_sql(text, ())


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
