"""Admission (FEED_SERVE): only what matters to a served actor is stored; the rest never reaches SQL."""
from __future__ import annotations

import pytest

from feather.db import db
from tests.fixtures.feeds.feedkit import (
    BASE_US, POST, PROFILE, FakeSources, feed_uris, feeds_app, feeds_subscription, follow, iso, post, rows,
    settled_us, toml,
)

A, B, C, D = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc", "did:plc:dddd"


def served_app(make_app, tmp_path, actors=(A,), serve="signed-in", sources=None, **settings):
    extra = "actors = [" + ", ".join(f'"{a}"' for a in actors) + "]\n"
    # `actors` is a top-level key: put it before the first table.
    return feeds_app(make_app, tmp_path, extra + toml(), sources=sources or FakeSources(), FEED_SERVE=serve,
                     **settings)


def global_handler(app):
    sub = feeds_subscription(app.config["FEATHER"])
    return next(h for h in sub.handlers if h.feature == "feeds").apply_batch


def run(app, handler, events):
    with app.app_context(), db.connection_context(), db.atomic():
        handler(list(events))


class Counting:
    """Counts every statement the app runs (peewee's execute_sql is the one door to the database)."""

    def __init__(self, monkeypatch):
        self.sql: list[str] = []
        real = db.obj.execute_sql
        monkeypatch.setattr(db.obj, "execute_sql", lambda sql, params=None, *a, **k: (
            self.sql.append(sql), real(sql, params, *a, **k))[1])


def test_an_unrelated_authors_post_runs_no_sql_and_stores_nothing(make_app, tmp_path, monkeypatch):
    app = served_app(make_app, tmp_path)
    handler = global_handler(app)
    run(app, handler, [follow(A, "f1", C)])  # loads the filter and admits C
    with app.app_context(), db.connection_context():
        counting = Counting(monkeypatch)
        with db.atomic():
            handler([post(D, "d1", BASE_US + 1), post(B, "b1", BASE_US + 2)])
        seen = list(counting.sql)
    assert [s for s in seen if s.split()[0] not in ("BEGIN", "COMMIT")] == []
    assert rows(app, "SELECT did FROM feed_records_post") == []


def test_a_followees_post_in_the_same_batch_as_the_follow_is_admitted(make_app, tmp_path):
    app = served_app(make_app, tmp_path)
    run(app, global_handler(app), [follow(A, "f1", C), post(C, "c1", BASE_US + 1), post(D, "d1", BASE_US + 2)])
    assert feed_uris(app, A) == [f"at://{C}/{POST}/c1"]
    assert rows(app, "SELECT did FROM feed_records_post") == [(C,)]


def test_follows_by_unserved_actors_are_dropped_and_served_actors_own_records_kept(make_app, tmp_path):
    from tests.fixtures.feeds.feedkit import create

    app = served_app(make_app, tmp_path)
    run(app, global_handler(app), [follow(B, "f1", C), post(A, "a1", BASE_US + 1),
                                   create(A, PROFILE, "self", {"displayName": "Ada"})])
    assert rows(app, "SELECT did FROM feed_records_follow") == []
    assert rows(app, "SELECT did FROM feed_records_post") == [(A,)]
    assert rows(app, "SELECT did FROM feed_records_profile") == [(A,)]


def test_all_admits_everything(make_app, tmp_path):
    app = served_app(make_app, tmp_path, serve="all")
    run(app, global_handler(app), [follow(B, "f1", C), post(D, "d1", BASE_US + 1)])
    assert rows(app, "SELECT did FROM feed_records_follow") == [(B,)]
    assert rows(app, "SELECT did FROM feed_records_post") == [(D,)]


def test_a_sign_in_serves_the_account_from_the_next_batch(make_app, tmp_path):
    app = served_app(make_app, tmp_path, actors=())
    handler = global_handler(app)
    run(app, handler, [follow(B, "f1", C)])
    assert rows(app, "SELECT did FROM feed_records_follow") == []
    with app.app_context(), db.connection_context():
        for hook in app.extensions["sign_in_hooks"]:
            hook(B)
    handler.admission.checked_at = float("-inf")  # the next batch re-reads the version now
    run(app, handler, [follow(B, "f2", D), post(D, "d1", BASE_US + 1)])
    assert rows(app, "SELECT did, source FROM feed_actors") == [(B, "signed-in")]
    assert feed_uris(app, B) == [f"at://{D}/{POST}/d1"]


