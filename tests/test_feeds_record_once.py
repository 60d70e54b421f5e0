"""A feed holds a record once: feed_items is unique by (uri, actor) as well as by its page key
(migration 0051), so no insert path can put one post in one timeline twice at two times."""
from __future__ import annotations

import shutil

import pytest

from feather.db import current_dialect, db
from feather.feeds.store import items
from feather.migrate import MIGRATIONS_DIR, discover, upgrade
from tests.fixtures.feeds import oracle
from tests.fixtures.feeds.feedkit import BASE_US, POST, FakeSources, feeds_app, follow, ingest, post, rows, toml

A, B, C = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc"
URI = f"at://{C}/{POST}/p1"
INSERT = "INSERT INTO feed_items (actor, uri, collection, time_us) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING"


@pytest.fixture
def app(make_app, tmp_path):
    return feeds_app(make_app, tmp_path, toml(), sources=FakeSources())


def _inserted(sql_params) -> int:
    sql, params = sql_params
    return db.execute_sql(current_dialect().q(sql), params).rowcount


def test_a_second_row_of_one_record_for_one_actor_is_refused_at_any_time(app):
    with app.app_context(), db.connection_context():
        added = [_inserted((INSERT, row)) for row in
                 [(A, URI, POST, 5), (A, URI, POST, 9), (A, URI, POST, 5), (B, URI, POST, 9)]]
    assert added == [1, 0, 0, 1]  # another actor's row of the same record is its own
    assert rows(app, "SELECT actor, time_us FROM feed_items ORDER BY actor") == [(A, 5), (B, 9)]


@pytest.mark.parametrize("path", ["fan-out", "batch fan-out", "follow backfill", "batch backfill"])
def test_an_insert_that_skipped_the_time_resync_adds_no_second_row(app, path):
    """What the resync before every fan-out is for, done wrong on purpose: the record's row is at
    +10 and an insert arrives at +50 without moving it first. The page key alone would take it."""
    ingest(app, [follow(A, "f1", C), post(C, "p1", BASE_US + 10)])
    config = app.extensions["feeds"]
    feed = config.feeds["timeline"]
    stale = BASE_US + 50
    with app.app_context(), db.connection_context():
        db.execute_sql(current_dialect().q(f"UPDATE {config.collections['post'].table} SET time_us = ?"), (stale,))
        statement = {
            "fan-out": lambda: oracle.target_insert_sql(config, feed, POST, C, URI, stale),
            "batch fan-out": lambda: items.fan_out_sql(config, feed, [(URI, POST, stale, C, None)]),
            "follow backfill": lambda: items.follow_backfill_sql(config, feed, 0, A, C),
            "batch backfill": lambda: items.backfills_sql(config, [(feed.targets[0], feed.follow_backfill)], [(A, C)]),
        }[path]()
        _inserted(statement)  # (SQLite counts no rows for a WITH … INSERT: the table says it)
    assert rows(app, "SELECT actor, uri, time_us FROM feed_items") == [(A, URI, BASE_US + 10)]


@pytest.mark.empty_database
def test_the_migration_keeps_the_later_row_of_a_duplicate_and_then_refuses_one(make_app, tmp_path):
    make_app(migrate=False)
    older = tmp_path / "older"
    older.mkdir()
    for path in MIGRATIONS_DIR.glob("*.py"):
        if path.name[:4].isdigit() and int(path.name[:4]) < 51:
            shutil.copy(path, older / path.name)
    upgrade(db.obj, older)
    other = f"at://{C}/{POST}/p2"
    before = [(A, URI, POST, 5), (A, URI, POST, 9), (A, other, POST, 7), (B, URI, POST, 5)]
    with db.connection_context():
        for row in before:
            db.execute_sql(current_dialect().q(INSERT), row)
    assert upgrade(db.obj) == [m.version for m in discover() if m.version >= 51]
    with db.connection_context():
        kept = [tuple(r) for r in db.execute_sql(
            "SELECT actor, uri, time_us FROM feed_items ORDER BY actor, uri").fetchall()]
        again = _inserted((INSERT, (A, URI, POST, 3)))
    assert kept == [(A, URI, 9), (A, other, 7), (B, URI, 5)]
    assert again == 0
