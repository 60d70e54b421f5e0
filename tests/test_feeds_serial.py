"""PostgreSQL: every transaction that writes the feeds tables queues on one advisory lock.

Without it the ingest batch (rows by record) and the prune and records sweeps (rows by actor)
deadlocked under a busy full index, and PostgreSQL aborted the batch every prune tick
(feather/feeds/store/serial.py). Each test holds the lock from another connection, starts one writer,
sees it wait for the lock with nothing of its work visible, releases the lock, and sees the work.
"""
from __future__ import annotations

from tests.fixtures.feeds.feedkit import settled_us

import gevent
import pytest

from feather.db import db
from tests.conftest import PG_URL
from tests.fixtures.feeds.feedkit import (BASE_US, POST, PROFILE, FakeSources, feeds_app, follow, ingest, iso,
                                          post, rows, toml)

pytestmark = pytest.mark.skipif(not PG_URL, reason="SQLite lets one writer in at a time by itself")

A, B, C = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc"


@pytest.fixture
def sources():
    return FakeSources()


@pytest.fixture
def app(make_app, tmp_path, sources):
    return feeds_app(make_app, tmp_path, toml(max_items=3), sources=sources)


def count(app, sql, params=()) -> int:
    return rows(app, sql, params)[0][0]


def _waiting_for_advisory_lock(database_url) -> int:
    import psycopg2

    conn = psycopg2.connect(database_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
            return cur.fetchone()[0]
    finally:
        conn.close()


def held_while(app, database_url, work, while_waiting):
    """Hold the feeds-writes lock, run work() in a greenlet, call while_waiting() once it waits on
    the lock, release, and return work()'s result."""
    import psycopg2

    from feather.feeds.store.serial import LOCK_NAME
    from feather.locks import lock_key

    def run():
        with app.app_context(), db.connection_context():
            return work()

    holder = psycopg2.connect(database_url)
    worker = None
    try:
        with holder.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(LOCK_NAME),))
        worker = gevent.spawn(run)
        with gevent.Timeout(10, AssertionError("the writer never waited on the feeds-writes lock")):
            while not _waiting_for_advisory_lock(database_url):
                assert not worker.dead, f"the writer finished without waiting: {worker.value!r}"
                gevent.sleep(0.05)
        assert not worker.dead
        while_waiting()
        holder.rollback()
        return worker.get(timeout=10)
    finally:
        holder.close()
        if worker is not None:  # never leave it holding a connection the teardown closes
            worker.join(timeout=10)


def test_an_ingest_batch_waits_for_the_lock_before_writing(app, database_url):
    ingest(app, [follow(B, "f1", A)])

    def unchanged():
        assert count(app, "SELECT count(*) FROM feed_records_post") == 0
        assert count(app, "SELECT count(*) FROM feed_items") == 0
    held_while(app, database_url, lambda: ingest(app, [post(A, "p1", BASE_US + 10)]), unchanged)
    assert rows(app, "SELECT actor, uri FROM feed_items") == [(B, f"at://{A}/{POST}/p1")]


def test_a_prune_slice_waits_for_the_lock(app, database_url):
    from feather.feeds.tasks import prune

    ingest(app, [follow(B, "f1", A)] + [post(A, f"p{i}", BASE_US + 10 + i) for i in range(5)])
    assert count(app, "SELECT count(*) FROM feed_items WHERE actor = ?", (B,)) == 5

    def unchanged():
        assert count(app, "SELECT count(*) FROM feed_items WHERE actor = ?", (B,)) == 5
    result = held_while(app, database_url, lambda: prune.sweep({POST: 3}, None, 10), unchanged)
    assert result.pruned == 2
    assert count(app, "SELECT count(*) FROM feed_items WHERE actor = ?", (B,)) == 3


def test_a_tombstone_sweep_waits_for_the_lock(app, database_url):
    from feather.feeds.tasks import tombstones
    from feather.feeds.store import records
    from feather.jetstream import store

    with app.app_context(), db.connection_context(), db.atomic():
        records.bury_many({f"at://{A}/{POST}/gone": BASE_US})
        store.save_cursor("global", store.Cursor(BASE_US + tombstones.TOMBSTONE_MARGIN_US + 1))

    def unchanged():
        assert count(app, "SELECT count(*) FROM feed_tombstones") == 1
    assert held_while(app, database_url, tombstones.sweep_tombstones, unchanged) == 1
    assert count(app, "SELECT count(*) FROM feed_tombstones") == 0


def test_delete_my_data_waits_for_the_lock(app, database_url):
    from feather.feeds import personal

    ingest(app, [follow(B, "f1", A), post(A, "p1", BASE_US + 10)])

    def unchanged():
        assert count(app, "SELECT count(*) FROM feed_items WHERE actor = ?", (B,)) == 1
    held_while(app, database_url, lambda: personal.delete(B), unchanged)
    assert count(app, "SELECT count(*) FROM feed_items WHERE actor = ?", (B,)) == 0


def test_a_first_read_backfill_waits_for_the_lock_for_its_follows_and_its_bootstrap(app, database_url, sources):
    from feather.feeds.tasks import backfill

    ingest(app, [post(A, "p1", BASE_US + 10)])
    sources.follows[C] = [("f1", "bafyf1", {"$type": "app.bsky.graph.follow", "subject": A,
                                            "createdAt": iso(BASE_US)})]
    config = app.extensions["feeds"]

    def unchanged():
        assert count(app, "SELECT count(*) FROM feed_records_follow") == 0
        assert count(app, "SELECT count(*) FROM feed_items") == 0
    assert held_while(app, database_url, lambda: backfill.run(app, config, config.feeds["timeline"], C), unchanged)
    assert rows(app, "SELECT actor, uri FROM feed_items") == [(C, f"at://{A}/{POST}/p1")]