def test_accounts_that_signed_in_before_are_served(make_app, tmp_path):
    app = served_app(make_app, tmp_path, actors=())
    with app.app_context(), db.connection_context():
        db.execute_sql("INSERT INTO auth_grant (did, kind, pds_url, access_enc, refresh_enc, expires_at,"
                       " created_at, updated_at) VALUES (?, 'password', 'https://pds.example', 'x', 'y', 0, 0, 0)"
                       .replace("?", "'" + B + "'"))
    run(app, global_handler(app), [follow(B, "f1", C)])
    assert rows(app, "SELECT did FROM feed_records_follow") == [(B,)]


def test_a_new_follow_fetches_the_authors_newest_posts_into_the_feed(make_app, tmp_path):
    from feather.feeds.tasks import authors

    repo = [(f"p{i}", None, {"$type": POST, "text": f"p{i}", "createdAt": iso(BASE_US - i)}) for i in range(3)]
    sources = FakeSources(repos={(C, POST): repo, (C, PROFILE): [("self", "bafyp", {"displayName": "Cy"})]})
    app = served_app(make_app, tmp_path, sources=sources)
    run(app, global_handler(app), [follow(A, "f1", C, at_us=BASE_US + 100)])
    assert rows(app, "SELECT did, collection, fetched_us FROM feed_fetches") == [(C, "*", None)]
    with app.app_context(), db.connection_context():
        assert authors.fetch_tick(app, app.extensions["feeds"], now_us=settled_us()) == 1
    assert feed_uris(app, A) == [f"at://{C}/{POST}/p0", f"at://{C}/{POST}/p1", f"at://{C}/{POST}/p2"]
    assert rows(app, "SELECT uri FROM feed_records_profile") == [(f"at://{C}/{PROFILE}/self",)]
    with app.app_context(), db.connection_context():
        assert authors.fetch_tick(app, app.extensions["feeds"], now_us=settled_us()) == 0  # done: not fetched twice


@pytest.mark.parametrize("serve, status, error", [("signed-in", 403, "NotServed"), ("readers", 200, None)])
def test_get_feed_of_an_unserved_actor(make_app, tmp_path, serve, status, error):
    app = served_app(make_app, tmp_path, serve=serve)
    response = app.test_client().get(f"/xrpc/com.example.getFeed?feed=timeline&actor={B}")
    from tests.fixtures.feeds.feedkit import join_backfills

    join_backfills(app)
    assert response.status_code == status
    assert (response.json.get("error") if error else None) == error
    assert rows(app, "SELECT did FROM feed_actors") == ([] if error else [(B,)])


def test_readers_past_the_cap_are_refused(make_app, tmp_path):
    from tests.fixtures.feeds.feedkit import join_backfills

    app = served_app(make_app, tmp_path, serve="readers", FEED_SERVE_MAX_ACTORS=2)
    client = app.test_client()
    codes = [client.get(f"/xrpc/com.example.getFeed?feed=timeline&actor={did}").status_code for did in (B, C, D, B)]
    join_backfills(app)
    assert codes == [200, 200, 503, 200]  # B is still served: only new readers wait


def test_fetching_a_followee_whose_posts_are_already_stored_copies_no_more_than_the_cap(make_app, tmp_path):
    from feather.feeds.tasks import authors

    # C is served too, so C's own posts were kept before A followed C. The cap is 2.
    app = feeds_app(make_app, tmp_path, f'actors = ["{A}", "{C}"]\n' + toml(max_items=2), sources=FakeSources(),
                    FEED_SERVE="signed-in")
    handler = global_handler(app)
    run(app, handler, [post(C, f"c{i}", BASE_US + i) for i in range(4)])
    run(app, handler, [follow(A, "f1", C, at_us=BASE_US + 100)])
    with app.app_context(), db.connection_context():
        assert authors.fetch_tick(app, app.extensions["feeds"], now_us=settled_us()) == 1
    assert feed_uris(app, A) == [f"at://{C}/{POST}/c3", f"at://{C}/{POST}/c2"]


def test_a_new_followees_fetch_asks_for_no_more_than_the_feeds_cap(make_app, tmp_path):
    """followBackfill (100 here) is bounded by the target's cap (2): the fetch lists two posts,
    and reads the profile's `self` record."""
    from feather.feeds.tasks import authors

    app = feeds_app(make_app, tmp_path, toml(max_items=2), sources=FakeSources(), FEED_SERVE="signed-in")
    config = app.extensions["feeds"]
    assert [(c.short, n) for c, n in authors.plan(config)] == [("post", 2), ("profile", 0)]


