"""Every catalogue table can be dropped: the next process start re-creates it (with what that
costs: a lost projection table empties and rebuilds the projection, a lost consent table starts
empty), and a table dropped while the process runs reads as the empty catalogue instead of
failing the home page, /privacy, /network or the count API."""
from __future__ import annotations

import logging

import pytest

from feather.db import db
from feather.network import schema, store
from feather.process.runtime import migrate
from tests.test_network_page import seed, sign_in

FEED = "https://a.example/feed"
PAGES = ("/", "/privacy", "/network", "/network/me", f"/api/network/count?url={FEED}")


def _app(make_app):
    return make_app(FEATHERREADER_NETWORK_PAGE=True, FEATHERREADER_NETWORK_INDEX=True, FEATHERREADER_NET_K=3)


def _shape(table: str):
    """Columns (name, nullable, primary key) and indexes (name, columns, unique), as the database reports them."""
    columns = sorted((c.name, c.null, c.primary_key) for c in db.get_columns(table))
    indexes = sorted((i.name, tuple(i.columns), i.unique) for i in db.get_indexes(table)
                     if not i.name.startswith(("sqlite_autoindex", f"{table}_pkey")))
    return columns, indexes


def _count(table: str) -> int:
    return db.execute_sql(f"SELECT count(*) FROM {table}").fetchone()[0]


def _fill(app):
    """Three subscribers of one feed, a subscriber who asked to be named, one opted-out account."""
    seed(app, {FEED: 3})
    with db.connection_context(), db.atomic():
        store.set_attribution("did:plc:s1", "one.example", True)
        store.opt_out("did:plc:gone")
        store.set_state("backfill.status", "done")


def _statuses(app) -> dict[str, int]:
    anonymous, signed = app.test_client(), app.test_client()
    sign_in(app, signed, did="did:plc:s1")
    found = {path: anonymous.get(path).status_code for path in PAGES if path != "/network/me"}
    found.update({"signed " + path: signed.get(path).status_code for path in PAGES})
    return found


ALL_OK = {**{p: 200 for p in PAGES if p != "/network/me"}, **{"signed " + p: 200 for p in PAGES}}


def test_the_recreated_tables_have_the_shape_the_migrations_leave(make_app):
    _app(make_app)
    with db.connection_context():
        migrated = {table: _shape(table) for table in schema.TABLES}
        for table in schema.TABLES:
            db.execute_sql(f"DROP TABLE {table}")
        assert schema.ensure() == list(schema.TABLES)
        assert {table: _shape(table) for table in schema.TABLES} == migrated
        assert schema.ensure() == []  # nothing missing: nothing done


@pytest.mark.parametrize("table", schema.TABLES)
def test_a_dropped_table_is_recreated_at_start_and_every_page_and_batch_works(make_app, table, caplog):
    app = _app(make_app)
    _fill(app)
    with db.connection_context():
        db.execute_sql(f"DROP TABLE {table}")
    with caplog.at_level(logging.WARNING, logger="feather.network.schema"):
        migrate(app)  # what every process start runs (gunicorn's post_fork, `flask worker`, `flask db upgrade`)
    assert [r.getMessage().split(" was missing")[0] for r in caplog.records] == [f"network: table {table}"]
    with db.connection_context():
        assert table in db.get_tables()
        kept = {t: _count(t) for t in ("net_subscription", "net_feed_rollup", "net_optout", "net_attribution")}
        status = store.get_state("backfill.status")
    if table in schema.PROJECTION:  # the rest of the projection is emptied, so a rebuild is due
        assert (kept["net_subscription"], kept["net_feed_rollup"], status) == (0, 0, None)
    else:
        assert (kept["net_subscription"], kept["net_feed_rollup"], status) == (3, 1, "done")
    assert kept["net_optout"] == (0 if table == "net_optout" else 1)
    assert kept["net_attribution"] == (0 if table == "net_attribution" else 1)
    assert _statuses(app) == ALL_OK
    seed(app, {"https://b.example/feed": 3}, start=100)  # the live stream's batch writes again
    client = app.test_client()
    assert client.get("/api/network/count?url=https://b.example/feed").json == {
        "url": "https://b.example/feed", "subscribers": 3}


@pytest.mark.parametrize("table", schema.TABLES)
def test_a_table_dropped_while_running_reads_as_empty_and_the_batch_waits_for_the_restart(make_app, table):
    app = _app(make_app)
    _fill(app)
    with db.connection_context():
        db.execute_sql(f"DROP TABLE {table}")
    assert _statuses(app) == ALL_OK
    html = app.test_client().get("/network").get_data(as_text=True)
    shown = FEED in html
    assert shown is (table not in ("net_feed_rollup",))
    count = app.test_client().get(f"/api/network/count?url={FEED}").json
    assert count == ({"url": FEED} if table == "net_feed_rollup" else {"url": FEED, "subscribers": 3})
    writes = table not in ("network_stat", "net_backfill_queue", "net_attribution")
    try:
        seed(app, {"https://b.example/feed": 3}, start=100)
        failed = False
    except Exception as error:
        failed = True
        assert "net" in str(error)  # the missing table, named by the database
    assert failed is writes  # a batch that writes the table fails (and the stream retries it) ...
    migrate(app)  # ... until the next start re-creates it
    seed(app, {"https://b.example/feed": 3}, start=200)
    assert app.test_client().get("/api/network/count?url=https://b.example/feed").json["subscribers"] == 3
