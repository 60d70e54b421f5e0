"""The background workers: Jetstream consumers and the scheduler, in exactly one process.

A process runs them only while it holds the worker lock: a file lock beside the SQLite
database, or a PostgreSQL advisory lock held on a dedicated connection. Any other process
(a second gunicorn worker, a second `make run`) serves web only and says why in the log.
"""
from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

_PG_WORKER_LOCK_KEY = 0x6665617468657202


class FileWorkerLock:
    def __init__(self, path: Path):
        from filelock import FileLock

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = FileLock(str(path), thread_local=False)

    def acquire(self) -> bool:
        from filelock import Timeout

        try:
            self._lock.acquire(timeout=0)
            return True
        except Timeout:
            return False

    def release(self) -> None:
        if self._lock.is_locked:
            self._lock.release(force=True)

    def describe(self) -> str:
        return f"file lock {self.path}"


class PgWorkerLock:
    """A session-level advisory lock: it lives exactly as long as this process's connection."""

    def __init__(self, url: str):
        self.url = url
        self._conn = None

    def acquire(self) -> bool:
        import psycopg2

        conn = psycopg2.connect(self.url.replace("postgres://", "postgresql://", 1), connect_timeout=5)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s)", (_PG_WORKER_LOCK_KEY,))
            got = cur.fetchone()[0]
        if got:
            self._conn = conn
        else:
            conn.close()
        return bool(got)

    def release(self) -> None:
        if self._conn is not None:
            self._conn.close()  # closing the session releases the lock
            self._conn = None

    def describe(self) -> str:
        return "PostgreSQL advisory lock"


def worker_lock(settings):
    if settings.database_url.startswith("postgres"):
        return PgWorkerLock(settings.database_url)
    base = settings.sqlite_path or Path(settings.featherreader_data_dir) / "memory"
    return FileWorkerLock(Path(str(base) + ".workers.lock"))


class Workers:
    """Owns the lock, the consumers and the scheduler of one process."""

    def __init__(self, app):
        self.app = app
        self.settings = app.config["FEATHER"]
        self.lock = None
        self.scheduler = None
        self.engine = None
        self.running = False

    def start(self) -> bool:
        if self.settings.featherreader_disable_scheduler:
            log.info("background workers disabled by FEATHERREADER_DISABLE_SCHEDULER")
            return False
        lock = worker_lock(self.settings)
        if not lock.acquire():
            log.info("another process holds the %s and runs the background workers; "
                     "this process serves web only", lock.describe())
            return False
        self.lock = lock
        from feather import features
        from feather.jetstream.engine import Engine
        from feather.scheduler import build_scheduler

        self.engine = Engine(self.app, features.subscriptions(self.settings))
        self.engine.start()
        self.scheduler = build_scheduler(self.app, features.jobs(self.settings) + self.engine.jobs())
        self.scheduler.start()
        self.running = True
        log.info("background workers running (%d subscriptions, %d jobs) under the %s",
                 len(self.engine.subscriptions), len(self.scheduler.get_jobs()), lock.describe())
        return True

    def stop(self, timeout: float = 10.0) -> None:
        if not self.running:
            return
        self.running = False
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
        if self.engine is not None:
            self.engine.stop(timeout=timeout)
        if self.lock is not None:
            self.lock.release()
        log.info("background workers stopped")
