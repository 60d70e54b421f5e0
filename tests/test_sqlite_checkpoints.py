"""SQLite WAL checkpoints leave the event loop (feather/db.py checkpoint_soon).

A checkpoint fsyncs the database file; run by the batch writer's commit it held every greenlet
of the process. Now the batch transaction (jetstream/store.py apply_batch) hands it to an OS
thread once a second.
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


def _event(t: int) -> CommitEvent:
    return CommitEvent("did:plc:aaaa", t, "create", "app.bsky.feed.post", f"r{t}", {"text": "x"}, f"bafy{t}")


def test_batches_checkpoint_the_wal_in_another_os_thread_once_a_second(app, monkeypatch):
    calls = []
    real = dbmod._checkpoint

    def spy(path):
        calls.append(os_thread_id())
        real(path)

    now = [1000.0]
    monkeypatch.setattr(dbmod, "_checkpoint", spy)
    monkeypatch.setattr(dbmod, "_last_checkpoint", {})
    monkeypatch.setattr(dbmod, "_clock", lambda: now[0])
    sub = _write("checkpoint-test")
    with app.app_context(), db.connection_context():
        store.apply_batch(sub, [_event(1)], None)
        store.apply_batch(sub, [_event(2)], None)  # within the same second: no second checkpoint
        assert len(calls) == 1
        now[0] += dbmod.CHECKPOINT_SECS
        store.apply_batch(sub, [_event(3)], None)
    assert len(calls) == 2
    assert os_thread_id() not in calls  # never on the event loop's thread


def test_a_batch_inside_an_open_transaction_does_not_checkpoint(app, monkeypatch):
    """Waiting for the checkpoint yields to other greenlets, which must never happen inside a
    SQLite write transaction (they would wait on its lock with the event loop held)."""
    calls = []
    monkeypatch.setattr(dbmod, "_checkpoint", calls.append)
    monkeypatch.setattr(dbmod, "_last_checkpoint", {})
    with app.app_context(), db.connection_context():
        with db.atomic():
            store.apply_batch(_write("nested-test"), [_event(1)], None)
        assert calls == []
        store.apply_batch(_write("nested-test"), [_event(2)], None)
    assert len(calls) == 1
