"""The background workers: Jetstream consumers and the scheduler, and who may run them.

SQLite (one machine): one process runs everything, chosen by a file lock beside the database;
any other process serves web only and stands by.

PostgreSQL (several processes): every process takes part, but each Jetstream subscription and
each scheduled job is *claimed* through a session-level advisory lock held on one dedicated
connection per process. A claim lives exactly as long as its owner's connection, so when a
process dies its subscriptions and jobs are free again and another process's claim loop
takes them within seconds. (A job may opt out with `claimed=False` when it coordinates through
the database itself: the sync runner leases lanes, see feather/sync/runner.py.)
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import gevent.lock
import psycopg2
from filelock import FileLock, Timeout
from gevent.event import Event

from feather import features
from feather.db import db
from feather.jetstream.engine import Engine
from feather.jetstream.tuning import Tuning
from feather.locks import lock_key
from feather.process.scheduler import build_scheduler
from feather.process.status import PUBLISH_SECS, Board
from feather.process.supervisor import supervise

log = logging.getLogger(__name__)


class FileClaims:
    """Whoever holds the file lock owns every claim; nobody else owns any."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = FileLock(str(path), thread_local=False)

    def acquire(self) -> bool:
        try:
            self._lock.acquire(timeout=0)
            return True
        except Timeout:
            return False

    def try_claim(self, name: str) -> bool:
        return self._lock.is_locked

    def alive(self) -> bool:
        return self._lock.is_locked

    def release(self) -> None:
        if self._lock.is_locked:
            self._lock.release(force=True)

    def describe(self) -> str:
        return f"file lock {self.path}"


class PgClaims:
    """Advisory locks on one connection; a greenlet lock serialises its use."""

    def __init__(self, url: str):
        self.url = url.replace("postgres://", "postgresql://", 1)
        self._conn = None
        self._mutex = gevent.lock.Semaphore()
        self.owned: set[str] = set()

    def acquire(self) -> bool:
        return True  # every process takes part; ownership is per claim

    def _cursor(self):
        if self._conn is None or self._conn.closed:
            self.owned.clear()  # a new session holds nothing
            # The OS pid in the name lets an operator (and the scale-out test) see in pg_locks /
            # pg_stat_activity which process owns which subscription and job.
            self._conn = psycopg2.connect(self.url, connect_timeout=5, application_name=f"feather-claims:{os.getpid()}")
            self._conn.autocommit = True
        return self._conn.cursor()

    def try_claim(self, name: str) -> bool:
        with self._mutex:
            if name in self.owned:
                return True
            try:
                with self._cursor() as cur:
                    cur.execute("SELECT pg_try_advisory_lock(%s)", (lock_key(name),))
                    got = bool(cur.fetchone()[0])
            except Exception as exc:
                log.warning("claims: could not reach PostgreSQL (%s)", exc)
                self._drop()
                return False
            if got:
                self.owned.add(name)
            return got

    def alive(self) -> bool:
        """False when the claim connection broke: every claim it held is gone."""
        with self._mutex:
            if self._conn is None:
                return True  # nothing held yet
            try:
                with self._conn.cursor() as cur:
                    cur.execute("SELECT 1")
                return True
            except Exception:
                self._drop()
                return False

    def _drop(self) -> None:
        self.owned.clear()
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
        self._conn = None

    def release(self) -> None:
        with self._mutex:
            self._drop()

    def describe(self) -> str:
        return "PostgreSQL advisory locks"


def claims_for(settings):
    if settings.database_url.startswith("postgres"):
        return PgClaims(settings.database_url)
    base = settings.sqlite_path or Path(settings.featherreader_data_dir) / "memory"
    return FileClaims(Path(str(base) + ".workers.lock"))


class Workers:
    """Owns the claims, the consumers and the scheduler of one process."""

    def __init__(self, app, tuning: Tuning | None = None):
        self.app = app
        self.tuning = tuning or Tuning()  # the streams' (feather/jetstream/tuning.py)
        self.settings = app.config["FEATHER"]
        self.claims = None
        self.scheduler = None
        self.engine = None
        self.board = None
        self._publisher = None
        self._stopping = None
        self.running = False

    def start(self) -> bool:
        if self.settings.featherreader_disable_scheduler:
            log.info("background workers disabled by FEATHERREADER_DISABLE_SCHEDULER")
            return False
        claims = claims_for(self.settings)
        if not claims.acquire():
            log.info("another process holds the %s and runs the background workers; "
                     "this process serves web only (standing by)", claims.describe())
            return False
        self.claims = claims
        self.board = Board()
        self._stopping = Event()
        self.engine = Engine(self.app, features.subscriptions(self.settings), claims=claims, board=self.board,
                             tuning=self.tuning)
        self.engine.start()
        self.scheduler = build_scheduler(self.app, features.jobs(self.settings), claim=claims.try_claim,
                                         board=self.board)
        self.scheduler.start()
        self._publisher = supervise(self.board.piece("task", "status-publisher"), self._publish_loop, self._stopping)
        self.running = True
        log.info("background workers running (%d subscriptions, %d jobs) under the %s",
                 len(self.engine.subscriptions), len(self.scheduler.get_jobs()), claims.describe())
        return True

    def publish(self) -> None:
        """Write this process's supervised pieces to worker_status (for /health and /admin)."""
        with self.app.app_context(), db.connection_context():
            self.board.publish()

    def _publish_loop(self) -> None:
        while True:
            self.publish()
            if self._stopping.wait(PUBLISH_SECS):
                return

    def stop(self, timeout: float = 10.0) -> None:
        if not self.running:
            return
        self.running = False
        self._stopping.set()
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
        if self.engine is not None:
            self.engine.stop(timeout=timeout)
        if self._publisher is not None:
            self._publisher.join(timeout=5)
            try:
                with self.app.app_context(), db.connection_context():
                    self.board.withdraw()  # this process runs nothing any more
            except Exception as exc:  # shutting down: the rows go stale on their own
                log.warning("could not withdraw the worker status rows: %s", exc)
        if self.claims is not None:
            self.claims.release()
        log.info("background workers stopped")
