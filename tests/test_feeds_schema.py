"""schema.ensure inside the ingest batch: a catalog read when everything is in place, the DDL
when anything is missing, and never a remembered mark that a rollback could make a lie."""
from __future__ import annotations

import pytest

from feather.db import current_dialect, db
from tests.fixtures.feeds.feedkit import feeds_app, toml


@pytest.fixture
def app(make_app, tmp_path):
    return feeds_app(make_app, tmp_path, toml())


def _objects() -> set[str]:
    d = current_dialect()
    sql = ("SELECT name FROM sqlite_master WHERE name LIKE ?" if d.is_sqlite else
           "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
           " WHERE n.nspname = current_schema() AND c.relname LIKE ?")
    return {row[0] for row in db.execute_sql(d.q(sql), ("feed_records_%",)).fetchall()}


def _nested_ensure(app) -> list[str]:
    """ensure() inside a transaction, as the batch runs it, forgetting any mark; the SQL it ran."""
    from feather.feeds import schema

    config = app.extensions["feeds"]
    ran: list[str] = []
    execute = db.obj.execute_sql

    def spy(sql, params=None, *args, **kwargs):
        ran.append(sql)
        return execute(sql, params, *args, **kwargs)

    db.obj.__dict__.pop(schema._MARK, None)
    db.obj.execute_sql = spy
    try:
        with db.atomic():
            schema.ensure(config)
    finally:
        del db.obj.execute_sql
    assert getattr(db.obj, schema._MARK, None) is None, "a nested run must not remember the tables"
    return ran


def _standalone_ensure(app) -> set[str]:
    from feather.feeds import schema

    schema.ensure(app.extensions["feeds"])
    return _objects()


def test_a_batch_with_every_table_and_index_in_place_runs_no_ddl(app):
    with app.app_context(), db.connection_context():
        expected = _standalone_ensure(app)
        ran = _nested_ensure(app)
        assert len(ran) == 1 and ran[0].lstrip().upper().startswith("SELECT"), ran
        assert _objects() == expected


def test_a_batch_recreates_an_index_that_went_missing(app):
    with app.app_context(), db.connection_context():
        expected = _standalone_ensure(app)
        assert "feed_records_post_did_time" in expected
        db.execute_sql("DROP INDEX feed_records_post_did_time")
        ran = _nested_ensure(app)
        assert any("CREATE INDEX IF NOT EXISTS feed_records_post_did_time" in sql for sql in ran)
        assert _objects() == expected


def test_a_batch_drops_the_list_index_of_a_collection_that_serves_no_listrecords(app):
    with app.app_context(), db.connection_context():
        expected = _standalone_ensure(app)
        assert "feed_records_follow_time" not in expected  # follows are not listed by default
        db.execute_sql("CREATE INDEX feed_records_follow_time ON feed_records_follow (time_us DESC, uri)")
        _nested_ensure(app)
        assert _objects() == expected


def test_a_batch_on_a_fresh_database_creates_every_table(app):
    with app.app_context(), db.connection_context():
        ran = _nested_ensure(app)
        assert any(sql.startswith("CREATE TABLE IF NOT EXISTS feed_records_post") for sql in ran)
        assert {"feed_records_post", "feed_records_follow", "feed_records_profile",
                "feed_records_follow_subject", "feed_records_post_time"} <= _objects()
