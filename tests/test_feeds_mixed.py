"""A mixed feed (`mixed = true`): every target of the feed in one timeline, newest first.

Posts, reposts and another app's records of the people you follow, read through getFeed and the
page as one list; `collection=` still reads one target alone; the statement stays index-bounded.
"""
from __future__ import annotations

import pytest

from feather.db import current_dialect, db
from tests.fixtures.feeds.feedkit import BASE_US, FakeSources, create, delete, feeds_app, follow, ingest, iso, join_backfills, post
from tests.test_feeds_explain import plan, unbounded_scans
from tests.test_feeds_reposts import puri, repost, ruri

A, B, C, D = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc", "did:plc:dddd"
GALLERY = "com.example.gallery"
GET_FEED = "/xrpc/com.example.getFeed"
TOML = """
namespace = "com.example"
[collections.follow]
collection = "app.bsky.graph.follow"
[collections.post]
collection = "app.bsky.feed.post"
searchable = ["text"]
[collections.repost]
collection = "app.bsky.feed.repost"
reposts = "post"
[collections.gallery]
collection = "com.example.gallery"
[feeds.everything]
title = "Everything"
targets = ["post", "repost", "gallery"]
mixed = true
"""


@pytest.fixture
def app(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, TOML, sources=FakeSources())
    with app.app_context(), db.connection_context(), db.atomic():
        db.execute_sql("INSERT INTO feed_backfills (actor, feed, completed) VALUES ('did:plc:aaaa', 'everything', 1)")
    yield app
    join_backfills(app)


def gallery(did, rkey, at_us, title):
    return create(did, GALLERY, rkey, {"title": title, "description": f"about {title}", "createdAt": iso(at_us)},
                  time_us=at_us)


def guri(did, rkey):
    return f"at://{did}/{GALLERY}/{rkey}"


def read(app, **params):
    r = app.test_client().get(GET_FEED, query_string={"feed": "everything", "actor": A, **params})
    assert r.status_code == 200, r.json
    return r.json


def shown(body):
    return [(r["uri"], r["collection"], (r.get("reason") or {}).get("repost")) for r in body["records"]]


def test_every_target_in_one_list_newest_first_with_each_records_collection(app):
    ingest(app, [follow(A, "f1", B), follow(A, "f2", C)])
    ingest(app, [post(B, "p1", BASE_US + 10), gallery(C, "g1", BASE_US + 20, "Herons"), post(D, "q1", BASE_US + 25),
                 post(C, "p2", BASE_US + 30), gallery(D, "g9", BASE_US + 35, "not followed")])
    ingest(app, [repost(C, "r1", puri(D, "q1"), BASE_US + 40), repost(C, "r2", puri(B, "p1"), BASE_US + 50)])
    body = read(app)
    assert shown(body) == [(puri(B, "p1"), "app.bsky.feed.post", ruri(C, "r2")),
                           (puri(D, "q1"), "app.bsky.feed.post", ruri(C, "r1")),
                           (puri(C, "p2"), "app.bsky.feed.post", None),
                           (guri(C, "g1"), GALLERY, None)]
    assert body["records"][3]["value"]["title"] == "Herons"
    # Paged two at a time: the same list, nothing twice.
    first = read(app, limit="2")
    second = read(app, limit="2", cursor=first["cursor"])
    assert shown(first) + shown(second) == shown(body) and "cursor" in first
    # One target alone, as for any feed.
    assert [r["uri"] for r in read(app, collection="gallery")["records"]] == [guri(C, "g1")]
    # A deleted gallery leaves it.
    ingest(app, [delete(C, GALLERY, "g1", time_us=BASE_US + 60)])
    assert [u for u, _c, _r in shown(read(app))] == [puri(B, "p1"), puri(D, "q1"), puri(C, "p2")]


def test_the_page_shows_other_apps_records_among_the_posts(app):
    from tests.test_sync_views import sign_in

    ingest(app, [follow(A, "f2", C), gallery(C, "g1", BASE_US + 20, "Herons <at dawn>"),
                 post(C, "p2", BASE_US + 30, text="a post")])
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    page = client.get("/timeline").get_data(as_text=True)
    assert page.index("a post") < page.index("Herons &lt;at dawn&gt;")
    assert '<a href="/timeline?collection=gallery"' in page  # one target alone, by its short name


def test_the_mixed_page_statement_is_index_bounded(app):
    from feather.feeds.read import hybrid
    from tests.test_feeds_explain import feed_page_sql

    config = app.extensions["feeds"]
    feed = config.feeds["everything"]
    with app.app_context(), db.connection_context():
        statement, params = feed_page_sql(config, feed, None, A)
        assert hybrid.feed_source(config, feed, None, A).mixed
        lines = plan(statement, params)
    # `r` is the union materialized from the reader's own rows (a primary-key probe per row, so
    # bounded by the caps); reading it whole is reading those rows. Every table under it is probed.
    tables = ["feed_items", "f", "g", "feed_records_post", "feed_records_gallery"]
    assert unbounded_scans(lines, tables) == [], lines
    assert "MATERIALIZE r" in lines and any(line.startswith("SEARCH feed_records_gallery USING") for line in lines) \
        if current_dialect().is_sqlite else True


def test_a_mixed_feed_is_checked(make_app, tmp_path):
    from feather.feeds.config import FeedsConfigError, parse

    base = {"collections": {"follow": {"collection": "app.bsky.graph.follow"}, "post": {"collection": POST_NSID}}}
    with pytest.raises(FeedsConfigError, match='Feed "f" mixed must be true or false'):
        parse({**base, "feeds": {"f": {"targets": ["post"], "mixed": "yes"}}})
    with pytest.raises(FeedsConfigError, match="cannot be mixed and have fanoutMaxFollowers"):
        parse({**base, "feeds": {"f": {"targets": ["post"], "mixed": True, "fanoutMaxFollowers": 5}}})


POST_NSID = "app.bsky.feed.post"