def test_a_backfill_with_nothing_to_list_still_waits_for_the_lock_before_its_bootstrap(app, database_url):
    from feather.feeds.tasks import backfill
    from feather.feeds.store import records

    ingest(app, [post(A, "p1", BASE_US + 10)])
    config = app.extensions["feeds"]
    with app.app_context(), db.connection_context(), db.atomic():  # stored earlier, never fanned in
        records.store(config.by_nsid("app.bsky.graph.follow"), uri=f"at://{C}/app.bsky.graph.follow/f1", did=C,
                      rkey="f1", cid="bafyf1", record={"subject": A, "createdAt": iso(BASE_US)}, time_us=BASE_US)

    def unchanged():
        assert count(app, "SELECT count(*) FROM feed_items") == 0
    assert held_while(app, database_url, lambda: backfill.run(app, config, config.feeds["timeline"], C), unchanged)
    assert rows(app, "SELECT actor, uri FROM feed_items") == [(C, f"at://{A}/{POST}/p1")]


def test_an_author_fetch_waits_for_the_lock(app, database_url, sources):
    from feather.feeds.store import fetches
    from feather.feeds.tasks import authors

    record = {"$type": POST, "text": "from the PDS", "createdAt": iso(BASE_US)}
    sources.repos[(A, POST)] = [("p9", "bafyp9", record)]
    with app.app_context(), db.connection_context(), db.atomic():
        fetches.request([A])

    def unchanged():
        assert count(app, "SELECT count(*) FROM feed_records_post") == 0
    assert held_while(app, database_url, lambda: authors.fetch_tick(app, app.extensions["feeds"], now_us=settled_us()), unchanged) == 1
    assert rows(app, "SELECT uri FROM feed_records_post") == [(f"at://{A}/{POST}/p9",)]


def test_a_listing_backfill_waits_for_the_lock(app, database_url, sources):
    from feather.feeds.tasks import authors

    record = {"$type": POST, "text": "listed", "createdAt": iso(BASE_US)}
    sources.repos[(A, POST)] = [("p8", "bafyp8", record)]
    c = app.extensions["feeds"].by_nsid(POST)

    def unchanged():
        assert count(app, "SELECT count(*) FROM feed_records_post") == 0
    assert held_while(app, database_url, lambda: authors.backfill_listing(app, app.extensions["feeds"], c, A),
                     unchanged) is None
    assert rows(app, "SELECT uri FROM feed_records_post") == [(f"at://{A}/{POST}/p8",)]


def test_a_profile_lookup_waits_for_the_lock_before_storing_the_profile(app, database_url, sources):
    from feather.feeds.read import identities

    sources.handles["ada.test"] = A
    sources.repos[(A, PROFILE)] = [("self", "bafyprof", {"$type": PROFILE, "displayName": "Ada"})]

    def unchanged():
        assert count(app, "SELECT count(*) FROM feed_records_profile") == 0
    handles = held_while(app, database_url, lambda: identities.hydrate(app, app.extensions["feeds"], [A]), unchanged)
    assert handles == {A: "ada.test"}
    assert rows(app, "SELECT uri FROM feed_records_profile") == [(f"at://{A}/{PROFILE}/self",)]


def test_a_records_sweep_slice_waits_for_the_lock(app, database_url):
    from feather.feeds.tasks import records_sweep as storage

    ingest(app, [post(A, "p1", BASE_US + 10)])  # stored under `all`; nobody served follows A

    def unchanged():
        assert count(app, "SELECT count(*) FROM feed_records_post") == 1
    result = held_while(app, database_url, lambda: storage.sweep_slice(app.extensions["feeds"], 10), unchanged)
    assert result.removed == 1
    assert count(app, "SELECT count(*) FROM feed_records_post") == 0


def test_a_schema_check_with_every_table_in_place_takes_no_table_lock(app, database_url):
    """A web process's start-up check ran CREATE INDEX IF NOT EXISTS, which takes the table's
    SHARE lock even when the index exists: against a batch writing that table, a deadlock."""
    import psycopg2

    from feather.feeds.store import schema

    writer = psycopg2.connect(database_url)  # an open batch that has written a post
    try:
        with writer.cursor() as cur:
            cur.execute("INSERT INTO feed_records_post (uri, did, rkey, cid, record, time_us, indexed_at, arrival)"
                        " VALUES ('at://did:plc:aaaa/app.bsky.feed.post/p1', 'did:plc:aaaa', 'p1', 'bafy', '{}', 1, 1, 1)")
        with app.app_context(), db.connection_context():
            with gevent.Timeout(5, AssertionError("the check waited on the open batch's table")):
                schema.ensure(app.extensions["feeds"])
    finally:
        writer.rollback()
        writer.close()


def test_a_schema_repair_waits_for_the_lock_before_its_ddl(app, database_url):
    from feather.feeds.store import schema

    index = "feed_records_post_did_time"
    with app.app_context(), db.connection_context():
        db.execute_sql(f"DROP INDEX {index}")

    def exists() -> bool:
        return count(app, "SELECT count(*) FROM pg_indexes WHERE indexname = ?", (index,)) == 1

    def unchanged():
        assert not exists()
    held_while(app, database_url, lambda: schema.ensure(app.extensions["feeds"]), unchanged)
    assert exists()
