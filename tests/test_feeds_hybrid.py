"""Hybrid fan-out: getFeed pages are identical with and without fanoutMaxFollowers.

One app, one follow graph, two feeds over mirror-image target collections: `plain` always fans
out, `hybrid` skips authors above 3 followers and merges them at read time. Every post event is
applied to both collections, so the two feeds must page identically (records, order, cursors),
up to the collection NSID inside URIs.
"""
from __future__ import annotations

import base64
import json
import random

import pytest

from feather import sql
from feather.db import db
from tests.fixtures.feeds import oracle
from tests.fixtures.feeds.feedkit import BASE_US, FakeSources, cid_of, create, delete, feeds_app, follow, ingest, iso, rows, unfollow

POST, MIRROR = "app.bsky.feed.post", "com.example.mirror.post"
USERS = [f"did:plc:user{i:02d}" for i in range(10)]

TOML = """
namespace = "com.example"
[collections.follow]
collection = "app.bsky.graph.follow"
[collections.post]
collection = "app.bsky.feed.post"
[collections.mirror]
collection = "com.example.mirror.post"
[feeds.plain]
targets = ["post"]
maxItems = {cap}
followBackfill = {backfill}
[feeds.hybrid]
targets = ["mirror"]
maxItems = {cap}
followBackfill = {backfill}
fanoutMaxFollowers = 3
"""


def make(make_app, tmp_path, cap, backfill):
    app = feeds_app(make_app, tmp_path, TOML.format(cap=cap, backfill=backfill), sources=FakeSources())
    with app.app_context(), db.connection_context(), db.atomic():  # no first-read bootstrap here
        for actor in USERS:
            for feed in ("plain", "hybrid"):
                sql.execute("INSERT INTO feed_backfills (actor, feed, completed) VALUES (?, ?, 1)", (actor, feed))
    return app


def both(did, rkey, text, at_us, op="create"):
    record = {"text": text, "createdAt": iso(at_us)}
    cid = cid_of({"$type": POST, **record})  # the same CID in both collections
    return [create(did, POST, rkey, record, time_us=at_us + 5, op=op, cid=cid),
            create(did, MIRROR, rkey, record, time_us=at_us + 5, op=op, cid=cid)]


def random_history(seed, steps=260):
    """Follows, unfollows, posts (with tied times), edits and deletes, in random batches."""
    rng = random.Random(seed)
    follows: dict[tuple[str, str], str] = {}  # (follower, subject) -> rkey
    posts: list[tuple[str, str]] = []
    events, n = [], 0
    # A few popular authors make the hybrid path real.
    popular = USERS[:3]
    for _ in range(steps):
        n += 1
        roll = rng.random()
        if roll < 0.30:
            a = rng.choice(USERS)
            s = rng.choice(popular) if rng.random() < 0.6 else rng.choice(USERS)
            if a != s and (a, s) not in follows:
                follows[(a, s)] = f"f{n:04d}"
                events.append(follow(a, follows[(a, s)], s, at_us=BASE_US + n))
        elif roll < 0.38 and follows:
            (a, s) = rng.choice(sorted(follows))
            events.append(unfollow(a, follows.pop((a, s))))
        elif roll < 0.85:
            did, rkey = rng.choice(USERS), f"p{n:04d}"
            posts.append((did, rkey))
            events += both(did, rkey, f"post {n}", BASE_US + rng.randint(0, 120) * 1000)
        elif roll < 0.93 and posts:
            did, rkey = rng.choice(posts)
            events += both(did, rkey, f"edited {n}", BASE_US + rng.randint(0, 120) * 1000, op="update")
        elif posts:
            did, rkey = posts.pop(rng.randrange(len(posts)))
            events += [delete(did, POST, rkey), delete(did, MIRROR, rkey)]
    batches, i = [], 0
    while i < len(events):
        size = rng.randint(1, 25)
        batches.append(events[i:i + size])
        i += size
    return batches


def normalise(value):
    return json.loads(json.dumps(value).replace(MIRROR, POST))


def pages(client, feed, actor, limit=4, author=None):
    out, cursor = [], None
    for _ in range(200):
        url = (f"/xrpc/com.example.getFeed?feed={feed}&actor={actor}&limit={limit}" + (f"&did={author}" if author else "")
               + (f"&cursor={cursor}" if cursor else ""))
        body = client.get(url).json
        cursor = body.get("cursor")
        decoded = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))) if cursor else None
        out.append((normalise(body["records"]), normalise(decoded)))
        if not cursor:
            return out
    raise AssertionError("paging did not end")