def test_a_failing_author_fetch_backs_off_doubling_and_gives_up_at_the_fifth_try(make_app, tmp_path):
    from feather.feeds.ingest import narrow
    from feather.feeds.read.sources import SourceError
    from feather.feeds.tasks import authors

    class Down(FakeSources):
        def list_recent(self, did, collection, limit, deadline):
            raise SourceError("the author's PDS is down")

    app = served_app(make_app, tmp_path, sources=Down())
    run(app, global_handler(app), [follow(A, "f1", C, at_us=BASE_US + 100)])
    seen = []
    for _ in range(authors.MAX_ATTEMPTS):
        ((requested,),) = rows(app, "SELECT requested_us FROM feed_fetches")
        due = requested + narrow.SETTLE_US  # narrow subscriptions: once the followee's filter has them
        with app.app_context(), db.connection_context():
            assert authors.fetch_tick(app, app.extensions["feeds"], now_us=due - 1) == 0
            assert rows(app, "SELECT attempts FROM feed_fetches") == [(len(seen),)]  # not yet tried
            assert authors.fetch_tick(app, app.extensions["feeds"], now_us=due) == 0
        ((attempts, requested, fetched),) = rows(app, "SELECT attempts, requested_us, fetched_us FROM feed_fetches")
        seen.append((attempts, requested - due, fetched and fetched - due))
    assert seen == [(1, 60_000_000, None), (2, 120_000_000, None), (3, 240_000_000, None),
                    (4, 480_000_000, None), (5, 960_000_000, 0)]
    with app.app_context(), db.connection_context():  # given up: never due again
        assert authors.fetch_tick(app, app.extensions["feeds"], now_us=due + 10**12) == 0
    assert rows(app, "SELECT attempts FROM feed_fetches") == [(5,)]


def test_a_followed_authors_listing_is_stored_once_and_then_served_from_the_store_for_a_while(make_app, tmp_path):
    from feather.feeds.tasks import authors

    repo = [("p0", "bafyp0", {"$type": POST, "text": "p0", "createdAt": iso(BASE_US)})]
    sources = FakeSources(repos={(C, POST): repo})
    app = served_app(make_app, tmp_path, sources=sources)
    run(app, global_handler(app), [follow(A, "f1", C)])  # a served actor follows C: the store keeps C
    post_collection = app.extensions["feeds"].collections["post"]
    with app.app_context(), db.connection_context():
        config = app.extensions["feeds"]
        first = authors.backfill_listing(app, config, post_collection, C)
        second = authors.backfill_listing(app, config, post_collection, C)
    assert (first, second) == (None, None)  # both answered from the store; only the first fetched
    assert [c for c in sources.calls if c[0] == "list"] == [("list", C, POST)]
    assert rows(app, "SELECT uri FROM feed_records_post") == [(f"at://{C}/{POST}/p0",)]


@pytest.mark.parametrize("serve", ["signed-in", "readers"])
def test_a_strangers_listing_answers_from_the_fetched_page_and_stores_nothing(make_app, tmp_path, serve):
    repo = [("p1", "bafyp1", {"$type": POST, "text": "newer", "createdAt": iso(BASE_US + 1)}),
            ("p0", "bafyp0", {"$type": POST, "text": "older", "createdAt": iso(BASE_US)}),
            ("bad/key", "bafyx", {"$type": POST, "text": "an invalid rkey is dropped"}),
            ("big", "bafybig", {"$type": POST, "text": "x" * (64 * 1024)})]  # past MAX_RECORD_BYTES
    sources = FakeSources(repos={(D, POST): repo})
    app = served_app(make_app, tmp_path, serve=serve, sources=sources)
    client = app.test_client()
    first = client.get(f"/xrpc/com.example.post.listRecords?actor={D}&limit=1")
    second = client.get(f"/xrpc/com.example.post.listRecords?actor={D}&limit=1&cursor={first.json['cursor']}")
    assert first.status_code == second.status_code == 200
    assert [(r["uri"], r["value"]["text"]) for r in first.json["records"]] == [(f"at://{D}/{POST}/p1", "newer")]
    assert [(r["uri"], r["time_us"]) for r in second.json["records"]] == [(f"at://{D}/{POST}/p0", BASE_US)]
    third = client.get(f"/xrpc/com.example.post.listRecords?actor={D}").json
    assert ([r["rkey"] for r in third["records"]], "cursor" in third) == (["p1", "p0"], False)
    assert [c for c in sources.calls if c[0] == "list"] == [("list", D, POST)] * 3  # each read lists again
    assert rows(app, "SELECT count(*) FROM feed_records_post") == [(0,)]
    assert rows(app, "SELECT count(*) FROM feed_fetches") == [(0,)]

