"""The records tables are made when a process starts (feather.feeds.ensure_schema, after the
migrations): a catalog read when everything is in place, the DDL when anything is missing, and
nothing at all in a batch, a request or a job."""
from __future__ import annotations

import pytest

from feather import features
from feather.db import current_dialect, db
from tests.fixtures.feeds.feedkit import BASE_US, feeds_app, follow, ingest, post, toml


@pytest.fixture
def app(make_app, tmp_path):
    return feeds_app(make_app, tmp_path, toml())


def _objects() -> set[str]:
    d = current_dialect()
    sql = ("SELECT name FROM sqlite_master WHERE name LIKE ?" if d.is_sqlite else
           "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
           " WHERE n.nspname = current_schema() AND c.relname LIKE ?")
    return {row[0] for row in db.execute_sql(d.q(sql), ("feed_records_%",)).fetchall()}


def _start(app) -> list[str]:
    """The feeds start hook, as feather/process/runtime.py runs it; the SQL it ran."""
    from feather.feeds import ensure_schema

    ran: list[str] = []
    execute = db.obj.execute_sql

    def spy(sql, params=None, *args, **kwargs):
        ran.append(sql)
        return execute(sql, params, *args, **kwargs)

    db.obj.execute_sql = spy
    try:
        ensure_schema(app.config["FEATHER"])
    finally:
        del db.obj.execute_sql
    return ran


def test_a_start_with_every_table_and_index_in_place_runs_no_ddl(app):
    with app.app_context(), db.connection_context():
        expected = _objects()
        ran = _start(app)
        assert len(ran) == 1 and ran[0].lstrip().upper().startswith("SELECT"), ran
        assert _objects() == expected


def test_a_start_recreates_an_index_that_went_missing(app):
    with app.app_context(), db.connection_context():
        expected = _objects()
        assert "feed_records_post_did_time" in expected
        db.execute_sql("DROP INDEX feed_records_post_did_time")
        ran = _start(app)
        assert any("CREATE INDEX IF NOT EXISTS feed_records_post_did_time" in sql for sql in ran)
        assert _objects() == expected


def test_a_start_drops_the_list_index_of_a_collection_that_serves_no_listrecords(app):
    with app.app_context(), db.connection_context():
        expected = _objects()
        assert "feed_records_follow_time" not in expected  # follows are not listed by default
        db.execute_sql("CREATE INDEX feed_records_follow_time ON feed_records_follow (time_us DESC, uri)")
        _start(app)
        assert _objects() == expected


@pytest.mark.empty_database
def test_a_start_on_a_fresh_database_creates_every_table(make_app, tmp_path):
    """The `make run` order: the app factory, `flask db upgrade` (the migrations, then each
    feature's ensure_schema), then the workers. Nothing feeds-specific exists before the hook."""
    app = feeds_app(make_app, tmp_path, toml(), migrate=False)
    from feather.migrate import upgrade

    upgrade(db.obj)
    with app.app_context(), db.connection_context():
        assert _objects() == set()
        ran = _start(app)
        assert any(sql.startswith("CREATE TABLE IF NOT EXISTS feed_records_post") for sql in ran)
        assert {"feed_records_post", "feed_records_follow", "feed_records_profile",
                "feed_records_follow_subject", "feed_records_post_time"} <= _objects()


@pytest.mark.empty_database
def test_flask_db_upgrade_makes_the_tables_before_any_batch_or_request(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, toml(), migrate=False)
    result = app.test_cli_runner().invoke(args=["db", "upgrade"])
    assert result.exit_code == 0, result.output
    with app.app_context(), db.connection_context():
        assert {"feed_records_post", "feed_records_follow", "feed_records_profile"} <= _objects()
    ingest(app, [follow("did:plc:aaaa", "f1", "did:plc:cccc"), post("did:plc:cccc", "p1", BASE_US + 1)])
    assert app.test_client().get("/xrpc/com.example.getFeed?feed=timeline&actor=did:plc:aaaa").status_code == 200


def test_a_batch_runs_no_schema_check(app, monkeypatch):
    """The ingest batch trusts the start: no catalog read, no DDL, whatever it holds."""
    from feather.feeds.store import schema

    monkeypatch.setattr(schema, "ensure", lambda config: pytest.fail("a batch ran the schema check"))
    monkeypatch.setattr(features, "ensure_schema", lambda settings: pytest.fail("a batch ran the start hook"))
    ingest(app, [post("did:plc:cccc", "p1", BASE_US + 1)])
