"""SQLite WAL checkpoints leave the event loop (feather/db.py Checkpointer, through checkpoint_soon).

A checkpoint fsyncs the database file; run by the batch writer's commit it held every greenlet
of the process. Now the batch transaction (jetstream/store.py apply_batch) hands it to an OS
thread once a second and writes on while it runs, until the WAL passes its bound.
"""
from __future__ import annotations

import pytest
from gevent import monkey

from feather import db as dbmod
from feather.db import db
from feather.jetstream import store
from feather.jetstream.events import CommitEvent
from feather.jetstream.subscriptions import Handler, Subscription
from tests.conftest import PG_URL

pytestmark = pytest.mark.skipif(bool(PG_URL), reason="SQLite's WAL")
os_thread_id = monkey.get_original("_thread", "get_ident")


def _write(name: str):
    def apply(events) -> None:
        for event in events:
            db.execute_sql("INSERT INTO jetstream_cursor (name, time_us, updated_at) VALUES (?, ?, 0)"
                           " ON CONFLICT (name) DO UPDATE SET time_us = excluded.time_us", (name, event.time_us))
    return Subscription(name, ["app.bsky.feed.post"], [Handler("t", apply)])


@pytest.fixture
def checkpointer(app) -> dbmod.Checkpointer:
    """The app's database's own: a new app, so no checkpoint in flight or remembered."""
    return db.obj.checkpointer


@pytest.fixture
def clock(checkpointer, monkeypatch) -> list[float]:
    """A clock the test moves (clock[0])."""
    now = [1000.0]
    monkeypatch.setattr(checkpointer, "clock", lambda: now[0])
    return now


def _event(t: int) -> CommitEvent:
    return CommitEvent("did:plc:aaaa", t, "create", "app.bsky.feed.post", f"r{t}", {"text": "x"}, f"bafy{t}")


def test_batches_checkpoint_the_wal_in_another_os_thread_once_a_second(app, monkeypatch, clock, checkpointer):
    calls = []
    real = dbmod._checkpoint

    def spy(path):
        calls.append(os_thread_id())
        return real(path)

    monkeypatch.setattr(checkpointer, "run", spy)
    sub = _write("checkpoint-test")
    with app.app_context(), db.connection_context():
        store.apply_batch(sub, [_event(1)], None)
        checkpointer.wait(30)
        store.apply_batch(sub, [_event(2)], None)  # within the same second: no second checkpoint
        checkpointer.wait(30)
        assert len(calls) == 1
        clock[0] += dbmod.CHECKPOINT_SECS
        store.apply_batch(sub, [_event(3)], None)
        checkpointer.wait(30)
    assert len(calls) == 2
    assert os_thread_id() not in calls  # never on the event loop's thread


def test_a_batch_inside_an_open_transaction_does_not_checkpoint(app, monkeypatch, clock, checkpointer):
    """Waiting for the checkpoint yields to other greenlets, which must never happen inside a
    SQLite write transaction (they would wait on its lock with the event loop held)."""
    calls = []
    monkeypatch.setattr(checkpointer, "run", lambda path: calls.append(path) or (0, 0))
    with app.app_context(), db.connection_context():
        with db.atomic():
            store.apply_batch(_write("nested-test"), [_event(1)], None)
        assert calls == []
        store.apply_batch(_write("nested-test"), [_event(2)], None)
        checkpointer.wait(30)
    assert len(calls) == 1


def test_the_writer_writes_on_while_a_checkpoint_runs(app, monkeypatch, clock, checkpointer):
    """The batch does not wait for the checkpoint it started; a second one does not start while
    the first is in flight."""
    release = monkey.get_original("threading", "Event")()
    started = monkey.get_original("threading", "Event")()
    calls = []
    real = dbmod._checkpoint

    def stuck(path):
        calls.append(path)
        started.set()
        release.wait(30)
        return real(path)

    monkeypatch.setattr(checkpointer, "run", stuck)
    sub = _write("overlap-test")
    try:
        with app.app_context(), db.connection_context():
            store.apply_batch(sub, [_event(1)], None)  # returns with the checkpoint still stuck
            assert started.wait(30)
            first = checkpointer.running
            clock[0] += 10 * dbmod.CHECKPOINT_SECS
            store.apply_batch(sub, [_event(2)], None)
            assert checkpointer.running is first and not first.ready()
            assert db.execute_sql("SELECT time_us FROM jetstream_cursor WHERE name = 'overlap-test'"
                                  ).fetchone()[0] == 2
            assert len(calls) == 1  # the one in flight is not joined by another
    finally:
        release.set()
        checkpointer.wait(30)


