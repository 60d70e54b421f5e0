"""The ingest batch's statements are planned by index on PostgreSQL even before ANALYZE has seen
the tables grow (feather.db.index_planned).

A fresh instance catching up writes feed_items far faster than autovacuum re-analyzes it; on the
statistics it has, the planner hashed a Seq Scan of the whole table for every batch's time resync
and fan-out. These tests build tables no ANALYZE has seen and plan the exact batch statements.
"""
from __future__ import annotations

import pytest

from feather.db import current_dialect, db, index_planned
from feather.feeds.ingest import apply, batch
from feather.feeds.store import items
from feather.jetstream.events import CommitEvent
from tests.conftest import PG_URL
from tests.fixtures.feeds.feedkit import FakeSources, feeds_app, toml

pg_only = pytest.mark.skipif(not PG_URL, reason="SQLite's planner keeps no statistics to go stale")
POST = "app.bsky.feed.post"


@pytest.fixture
def app(make_app, tmp_path):
    return feeds_app(make_app, tmp_path, toml(), sources=FakeSources())


def _fill(config, actors: int = 40, per_actor: int = 50) -> None:
    """Feed rows and follows that no ANALYZE has seen (the test database's tables are new)."""
    follow = config.collections["follow"].table
    rows = [(f"did:plc:a{a:04d}", f"at://did:plc:s{i % 30:04d}/{POST}/{a:04d}{i:04d}", POST, i)
            for a in range(actors) for i in range(per_actor)]
    db.execute_sql(current_dialect().q(
        f"INSERT INTO feed_items (actor, uri, collection, time_us) VALUES {', '.join(['(?, ?, ?, ?)'] * len(rows))}"),
        [v for row in rows for v in row])
    follows = [(f"at://did:plc:a{a:04d}/app.bsky.graph.follow/{s:04d}", f"did:plc:a{a:04d}", f"{s:04d}",
                f'{{"subject": "did:plc:s{s:04d}"}}', s, 0, 0) for a in range(actors) for s in range(30)]
    db.execute_sql(current_dialect().q(
        f"INSERT INTO {follow} (uri, did, rkey, record, time_us, indexed_at, arrival)"
        f" VALUES {', '.join(['(?, ?, ?, ?, ?, ?, ?)'] * len(follows))}"), [v for row in follows for v in row])


def _batch_statements(config):
    feed = config.feeds["timeline"]
    times = [(f"at://did:plc:s{i % 30:04d}/{POST}/0000{i:04d}", 7) for i in range(250)]
    posts = [(uri, POST, 7, f"did:plc:s{i % 30:04d}", None) for i, (uri, _) in enumerate(times)]
    return {"batch resync": items.resync_sql(times), "batch fan-out": items.fan_out_sql(config, feed, posts)}


def _plans(config) -> dict[str, list[str]]:
    d = current_dialect()
    return {name: d.explain(db.obj, d.q(sql), params) for name, (sql, params) in _batch_statements(config).items()}


def _whole_table_paths(lines: list[str]) -> list[str]:
    return [line.strip() for line in lines if "Seq Scan" in line or "Hash Join" in line or "Merge Join" in line]


@pg_only
@pytest.mark.postgres
def test_batch_statements_plan_by_index_on_tables_no_analyze_has_seen(app):
    config = app.extensions["feeds"]
    with app.app_context(), db.connection_context():
        with db.atomic() as txn:
            _fill(config)
            unguided = _plans(config)
            with index_planned():
                guided = _plans(config)
            txn.rollback()
    # Without the settings this data does get whole-table plans: the test can tell the two apart.
    assert all(_whole_table_paths(lines) for lines in unguided.values()), unguided
    assert {name: _whole_table_paths(lines) for name, lines in guided.items()} == {
        "batch resync": [], "batch fan-out": []}
    assert any("Index Cond" in line for line in guided["batch resync"])
    assert any("Index Cond" in line for line in guided["batch fan-out"])


@pg_only
@pytest.mark.postgres
def test_the_feeds_handler_writes_under_the_settings_and_ends_them(app, monkeypatch):
    """They are for the feeds statements alone: a later handler in the same ingest transaction
    plans with the session's own settings again."""
    config = app.extensions["feeds"]
    event = CommitEvent("did:plc:x", 1_700_000_000_000_000, "create", POST, "3k", {"text": "hi"}, "bafy")
    seen = []

    def settings():
        return [db.execute_sql(f"SHOW enable_{p}").fetchone()[0] for p in ("seqscan", "hashjoin", "mergejoin")]

    write = batch.write

    def write_and_look(*args):  # the real write, with a look at the settings it ran under
        seen.append(settings())
        return write(*args)

    monkeypatch.setattr(batch, "write", write_and_look)
    with app.app_context(), db.connection_context():
        with db.atomic() as txn:
            seen.append(settings())
            assert apply.apply_batch(config, [event]) == 1
            seen.append(settings())
            posts = db.execute_sql(f"SELECT count(*) FROM {config.collections['post'].table}").fetchone()[0]
            txn.rollback()
    assert posts == 1
    assert seen[0] == seen[-1] == ["on", "on", "on"]
    assert seen[1:-1] and all(s == ["off", "off", "off"] for s in seen[1:-1])