def assert_same_feeds(app):
    client = app.test_client()
    for actor in USERS:
        assert pages(client, "hybrid", actor) == pages(client, "plain", actor), actor


def assert_hybrid_was_used(app):
    assert rows(app, "SELECT count(*) FROM feed_heavy_authors WHERE feed = 'hybrid'")[0][0] > 0
    plain = rows(app, "SELECT count(*) FROM feed_items WHERE collection = ?", (POST,))[0][0]
    hybrid = rows(app, "SELECT count(*) FROM feed_items WHERE collection = ?", (MIRROR,))[0][0]
    assert hybrid < plain


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pages_are_identical_with_and_without_hybrid_fanout(make_app, tmp_path, seed):
    """Caps never bind here, so pages are compared at several points of the history."""
    app = make(make_app, tmp_path, cap=500, backfill=3)
    batches = random_history(seed)
    for i, batch in enumerate(batches):
        ingest(app, batch)
        if i % 15 == 14:
            assert_same_feeds(app)
    assert_same_feeds(app)
    assert_hybrid_was_used(app)


def records_of(paged) -> list:
    return [record for page, _ in paged for record in page]


@pytest.mark.parametrize("seed", [6, 7])
def test_the_author_filter_keeps_exactly_that_authors_records_in_feed_order_on_both_paths(make_app, tmp_path, seed):
    """getFeed?did=X pages through the feed's records by X alone, in the feed's order, fan-out and
    hybrid alike, including the heavy authors merged at read time; a DID the actor does not follow
    is an empty feed."""
    app = make(make_app, tmp_path, cap=500, backfill=3)
    for batch in random_history(seed):
        ingest(app, batch)
    assert_hybrid_was_used(app)
    client, kept = app.test_client(), 0
    for actor in USERS[:5]:
        whole = records_of(pages(client, "plain", actor, limit=50))
        for author in USERS:
            expected = [r for r in whole if r["did"] == author]
            plain = pages(client, "plain", actor, limit=3, author=author)
            assert records_of(plain) == expected, (actor, author)
            assert records_of(pages(client, "hybrid", actor, limit=3, author=author)) == expected, (actor, author)
            kept += len(expected)
    assert kept > 20  # the history gave the filter something to keep
    assert client.get(f"/xrpc/com.example.getFeed?feed=plain&actor={USERS[0]}&did=did:plc:nobody").json == {"records": []}
    refused = client.get(f"/xrpc/com.example.getFeed?feed=plain&actor={USERS[0]}&did=alice.test")
    assert (refused.status_code, refused.json["error"]) == (400, "InvalidRequest")


@pytest.mark.parametrize("seed", [4, 5])
def test_pages_are_identical_after_a_full_prune_with_a_binding_cap(make_app, tmp_path, seed):
    """With a small cap a fan-out feed holds the newest cap (ties kept) once pruned; a hybrid read
    applies that same rule to the union, so after the prune both page the same."""
    app = make(make_app, tmp_path, cap=6, backfill=4)
    for batch in random_history(seed):
        ingest(app, batch)
    with app.app_context(), db.connection_context():
        oracle.prune_all(app.extensions["feeds"].target_caps())
    assert_same_feeds(app)
    assert_hybrid_was_used(app)


def test_a_heavy_authors_post_is_not_copied_but_is_read(make_app, tmp_path):
    app = make(make_app, tmp_path, cap=50, backfill=50)
    star, fans = USERS[0], USERS[1:6]
    ingest(app, [follow(fan, f"f{i}", star) for i, fan in enumerate(fans)])
    ingest(app, both(star, "p1", "hi", BASE_US + 1000))
    assert rows(app, "SELECT count(*) FROM feed_items WHERE collection = ?", (MIRROR,)) == [(0,)]
    assert rows(app, "SELECT count(*) FROM feed_items WHERE collection = ?", (POST,)) == [(5,)]
    body = app.test_client().get(f"/xrpc/com.example.getFeed?feed=hybrid&actor={fans[0]}").json
    assert [r["uri"] for r in body["records"]] == [f"at://{star}/{MIRROR}/p1"]
    ingest(app, [delete(star, MIRROR, "p1")])
    assert app.test_client().get(f"/xrpc/com.example.getFeed?feed=hybrid&actor={fans[0]}").json == {"records": []}