def test_past_the_bound_the_writer_waits_for_a_checkpoint(app, monkeypatch, clock, checkpointer):
    """Overlapping checkpoints never let the WAL restart (it starts over only when a checkpoint
    copied all of it before the next write). Once one reports the WAL past WAL_BOUND_BYTES, the
    next batch waits for a checkpoint run with the writer idle; after it the WAL is no reason to
    wait again."""
    calls = []
    real = dbmod._checkpoint
    reported = [0]

    def reporting(path):
        calls.append(path)
        frames, copied = real(path)
        return frames + reported[0], copied

    monkeypatch.setattr(checkpointer, "run", reporting)
    monkeypatch.setattr(checkpointer, "wal_bound_bytes", 64 * 4096)
    sub = _write("bound-test")
    with app.app_context(), db.connection_context():
        # The migrations' WAL, which the pooled connections (sqlite_pool.py) keep from being
        # removed on close: start from an empty one, so the first report is this test's writes.
        db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        store.apply_batch(sub, [_event(1)], None)  # the second's checkpoint
        checkpointer.wait(30)
        store.apply_batch(sub, [_event(2)], None)  # it reported a short WAL: nothing more this second
        checkpointer.wait(30)
        assert len(calls) == 1
        clock[0] += dbmod.CHECKPOINT_SECS
        reported[0] = 64
        store.apply_batch(sub, [_event(3)], None)  # the next second's: it reports the WAL at the bound
        checkpointer.wait(30)
        store.apply_batch(sub, [_event(4)], None)  # same second, but past the bound: waits for one
        assert len(calls) == 3
        assert checkpointer.running is None  # nothing in flight when the batch returns: it was waited for
        store.apply_batch(sub, [_event(5)], None)  # the WAL started over: no reason to wait again
        assert len(calls) == 3


def test_a_checkpoint_on_a_locked_file_is_skipped_quietly_and_the_next_one_runs(app, clock, checkpointer, capfd,
                                                                                  caplog):
    """Another process closing its last connection checkpoints under an exclusive lock; ours then
    finds the file locked. It is tried again a second later, with no traceback on stderr (raised
    out of the pool thread, gevent printed one)."""
    import logging
    import sqlite3

    import gevent

    path = db.obj.database
    sub = _write("locked-test")
    with app.app_context(), db.connection_context():
        store.apply_batch(sub, [_event(1)], None)
        checkpointer.wait(30)
    db.obj.close_idle()  # an exclusive lock needs every other connection gone, pooled ones too
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("PRAGMA locking_mode=EXCLUSIVE")
    other.execute("BEGIN EXCLUSIVE")
    other.execute("UPDATE jetstream_cursor SET updated_at = 1 WHERE name = 'locked-test'")
    other.execute("COMMIT")  # locking_mode=EXCLUSIVE keeps the file locked after the commit
    failure = dbmod._checkpoint(path)
    assert isinstance(failure, sqlite3.OperationalError) and "locked" in str(failure)
    capfd.readouterr()
    with caplog.at_level(logging.DEBUG, logger="feather.db"):
        result = gevent.get_hub().threadpool.spawn(dbmod._checkpoint, path)  # as the Checkpointer runs it
        result.wait(30)
        assert dbmod._frames(result) == 0
    assert "checkpoint skipped: database is locked" in caplog.text
    assert capfd.readouterr().err == ""
    other.close()  # the lock goes with the connection
    frames, copied = dbmod._checkpoint(path)
    assert frames == copied
