"""The Bluesky feed generator: did:web document, describeFeedGenerator, getFeedSkeleton."""
from __future__ import annotations

import time

import pytest

from feather.db import db
from tests.fixtures.feeds.feedkit import BASE_US, FakeSources, feeds_app, follow, ingest, join_backfills, post, toml
from tests.test_feeds_auth import K256, P256, mint
from tests.test_sync_views import in_db

A, B, C = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc"
PUBLIC = "http://localhost:5123"
SERVICE = "did:web:localhost%3A5123"
SKELETON = "app.bsky.feed.getFeedSkeleton"
FEED_URI = f"at://{C}/app.bsky.feed.generator/timeline"


def remember_published(app, uri=FEED_URI, feed="timeline"):
    from feather.db import current_dialect

    in_db(app, lambda: db.execute_sql(current_dialect().q(
        "INSERT INTO feed_generators (uri, publisher_did, rkey, feed, display_name, published_us)"
        " VALUES (?, ?, ?, ?, 'Following', 1)"), (uri, uri.split("/")[2], feed, feed)))


def generator_app(make_app, tmp_path, posts=5, **settings):
    sources = FakeSources(keys={A: P256.public_key(), B: K256.public_key()})
    app = feeds_app(make_app, tmp_path, toml(), sources=sources, FEATHERREADER_PUBLIC_URL=PUBLIC, **settings)
    ingest(app, [follow(A, "f1", B)] + [post(B, f"p{i:03d}", BASE_US + i * 1_000_000) for i in range(posts)])
    remember_published(app)
    return app


@pytest.fixture
def app(make_app, tmp_path):
    app = generator_app(make_app, tmp_path)
    yield app
    join_backfills(app)


def token(key=P256, **claims):
    return mint(key, **{"iss": A, "aud": SERVICE, "lxm": SKELETON, **claims})


def skeleton(app, bearer=None, feed=FEED_URI, **params):
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    return app.test_client().get(f"/xrpc/{SKELETON}", query_string={"feed": feed, **params}, headers=headers)


def uris(*numbers):
    return [f"at://{B}/app.bsky.feed.post/p{i:03d}" for i in numbers]


def test_the_did_document_names_the_feed_generator_service(app):
    r = app.test_client().get("/.well-known/did.json")
    assert r.json == {"@context": ["https://www.w3.org/ns/did/v1"], "id": SERVICE,
                      "service": [{"id": "#bsky_fg", "type": "BskyFeedGenerator", "serviceEndpoint": PUBLIC}]}


def test_without_a_public_url_there_is_no_generator(make_app, tmp_path):
    client = feeds_app(make_app, tmp_path, toml()).test_client()
    assert [client.get(p).status_code for p in ("/.well-known/did.json", f"/xrpc/{SKELETON}",
                                                "/xrpc/app.bsky.feed.describeFeedGenerator")] == [404, 404, 404]


def test_describe_lists_the_published_feeds(app):
    r = app.test_client().get("/xrpc/app.bsky.feed.describeFeedGenerator")
    assert r.json == {"did": SERVICE, "feeds": [{"uri": FEED_URI}]}


def test_the_viewer_reads_their_own_timeline_as_post_uris_page_by_page(app):
    first = skeleton(app, token(), limit="2").json
    assert first["feed"] == [{"post": u} for u in uris(4, 3)]
    second = skeleton(app, token(), limit="2", cursor=first["cursor"]).json
    third = skeleton(app, token(), limit="2", cursor=second["cursor"]).json
    assert [i["post"] for i in second["feed"] + third["feed"]] == uris(2, 1, 0)
    assert "cursor" not in third  # the end: no cursor (the app view stops asking)


@pytest.mark.parametrize("limit, expected", [("1000", 100), ("0", 1), ("-5", 1), ("abc", 50), (None, 50)])
def test_limit_is_clamped_to_the_lexicons_range(make_app, tmp_path, limit, expected):
    app = generator_app(make_app, tmp_path, posts=101)
    params = {"limit": limit} if limit is not None else {}
    assert len(skeleton(app, token(), **params).json["feed"]) == expected
    join_backfills(app)


@pytest.mark.parametrize("bearer, error", [
    (None, "AuthMissing"),
    (lambda: token(aud="did:web:elsewhere.example"), "BadJwtAudience"),
    (lambda: token(lxm="com.example.getFeed"), "BadJwtLexiconMethod"),
    (lambda: token(iat=int(time.time()) - 600, exp=int(time.time()) - 300), "JwtExpired"),
    (lambda: token(key=K256), "BadJwtSignature"),  # signed with another account's key, claiming to be A
])
def test_a_missing_or_bad_token_is_refused(app, bearer, error):
    r = skeleton(app, bearer() if bearer else None)
    assert (r.status_code, r.json["error"]) == (401, error)
    assert r.headers["WWW-Authenticate"].startswith("Bearer error=")


def test_an_unknown_feed_is_the_lexicons_error(app):
    for feed in (f"at://{C}/app.bsky.feed.generator/other", "not a uri"):
        r = skeleton(app, token(), feed=feed)
        assert (r.status_code, r.json["error"]) == (400, "UnknownFeed")
    assert (skeleton(app, token(), feed="").status_code, skeleton(app, token(), feed="").json["error"]) == (
        400, "InvalidRequest")


def test_a_viewer_this_instance_does_not_serve_gets_an_empty_feed_and_the_reason(make_app, tmp_path):
    app = generator_app(make_app, tmp_path, FEED_SERVE="signed-in")
    r = skeleton(app, token())
    assert (r.status_code, r.json) == (200, {"feed": [], "message": (
        "This instance keeps timelines only for accounts that signed in here. "
        f"Sign in at {PUBLIC} to have yours kept.")})
    join_backfills(app)


def test_under_readers_a_new_viewer_is_admitted_and_their_timeline_starts_filling(make_app, tmp_path):
    from tests.fixtures.feeds.feedkit import FOLLOW

    app = generator_app(make_app, tmp_path, FEED_SERVE="readers")
    app.extensions["feeds_sources"].follows = {A: [("f1", None, {"$type": FOLLOW, "subject": B})]}
    assert skeleton(app, token()).json == {"feed": []}  # nothing of theirs was kept before they asked
    assert in_db(app, lambda: db.execute_sql("SELECT did, source FROM feed_actors").fetchall()) == [(A, "reader")]
    join_backfills(app)  # their follows listed; whom they follow is queued for a fetch
    assert in_db(app, lambda: db.execute_sql("SELECT did FROM feed_fetches WHERE fetched_us IS NULL").fetchall()) \
        == [(B,)]


def test_with_a_service_did_set_elsewhere_no_did_document_is_served_here(make_app, tmp_path):
    app = generator_app(make_app, tmp_path, FEATHERREADER_FEED_SERVICE_DID="did:plc:feedservice")
    client = app.test_client()
    assert client.get("/.well-known/did.json").status_code == 404  # no feed record points at our did:web
    assert client.get("/xrpc/app.bsky.feed.describeFeedGenerator").json == {
        "did": "did:plc:feedservice", "feeds": [{"uri": FEED_URI}]}
    join_backfills(app)
