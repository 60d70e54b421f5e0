"""First-read backfill (docs/design.md, "Timelines") against a loopback PDS/PLC, through the production wiring."""
from __future__ import annotations

import pytest

from feather.db import current_dialect, db
from feather.feeds.tasks import backfill
from tests.fixtures.feeds.fake_pds import FakePds
from tests.fixtures.feeds.feedkit import BASE_US, FOLLOW, feed_uris, feeds_app, ingest, iso, join_backfills, post, rows, toml

A, B, C, D = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc", "did:plc:dddd"
GET_FEED = "/xrpc/com.example.getFeed"


@pytest.fixture
def pds():
    with FakePds() as fake:
        fake.handles["alice.test"] = A
        for i, subject in enumerate((B, C, D)):
            fake.add(A, FOLLOW, f"3k{i}", {"$type": FOLLOW, "subject": subject, "createdAt": iso(BASE_US)})
        yield fake


@pytest.fixture
def app(make_app, tmp_path, pds):
    app = feeds_app(make_app, tmp_path, toml(max_items=5), **pds.settings())
    yield app
    join_backfills(app)


def backfill_row(app):
    return rows(app, "SELECT completed, retries, last_error IS NULL, started_at IS NULL FROM feed_backfills"
                     " WHERE actor = ?", (A,))


def test_first_read_answers_at_once_then_fills_the_feed_from_stored_posts(app, pds):
    ingest(app, [post(B, f"b{i}", BASE_US + 10 + i) for i in range(4)] + [post(C, "c0", BASE_US + 1)]
           + [post("did:plc:zzzz", "z0", BASE_US + 99)])
    client = app.test_client()
    first = client.get(f"{GET_FEED}?feed=timeline&actor=alice.test")
    assert (first.status_code, first.json) == (200, {"records": []})  # never waits for the PDS
    join_backfills(app)
    assert backfill_row(app) == [(1, 0, True, True)]
    assert rows(app, "SELECT count(*) FROM feed_records_follow WHERE did = ?", (A,)) == [(3,)]
    body = client.get(f"{GET_FEED}?feed=timeline&actor=alice.test").json
    assert [r["rkey"] for r in body["records"]] == ["b3", "b2", "b1", "b0", "c0"]
    assert any("listRecords" in r and "cursor=2" in r for r in pds.requests)  # it paged


def test_bootstrap_keeps_only_the_newest_cap(app, pds):
    ingest(app, [post(B, f"b{i}", BASE_US + 2 * i) for i in range(6)] + [post(C, f"c{i}", BASE_US + 2 * i + 1) for i in range(6)])
    app.test_client().get(f"{GET_FEED}?feed=timeline&actor={A}")
    join_backfills(app)
    assert len(feed_uris(app, A)) == 5
    assert feed_uris(app, A)[0].endswith("/c5")


def test_a_completed_backfill_never_runs_again(app, pds):
    client = app.test_client()
    client.get(f"{GET_FEED}?feed=timeline&actor={A}")
    join_backfills(app)
    seen = len(pds.requests)
    client.get(f"{GET_FEED}?feed=timeline&actor={A}")
    join_backfills(app)
    assert len(pds.requests) == seen


def age_claim(app, ms: int) -> None:
    """Move the claim's stamp back by ms: the backoff after a failure, without waiting for it."""
    with app.app_context(), db.connection_context():
        db.execute_sql(current_dialect().q("UPDATE feed_backfills SET started_at = started_at - ?"), (ms,))


