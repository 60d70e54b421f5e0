"""The database: a peewee proxy bound at runtime (`bind`), so importing code that uses it touches nothing.

SQLite (default): WAL, busy_timeout 5 s, foreign keys on. PostgreSQL via DATABASE_URL.
A write transaction on SQLite never yields to another greenlet (sqlite3 calls are plain C
calls), which is why two greenlets of one process can share the file without deadlocking
inside SQLite's busy handler: keep network I/O out of transactions.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Callable
from urllib.parse import unquote, urlparse

import gevent
import peewee
import psycopg2
from flask import request
from gevent import monkey
from gevent.socket import wait_read, wait_write
from playhouse.pool import PooledPostgresqlDatabase
from psycopg2 import extensions

from feather.dialect import Dialect, dialect_for
from feather.sqlite_pool import SqlitePool

log = logging.getLogger(__name__)

db = peewee.DatabaseProxy()

# Every connection, chosen for one long-lived writer (the ingest batch) and many short readers:
SQLITE_PRAGMAS = {
    # Readers never wait for the writer and a commit appends to one file: no rollback journal.
    "journal_mode": "wal",
    # A writer from another process (a second gunicorn worker's sign-in) waits instead of failing.
    "busy_timeout": 5000,
    "foreign_keys": 1,
    # In WAL mode NORMAL fsyncs only at checkpoints, never at a commit: a batch commit is page
    # writes into the WAL. A power cut may lose the last batches, never corrupt the file; the
    # stream replays them from the saved cursor, which lives in the same transactions.
    "synchronous": "normal",
    # Measured with bench/ingest.py (every feature's handler): the default 2 MiB page cache cost
    # the writer page reads on every batch. 32 MiB is a cap, filled only by connections that
    # touch that much (the long-lived writers).
    "cache_size": -32_000,
    # Checkpoints (the one fsync) run in an OS thread beside the writer (checkpoint_soon), once a
    # second; fewer, larger checkpoints copy a hot page once instead of several times (measured:
    # every 0.25 s cost 40 % more in total). This is only the backstop for a process that
    # writes with nobody checkpointing: the commit that crosses ~400 MB of WAL checkpoints
    # itself.
    "wal_autocheckpoint": 100_000,
    # A WAL that starts over past this size is truncated to it. Above the size the writer lets
    # the WAL reach (WAL_BOUND_BYTES, below) so a busy writer rewrites the blocks it already has:
    # truncating to 64 MB made every cycle extend the file again, and on ext4 that cost commits a
    # quarter of their time (bench/ingest.py, every feature: 3.2-3.7 s of commits -> 2.3-2.8 s).
    # The price is up to this much WAL on disk while idle (never in memory).
    "journal_size_limit": 256 * 1024 * 1024,
    # Sorts and the batch statements' VALUES tables stay in memory instead of temp files.
    "temp_store": "memory",
}

CHECKPOINT_SECS = 1.0
# How long the WAL may grow while checkpoints run beside the writer before the writer waits for
# one (see Checkpointer.after_write). About a second of ingest at full speed, as the WAL reached before.
WAL_BOUND_BYTES = 192 * 1024 * 1024


def _checkpoint(path: str) -> tuple[int, int] | sqlite3.Error:
    """(frames in the WAL, frames copied back) as PRAGMA wal_checkpoint reports them, or the error
    when the file was locked (another process closing its last connection checkpoints under an
    exclusive lock). Returned, not raised: out of a pool thread gevent prints a traceback on stderr
    for a checkpoint the next batch simply tries again."""
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=0, check_same_thread=False)
        try:
            _busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            return frames, copied
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return exc


class Checkpointer:
    """The WAL checkpoints of one SQLite file: when the last began, and the one in flight.

    make_database gives every file database its own (`database.checkpointer`); `run`, `clock` and
    `wal_bound_bytes` are there for a test to replace on that one object.
    """

    def __init__(self, path: str, run: Callable[[str], object] = _checkpoint,
                 clock: Callable[[], float] = time.monotonic, wal_bound_bytes: int = WAL_BOUND_BYTES):
        self.path = path
        self.run = run
        self.clock = clock
        self.wal_bound_bytes = wal_bound_bytes
        self.last_started = float("-inf")
        self.running = None  # the gevent AsyncResult of the checkpoint in flight
        self._page_size: int | None = None

    def after_write(self, database: peewee.SqliteDatabase) -> None:
        """After a write transaction: once a CHECKPOINT_SECS, checkpoint the WAL in an OS thread
        (gevent's pool), and go on writing while it runs.

        A checkpoint copies the WAL back into the database file and fsyncs it. Left to
        wal_autocheckpoint, the batch writer's commit ran it inside the event loop: a third of all
        commit time on the ingest bench, during which no socket was read and no request answered.
        sqlite3 releases the GIL while it works, so in a thread it runs beside the next batches.
        PASSIVE never blocks readers or the writer; a busy or failed one is tried again later.

        The price: a WAL only starts over from its beginning when a checkpoint has copied all of it
        before the next write begins, which one racing the writer never does, so the WAL grows while
        they overlap. Each checkpoint reports the WAL's length; once that passes wal_bound_bytes the
        writer waits for the next one (a short one: its predecessors copied all but the last few
        batches), and its next write starts the WAL over. Measured on the ingest bench the writer
        used to wait here a fifth of its time (once a second)."""
        if database.in_transaction():
            return  # an outer transaction is still open: waiting here would yield inside it
        running = self.running
        if running is not None and not running.ready():
            return  # one at a time: the next batch looks again
        over = _frames(running) * self.page_size(database) >= self.wal_bound_bytes
        now = self.clock()
        if not over and now - self.last_started < CHECKPOINT_SECS:
            return
        self.last_started = now
        self.running = result = gevent.get_hub().threadpool.spawn(self.run, self.path)
        if over:
            result.wait()  # the writer idle: this one copies everything, and the WAL starts over
            _frames(result)  # (logs a failure)
            self.running = None  # its length is the WAL's before that restart: not a reason to wait again

    def wait(self, timeout: float | None = None) -> None:
        """Until the checkpoint in flight (if any) is done: before closing the last connection,
        which would race it for the file."""
        if self.running is not None:
            self.running.wait(timeout=timeout)

    def page_size(self, database: peewee.SqliteDatabase) -> int:
        if self._page_size is None:
            self._page_size = database.execute_sql("PRAGMA page_size").fetchone()[0]
        return self._page_size


def checkpoint_soon() -> None:
    """After a write transaction on a SQLite file: Checkpointer.after_write on the bound database's
    (PostgreSQL and an in-memory SQLite have none)."""
    database = db.obj
    checkpointer = getattr(database, "checkpointer", None)
    if checkpointer is not None:
        checkpointer.after_write(database)


def wait_for_checkpoint() -> None:
    """Until the bound database's checkpoint in flight is done (a no-op where there is none)."""
    checkpointer = getattr(db.obj, "checkpointer", None)
    if checkpointer is not None:
        checkpointer.wait()


def _frames(result) -> int:
    """The WAL length the finished checkpoint reported (0 when none ran or it failed)."""
    if result is None or not result.ready():
        return 0
    failure = result.exception if not result.successful() else result.value
    if isinstance(failure, BaseException):
        log.debug("sqlite: checkpoint skipped: %s", failure)
        return 0
    return result.value[0]


def make_database(url: str) -> peewee.Database:
    """Build (not connect) the database named by a DATABASE_URL."""
    if url.startswith("sqlite://"):
        if url == "sqlite://:memory:":
            return peewee.SqliteDatabase(":memory:", pragmas=SQLITE_PRAGMAS)
        path = Path(url[len("sqlite:///"):])
        path.parent.mkdir(parents=True, exist_ok=True)
        if _create_private(path):
            _create_sqlite_file(path)
        # Pooled (sqlite_pool.py): the pragmas run once per connection, not once per request.
        database = SqlitePool(str(path), pragmas=SQLITE_PRAGMAS, check_same_thread=False)
        database.checkpointer = Checkpointer(str(path))
        return database
    parsed = urlparse(url)
    _install_gevent_wait_callback()
    return PooledPostgresqlDatabase(
        parsed.path.lstrip("/"),
        user=unquote(parsed.username) if parsed.username else None,
        password=unquote(parsed.password) if parsed.password else None,
        host=parsed.hostname or "127.0.0.1",
        port=parsed.port or 5432,
        max_connections=32,
        stale_timeout=300,
        timeout=10,
        connect_timeout=5,
    )


def _create_private(path: Path) -> bool:
    """Create the SQLite file owner-only (0600) before SQLite does it with the umask (often 0644):
    it holds sealed tokens and every account's data. SQLite gives its -wal and -shm files the
    database file's mode, so they follow. An existing file's mode is the operator's choice.
    True when this call created the (empty) file."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    return True


def _create_sqlite_file(path: Path) -> None:
    """A new file starts with auto_vacuum=incremental, so a prune can give pages back to the file
    system (dialect.reclaim). It can only be set before the file's header is written (WAL mode
    writes it), hence once, here; as a per-connection pragma it would take a write lock at every
    connect. An existing file keeps its mode until a one-off VACUUM (the watermark counts pages
    in use either way)."""
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=5.0)
    try:
        conn.execute("PRAGMA auto_vacuum = incremental")
        conn.execute("PRAGMA journal_mode = wal")
    except sqlite3.OperationalError as exc:  # another process is creating it at the same moment
        log.info("sqlite: %s was being created elsewhere (%s); keeping its settings", path, exc)
    finally:
        conn.close()


def bind(url: str) -> peewee.Database:
    """Point the global proxy at the database named by url and return it."""
    database = make_database(url)
    db.initialize(database)
    return database


def current_dialect() -> Dialect:
    return dialect_for(db.obj)


@contextlib.contextmanager
def index_planned():
    """Inside a transaction: its statements plan by index, as Dialect.index_planning_sql says
    why; the session's own settings come back when the block ends (on an error the transaction
    is rolled back, and the settings with it)."""
    d = current_dialect()
    sql = d.index_planning_sql(True)
    if sql is None:
        yield
        return
    db.execute_sql(sql)
    yield
    db.execute_sql(d.index_planning_sql(False))


# Greenlets of this process waiting for PostgreSQL to answer a statement (the wait callback below).
# The Jetstream reader yields sooner while any is (Tuning.reader_yield_frames_awaited): an answer
# that has arrived waits for the loop's next poll.
_awaiting = [0]


def answers_awaited() -> bool:
    """Whether a greenlet of this process is waiting for a PostgreSQL answer right now."""
    return _awaiting[0] > 0


@contextlib.contextmanager
def awaiting_answer():
    _awaiting[0] += 1
    try:
        yield
    finally:
        _awaiting[0] -= 1


def _install_gevent_wait_callback() -> None:
    """psycopg2 blocks the whole hub unless told to wait through gevent; do so when patched."""
    if not monkey.is_module_patched("socket"):
        return

    def wait(conn, timeout=None):
        with awaiting_answer():
            while True:
                state = conn.poll()
                if state == extensions.POLL_OK:
                    return
                if state == extensions.POLL_READ:
                    wait_read(conn.fileno(), timeout=timeout)
                elif state == extensions.POLL_WRITE:
                    wait_write(conn.fileno(), timeout=timeout)
                else:  # pragma: no cover - defensive
                    raise psycopg2.OperationalError(f"bad poll state: {state}")

    extensions.set_wait_callback(wait)


# /health opens its connection inside its own error handling, to report failure as 503.
_MANAGES_OWN_CONNECTION = {"health.health"}


def init_app(app) -> None:
    """Take a connection per request and hand it back afterwards (as the peewee docs advise); a SQLite
    file and PostgreSQL pool them, so this is a check-out and a check-in, not an open and a close."""

    @app.before_request
    def _connect():
        if request.endpoint in _MANAGES_OWN_CONNECTION or request.endpoint == "static":
            return
        db.connect(reuse_if_open=True)

    @app.teardown_request
    def _close(exc):
        if not db.is_closed():
            db.close()
