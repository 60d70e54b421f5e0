"""Bounded storage under admission: the prune tick's records sweep removes what nobody served needs."""
from __future__ import annotations

from feather.db import db
from tests.fixtures.feeds.feedkit import (
    BASE_US, POST, FakeSources, feed_uris, feeds_app, follow, iso, post, rows, toml, unfollow,
)

A, B, C, D = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc", "did:plc:dddd"


def served_app(make_app, tmp_path, max_items=200, serve="signed-in", **settings):
    return feeds_app(make_app, tmp_path, f'actors = ["{A}"]\n' + toml(max_items=max_items, follow_backfill=3),
                     sources=FakeSources(), FEED_SERVE=serve, **settings)


def ingest(app, events):
    from tests.fixtures.feeds.feedkit import ingest as through_engine

    through_engine(app, events)


def tick(app, now_ms=10**13):
    from feather.feeds.tasks.prune import prune_tick

    with app.app_context(), db.connection_context():
        return prune_tick(app.extensions["feeds"], app.config["FEATHER"], now_ms=now_ms)


def plant_post(app, did, rkey, at_us):
    """A record stored before admission existed (or under FEED_SERVE=all)."""
    from feather.feeds.store import records

    config = app.extensions["feeds"]
    with app.app_context(), db.connection_context(), db.atomic():
        records.store(config.collections["post"], uri=f"at://{did}/{POST}/{rkey}", did=did, rkey=rkey, cid="bafy",
                      record={"text": rkey, "createdAt": iso(at_us)}, time_us=at_us)


def test_an_unfollowed_authors_records_are_removed_and_a_followed_ones_kept(make_app, tmp_path):
    app = served_app(make_app, tmp_path)
    ingest(app, [follow(A, "f1", C), follow(A, "f2", D)])
    ingest(app, [post(C, "c1", BASE_US + 1), post(D, "d1", BASE_US + 2)])
    ingest(app, [unfollow(A, "f2", at_us=BASE_US + 3)])
    tick(app)
    assert rows(app, "SELECT did FROM feed_records_post") == [(C,)]
    assert rows(app, "SELECT did FROM feed_fetches ORDER BY did") == [(C,)]  # D is fetched afresh if followed again
    assert feed_uris(app, A) == [f"at://{C}/{POST}/c1"]


def test_records_of_authors_nobody_follows_are_removed_but_served_actors_own_are_kept(make_app, tmp_path):
    app = served_app(make_app, tmp_path)
    plant_post(app, B, "b1", BASE_US)
    plant_post(app, A, "a1", BASE_US)
    tick(app)
    assert rows(app, "SELECT did FROM feed_records_post") == [(A,)]


def test_a_followed_authors_posts_beyond_the_largest_cap_are_removed(make_app, tmp_path):
    app = served_app(make_app, tmp_path, max_items=3)
    ingest(app, [follow(A, "f1", C)])
    for i in range(5):
        plant_post(app, C, f"c{i}", BASE_US + i)
    tick(app)
    assert rows(app, "SELECT rkey FROM feed_records_post ORDER BY rkey") == [("c2",), ("c3",), ("c4",)]


def test_follows_and_timelines_of_unserved_actors_are_removed(make_app, tmp_path):
    everything = served_app(make_app, tmp_path, serve="all")  # as stored before admission was turned on
    ingest(everything, [follow(A, "f1", C), follow(B, "f2", C), post(C, "c1", BASE_US + 1)])
    assert feed_uris(everything, B) == [f"at://{C}/{POST}/c1"]
    app = served_app(make_app, tmp_path)
    tick(app)
    assert rows(app, "SELECT did FROM feed_records_follow") == [(A,)]
    assert rows(app, "SELECT DISTINCT actor FROM feed_items") == [(A,)]
    assert rows(app, "SELECT did FROM feed_records_post") == [(C,)]


def test_all_keeps_everything(make_app, tmp_path):
    app = served_app(make_app, tmp_path, serve="all")
    plant_post(app, B, "b1", BASE_US)
    tick(app)
    assert rows(app, "SELECT did FROM feed_records_post") == [(B,)]


def test_a_slice_visits_at_most_the_budget_and_the_next_resumes_across_tables(make_app, tmp_path):
    from feather.feeds.tasks import records_sweep as storage

    app = served_app(make_app, tmp_path)
    from feather.feeds.store import records

    for did in (B, C, D):
        plant_post(app, did, "x", BASE_US)
    with app.app_context(), db.connection_context(), db.atomic():
        records.store(app.extensions["feeds"].collections["profile"], uri=f"at://{B}/app.bsky.actor.profile/self",
                      did=B, rkey="self", cid="bafy", record={}, time_us=BASE_US)
    with app.app_context(), db.connection_context():
        config = app.extensions["feeds"]
        first = storage.sweep_slice(config, 2)
        second = storage.sweep_slice(config, 2)
        third = storage.sweep_slice(config, 2)
    # Tables in short-name order: follow (empty), post (B, C, D), profile (B).
    assert (first.authors, first.removed, first.table, first.did) == (2, 2, "post", C)
    assert (second.authors, second.removed, second.table, second.did) == (2, 2, "profile", B)
    assert (third.authors, third.removed, third.table, third.did) == (0, 0, None, None)
    assert rows(app, "SELECT count(*) FROM feed_records_post") == [(0,)]
    assert rows(app, "SELECT count(*) FROM feed_records_profile") == [(0,)]


def test_a_followed_but_unserved_authors_own_follows_are_removed_and_their_posts_kept(make_app, tmp_path):
    everything = served_app(make_app, tmp_path, serve="all")  # as stored before admission was turned on
    ingest(everything, [follow(A, "f1", C), follow(C, "f2", D), post(C, "c1", BASE_US + 1)])
    app = served_app(make_app, tmp_path)
    tick(app)
    assert rows(app, "SELECT did, rkey FROM feed_records_follow") == [(A, "f1")]
    assert rows(app, "SELECT did FROM feed_records_post") == [(C,)]
    assert feed_uris(app, A) == [f"at://{C}/{POST}/c1"]