def test_an_unfinished_listing_records_the_error_and_a_read_after_the_backoff_retries(app, pds):
    ingest(app, [post(B, "b0", BASE_US + 1), post(D, "d0", BASE_US + 2)])
    pds.fail_on_page = 1  # the first page (B, C) arrives, the second (D) fails
    client = app.test_client()
    client.get(f"{GET_FEED}?feed=timeline&actor={A}")
    join_backfills(app)
    assert backfill_row(app) == [(0, 1, False, False)]  # resting: stamped with the failure's time
    (error,) = rows(app, "SELECT last_error FROM feed_backfills")[0]
    assert error.startswith("follow backfill incomplete (inserted=2)")
    assert [u.rsplit("/", 1)[-1] for u in feed_uris(app, A)] == ["b0"]  # bootstrapped what it had
    pds.fail_on_page = None
    client.get(f"{GET_FEED}?feed=timeline&actor={A}")  # the next page, within the backoff: no retry
    join_backfills(app)
    assert backfill_row(app) == [(0, 1, False, False)]
    age_claim(app, backfill.RETRY_BASE_MS)
    client.get(f"{GET_FEED}?feed=timeline&actor={A}")
    join_backfills(app)
    assert backfill_row(app) == [(1, 1, True, True)]
    assert [u.rsplit("/", 1)[-1] for u in feed_uris(app, A)] == ["d0", "b0"]


def call(app, fn, *args):
    with app.app_context(), db.connection_context(), db.atomic():
        return fn(*args)


def test_claims_are_single_flight_and_go_stale_after_five_minutes(app):
    t = 1_000_000_000
    assert call(app, backfill.claim, A, "timeline", t) is True
    assert call(app, backfill.claim, A, "timeline", t + 1) is False  # in flight
    assert call(app, backfill.claim, A, "timeline", t + backfill.BACKFILL_STALE_MS - 1) is False
    assert call(app, backfill.claim, A, "timeline", t + backfill.BACKFILL_STALE_MS) is True  # crashed claim
    assert call(app, backfill.claim, B, "timeline", t) is True  # per (actor, feed)


def test_failed_attempts_back_off_doubling_up_to_the_stale_window(app, pds):
    pds.fail_on_page = 0
    client = app.test_client()
    for attempt in range(1, 5):
        client.get(f"{GET_FEED}?feed=timeline&actor={A}")
        join_backfills(app)
        assert rows(app, "SELECT retries FROM feed_backfills") == [(attempt,)]
        age_claim(app, backfill.wait_ms(attempt) - 5000)  # short of the backoff (by more than the test takes)
        client.get(f"{GET_FEED}?feed=timeline&actor={A}")
        join_backfills(app)
        assert rows(app, "SELECT retries FROM feed_backfills") == [(attempt,)]
        age_claim(app, 5000)
    assert [backfill.wait_ms(n) for n in range(1, 5)] == [60_000, 120_000, 240_000, 300_000]
    assert backfill_row(app) == [(0, 4, False, False)]
    pds.fail_on_page = None
    client.get(f"{GET_FEED}?feed=timeline&actor={A}")
    join_backfills(app)
    assert backfill_row(app) == [(1, 4, True, True)]


def test_an_unresolvable_pds_is_an_error_not_a_crash(make_app, tmp_path, pds):
    app = feeds_app(make_app, tmp_path, toml(), FEATHERREADER_PLC_URL="http://127.0.0.1:9",
                    FEATHERREADER_HANDLE_RESOLVER=pds.base)
    app.test_client().get(f"{GET_FEED}?feed=timeline&actor={A}")
    join_backfills(app)
    (row,) = rows(app, "SELECT completed, retries, last_error FROM feed_backfills")
    assert row[:2] == (0, 1) and "UnresolvableDid" in row[2]


def test_a_backfill_on_a_fresh_database_finds_the_tables_it_needs(make_app, tmp_path):
    """A sign-in can come before any ingest batch (seen in the whole process: 'no such table:
    feed_records_follow' at the first sign-in, then a retry minutes later): the tables are made
    when the process starts (feather.feeds.ensure_schema), not by the first batch."""
    from tests.fixtures.feeds.feedkit import FakeSources

    follows = [(f"f{i}", None, {"$type": FOLLOW, "subject": f"did:plc:bee{i}", "createdAt": iso(1_700_000_000_000_000)})
               for i in range(3)]
    app = feeds_app(make_app, tmp_path, toml(), sources=FakeSources(follows={"did:plc:ada": follows}))
    config = app.extensions["feeds"]
    assert backfill.run(app, config, config.feeds["timeline"], "did:plc:ada") is True
    with app.app_context(), db.connection_context():
        assert db.execute_sql("SELECT count(*) FROM feed_records_follow").fetchone()[0] == 3
