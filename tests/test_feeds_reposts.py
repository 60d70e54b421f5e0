"""Reposts in timelines, the feed variants (posts only, the replies rule) and what they show.

A repost by someone the reader follows puts the reposted post in the feed at the repost's time,
once: a post already there, or reposted by several followees, shows at its newest row with that
row's reason. Deleting the repost removes what it added; the post's own deletion removes it
everywhere. Everything here goes through the real ingest path and the XRPC routes.
"""
from __future__ import annotations

import random

import pytest

from feather.db import db
from feather.feeds.ingest import apply
from tests.fixtures.feeds import oracle
from tests.fixtures.feeds.feedkit import (
    BASE_US, FOLLOW, POST, FakeSources, cid_of, create, delete, feeds_app, follow, ingest, iso, join_backfills,
    REPOST_TOML, post, repost, rows,
)

REPOST = "app.bsky.feed.repost"
A, B, C, D, E = (f"did:plc:{c * 4}" for c in "abcde")
GET_FEED = "/xrpc/com.featherreader.getFeed"
REASON = "app.bsky.feed.defs#skeletonReasonRepost"


def puri(did, rkey):
    return f"at://{did}/{POST}/{rkey}"


def ruri(did, rkey):
    return f"at://{did}/{REPOST}/{rkey}"


def unrepost(did, rkey, at_us):
    return delete(did, REPOST, rkey, time_us=at_us)


@pytest.fixture
def sources():
    return FakeSources()


@pytest.fixture
def app(make_app, tmp_path, sources):
    app = feeds_app(make_app, tmp_path, sources=sources)  # the built-in config: Following + posts only
    with app.app_context(), db.connection_context(), db.atomic():
        for actor in (A, C):
            for feed in ("timeline", "posts"):
                db.execute_sql(_q("INSERT INTO feed_backfills (actor, feed, completed) VALUES (?, ?, 1)"),
                               (actor, feed))
    yield app
    join_backfills(app)


def _q(statement):
    from feather.db import current_dialect
    return current_dialect().q(statement)


def feed(app, actor=A, name="timeline", **params):
    response = app.test_client().get(GET_FEED, query_string={"feed": name, "actor": actor, **params})
    assert response.status_code == 200, response.json
    return response.json


def shown(body):
    """(uri, the reposter's DID or None, feed time) of each record of a getFeed page."""
    return [(r["uri"], r.get("reason", {}).get("by"), r.get("reason", {}).get("time_us", r["time_us"]))
            for r in body["records"]]


def test_a_repost_by_a_followee_shows_the_post_once_at_the_reposts_time_with_its_reason(app):
    ingest(app, [follow(A, "f1", B), follow(A, "f2", C)])
    ingest(app, [post(B, "p1", BASE_US + 10), post(D, "q1", BASE_US + 20), post(B, "p2", BASE_US + 30)])
    ingest(app, [repost(C, "r1", puri(D, "q1"), BASE_US + 40), repost(C, "r2", puri(B, "p1"), BASE_US + 50)])
    body = feed(app)
    assert shown(body) == [(puri(B, "p1"), C, BASE_US + 50), (puri(D, "q1"), C, BASE_US + 40),
                           (puri(B, "p2"), None, BASE_US + 30)]
    first = body["records"][0]
    assert first["reason"] == {"$type": REASON, "repost": ruri(C, "r2"), "by": C, "time_us": BASE_US + 50}
    assert (first["did"], first["time_us"], first["value"]["text"]) == (B, BASE_US + 10, "hello")
    # The posts-only variant reads the same store without the reposts.
    assert shown(feed(app, name="posts")) == [(puri(B, "p2"), None, BASE_US + 30), (puri(B, "p1"), None, BASE_US + 10)]


def test_reposted_by_several_followees_shows_once_with_the_newest_and_unreposting_steps_back(app):
    ingest(app, [follow(A, "f1", B), follow(A, "f2", C), follow(A, "f3", E)])
    ingest(app, [post(B, "p1", BASE_US + 10)])
    ingest(app, [repost(C, "r1", puri(B, "p1"), BASE_US + 20), repost(E, "r1", puri(B, "p1"), BASE_US + 30)])
    assert shown(feed(app)) == [(puri(B, "p1"), E, BASE_US + 30)]
    ingest(app, [unrepost(E, "r1", BASE_US + 40)])
    assert shown(feed(app)) == [(puri(B, "p1"), C, BASE_US + 20)]
    ingest(app, [unrepost(C, "r1", BASE_US + 41)])
    assert shown(feed(app)) == [(puri(B, "p1"), None, BASE_US + 10)]  # back to the author's own row


def test_unreposting_a_post_by_someone_not_followed_removes_it(app):
    ingest(app, [follow(A, "f2", C), post(D, "q1", BASE_US + 10)])
    ingest(app, [repost(C, "r1", puri(D, "q1"), BASE_US + 20)])
    assert shown(feed(app)) == [(puri(D, "q1"), C, BASE_US + 20)]
    ingest(app, [unrepost(C, "r1", BASE_US + 30)])
    assert feed(app)["records"] == []


def test_a_reposted_posts_deletion_removes_it_from_every_feed(app):
    ingest(app, [follow(A, "f2", C), follow(E, "f1", C), post(D, "q1", BASE_US + 10)])
    ingest(app, [repost(C, "r1", puri(D, "q1"), BASE_US + 20)])
    assert [shown(feed(app, actor)) for actor in (A, E)] == [[(puri(D, "q1"), C, BASE_US + 20)]] * 2
    ingest(app, [delete(D, POST, "q1", time_us=BASE_US + 30)])
    assert [feed(app, actor)["records"] for actor in (A, E)] == [[], []]
    # The repost rows stay (C's, for the prune or an unfollow) but show nothing, and the deleted
    # post is not fetched again: its tombstone says it is gone.
    assert rows(app, "SELECT actor FROM feed_items WHERE subject IS NOT NULL ORDER BY actor") == [(A,), (E,)]


def test_paging_a_feed_of_posts_and_their_reposts_never_repeats_or_skips(app):
    ingest(app, [follow(A, f"f{x}", x) for x in (B, C, E)])
    ingest(app, [post(B, f"p{i}", BASE_US + i * 10) for i in range(8)])
    ingest(app, [repost(C, f"r{i}", puri(B, f"p{i}"), BASE_US + 100 + i) for i in (1, 3, 5)]
           + [repost(E, f"r{i}", puri(B, f"p{i}"), BASE_US + 200 - i) for i in (3, 6)])
    everything = shown(feed(app, limit="50"))
    pages, cursor = [], None
    while True:
        body = feed(app, limit="2", **({"cursor": cursor} if cursor else {}))
        pages += shown(body)
        cursor = body.get("cursor")
        if not cursor:
            break
    assert pages == everything
    assert everything == [(puri(B, "p3"), E, BASE_US + 197), (puri(B, "p6"), E, BASE_US + 194),
                          (puri(B, "p5"), C, BASE_US + 105), (puri(B, "p1"), C, BASE_US + 101),
                          (puri(B, "p7"), None, BASE_US + 70), (puri(B, "p4"), None, BASE_US + 40),
                          (puri(B, "p2"), None, BASE_US + 20), (puri(B, "p0"), None, BASE_US)]


def test_unfollowing_a_reposter_takes_their_reposts_out(app):
    ingest(app, [follow(A, "f1", B), follow(A, "f2", C), post(B, "p1", BASE_US + 10), post(D, "q1", BASE_US + 11)])
    ingest(app, [repost(C, "r1", puri(B, "p1"), BASE_US + 20), repost(C, "r2", puri(D, "q1"), BASE_US + 21)])
    ingest(app, [delete(A, FOLLOW, "f2", time_us=BASE_US + 30)])
    assert shown(feed(app)) == [(puri(B, "p1"), None, BASE_US + 10)]


def test_a_new_follow_backfills_the_followees_reposts_with_their_subjects(app):
    ingest(app, [post(D, "q1", BASE_US + 10), repost(C, "r1", puri(D, "q1"), BASE_US + 20)])
    ingest(app, [follow(A, "f2", C, at_us=BASE_US + 30)])
    assert shown(feed(app)) == [(puri(D, "q1"), C, BASE_US + 20)]


# --- the replies rule ---------------------------------------------------------------------------

REPLIES_TOML = """
[collections.follow]
collection = "app.bsky.graph.follow"
[collections.post]
collection = "app.bsky.feed.post"
[feeds.all]
targets = ["post"]
[feeds.followed]
targets = ["post"]
replies = "followed"
[feeds.none]
targets = ["post"]
replies = "none"
"""


def reply(did, rkey, parent_uri, at_us):
    ref = {"uri": parent_uri, "cid": "bafyparent"}
    return post(did, rkey, at_us, text="a reply", reply={"root": ref, "parent": ref})


def test_the_replies_rule_all_followed_none(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, REPLIES_TOML, sources=FakeSources())
    with app.app_context(), db.connection_context(), db.atomic():
        for name in ("all", "followed", "none"):
            db.execute_sql(_q("INSERT INTO feed_backfills (actor, feed, completed) VALUES (?, ?, 1)"), (A, name))
    ingest(app, [follow(A, "f1", B), follow(A, "f2", C)])
    ingest(app, [post(B, "p1", BASE_US + 1), reply(B, "p2", puri(C, "c1"), BASE_US + 2),
                 reply(B, "p3", puri(D, "d1"), BASE_US + 3), reply(B, "p4", puri(B, "p1"), BASE_US + 4)])
    got = {name: [r["uri"] for r in feed(app, name=name)["records"]] for name in ("all", "followed", "none")}
    assert got == {"all": [puri(B, "p4"), puri(B, "p3"), puri(B, "p2"), puri(B, "p1")],
                   "followed": [puri(B, "p4"), puri(B, "p2"), puri(B, "p1")],  # not the reply to D
                   "none": [puri(B, "p1")]}
    ingest(app, [follow(A, "f3", D)])  # following D later shows the reply to them at once
    assert [r["uri"] for r in feed(app, name="followed")["records"]][:3] == [puri(B, "p4"), puri(B, "p3"), puri(B, "p2")]
    join_backfills(app)


# --- fetching what a repost shows, under admission ----------------------------------------------

@pytest.fixture
def admitted(make_app, tmp_path):
    sources = FakeSources()
    app = feeds_app(make_app, tmp_path, sources=sources, FEED_SERVE="signed-in")
    with app.app_context(), db.connection_context(), db.atomic():
        db.execute_sql(_q("INSERT INTO feed_actors (did, source, added_us) VALUES (?, 'test', 1)"), (A,))
        for name in ("timeline", "posts"):
            db.execute_sql(_q("INSERT INTO feed_backfills (actor, feed, completed) VALUES (?, ?, 1)"), (A, name))
    yield app, sources
    join_backfills(app)


def test_a_reposted_post_the_store_lacks_is_fetched_at_read_time_and_its_delete_still_arrives(admitted):
    app, sources = admitted
    q1 = {"$type": POST, "text": "from afar", "createdAt": iso(BASE_US + 10)}
    sources.repos[(D, POST)] = [("q1", cid_of(q1), q1)]
    ingest(app, [follow(A, "f2", C)])
    ingest(app, [post(D, "q1", BASE_US + 10, text="from afar")])  # D is followed by nobody served: dropped
    ingest(app, [repost(C, "r1", puri(D, "q1"), BASE_US + 20)])
    assert rows(app, "SELECT count(*) FROM feed_records_post") == [(0,)]
    body = feed(app)
    assert shown(body) == [(puri(D, "q1"), C, BASE_US + 20)]
    assert body["records"][0]["value"]["text"] == "from afar"
    assert ("get", D, POST) in sources.calls
    # The stored copy is kept by the records sweep while the repost row shows it...
    from feather.feeds.tasks import records_sweep
    with app.app_context(), db.connection_context():
        records_sweep.sweep_slice(app.extensions["feeds"], 100)
    assert rows(app, "SELECT uri FROM feed_records_post") == [(puri(D, "q1"),)]
    # ...and D's delete is admitted although nobody served follows D.
    ingest(app, [delete(D, POST, "q1", time_us=BASE_US + 30)])
    assert feed(app)["records"] == []
    assert rows(app, "SELECT count(*) FROM feed_records_post") == [(0,)]


def test_a_reposted_post_that_no_longer_exists_is_remembered_as_deleted(admitted):
    app, sources = admitted
    ingest(app, [follow(A, "f2", C)])
    ingest(app, [repost(C, "r1", puri(D, "gone"), BASE_US + 20)])
    assert feed(app)["records"] == []
    assert rows(app, "SELECT uri FROM feed_tombstones") == [(puri(D, "gone"),)]
    calls = len(sources.calls)
    feed(app)
    assert len(sources.calls) == calls  # not asked again


def test_a_read_looks_for_missing_reposted_posts_only_in_its_pages_window_of_reposts(admitted):
    from feather.feeds.read import reposts as read_reposts
    app, sources = admitted
    q1 = {"$type": POST, "text": "from afar", "createdAt": iso(BASE_US + 5)}
    sources.repos[(D, POST)] = [("q1", cid_of(q1), q1)]
    ingest(app, [follow(A, "f2", C)])
    ingest(app, [repost(C, "old", puri(D, "q1"), BASE_US + 5)])  # D's post: never stored here
    n = read_reposts.WINDOW
    ingest(app, [post(C, f"p{i}", BASE_US + 100 + i) for i in range(n)]
           + [repost(C, f"r{i}", puri(C, f"p{i}"), BASE_US + 1_000 + i) for i in range(n)])
    first = feed(app, limit=n)
    # The newest WINDOW repost rows all show stored posts: the one past them is not looked for.
    assert ("get", D, POST) not in sources.calls
    assert len(first["records"]) == n
    assert rows(app, "SELECT count(*) FROM feed_records_post") == [(n,)]
    # The next page's read looks below its cursor, finds D's post missing, and fetches it.
    second = feed(app, limit=n, cursor=first["cursor"])
    assert ("get", D, POST) in sources.calls
    assert shown(second) == [(puri(D, "q1"), C, BASE_US + 5)]


def test_the_timeline_page_looks_for_missing_reposted_posts_below_its_cursor_too(admitted):
    import html
    import re

    from feather.feeds.read import reposts as read_reposts
    from tests.test_sync_views import sign_in
    app, sources = admitted
    q1 = {"$type": POST, "text": "from afar", "createdAt": iso(BASE_US + 5)}
    sources.repos[(D, POST)] = [("q1", cid_of(q1), q1)]
    ingest(app, [follow(A, "f2", C), repost(C, "old", puri(D, "q1"), BASE_US + 5)])
    n = read_reposts.WINDOW
    ingest(app, [post(C, f"p{i}", BASE_US + 100 + i) for i in range(n)]
           + [repost(C, f"r{i}", puri(C, f"p{i}"), BASE_US + 1_000 + i) for i in range(n)])
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    first = client.get(f"/timeline?limit={n}").text
    assert ("get", D, POST) not in sources.calls
    older = html.unescape(re.search(r'<li class="more"><a href="([^"]+)"', first).group(1))
    second = client.get(older).text
    assert ("get", D, POST) in sources.calls
    assert "from afar" in second


# --- the skeleton and the page ------------------------------------------------------------------

def test_the_page_says_who_reposted_it_by_name_and_shows_the_posts_own_time(app):
    from tests.fixtures.feeds.feedkit import PROFILE
    from tests.test_sync_views import sign_in

    ingest(app, [follow(A, "f2", C), create(C, PROFILE, "self", {"displayName": "Cee <3"}, time_us=BASE_US),
                 post(D, "q1", BASE_US + 10, text="reposted text")])
    ingest(app, [repost(C, "r1", puri(D, "q1"), BASE_US + 20)])
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    page = " ".join(client.get("/timeline").get_data(as_text=True).split())
    assert (f'<p class="context muted reposted">Reposted by <a href="https://bsky.app/profile/{C}"'
            f' rel="nofollow noopener ugc">Cee &lt;3</a></p>') in page
    assert '<div class="text">reposted text</div>' in page
    posts_only = client.get("/timeline?feed=posts").get_data(as_text=True)
    assert "reposted text" not in posts_only and "Reposted by" not in posts_only
    # The feed picker names the feeds by their titles.
    assert '>Following</a>' in page and '>Following, posts only</a>' in page


# --- batch path = per-event path, with reposts --------------------------------------------------

TABLES = {
    "feed_items": "SELECT actor, uri, collection, time_us, subject FROM feed_items ORDER BY actor, uri",
    "posts": "SELECT uri, did, rkey, cid, record, time_us FROM feed_records_post ORDER BY uri",
    "reposts": "SELECT uri, did, rkey, cid, record, time_us FROM feed_records_repost ORDER BY uri",
    "follows": "SELECT uri, did, rkey, cid, record, time_us FROM feed_records_follow ORDER BY uri",
    "tombstones": "SELECT uri, time_us FROM feed_tombstones ORDER BY uri",
}
FEW = [f"did:plc:{c * 4}" for c in "abcdef"]


def random_batches(seed, batches=6, size=40):
    rng = random.Random(seed)
    t, out = BASE_US, []
    for _ in range(batches):
        batch = []
        for _ in range(size):
            t += rng.randint(0, 3)
            did, other = rng.choice(FEW), rng.choice(FEW)
            rkey = f"k{rng.randrange(5)}"
            roll = rng.random()
            if roll < 0.25:
                batch.append(create(did, POST, rkey, {"text": "t", "createdAt": iso(t - rng.randrange(0, 30))},
                                    time_us=t, op=rng.choice(("create", "update"))))
            elif roll < 0.5:
                # Sometimes edited to repost another post: its rows must follow the new subject.
                batch.append(repost(did, rkey, puri(other, f"k{rng.randrange(5)}"), t,
                                    cid=f"bafy{rng.randrange(3)}"))
            elif roll < 0.7:
                batch.append(create(did, FOLLOW, rkey, {"subject": other, "createdAt": iso(t)}, time_us=t))
            elif roll < 0.95:
                batch.append(delete(did, rng.choice((POST, REPOST, FOLLOW)), rkey, time_us=t))
            elif batch:
                batch.append(rng.choice(batch))
        out.append(batch)
    return out


def apply_log(app, batches, ordered_only):
    config = app.extensions["feeds"]
    with app.app_context(), db.connection_context():
        for table in ("feed_items", "feed_records_post", "feed_records_repost", "feed_records_follow",
                      "feed_tombstones"):
            db.execute_sql(f"DELETE FROM {table}")
        for events in batches:
            with db.atomic():
                (oracle.apply_commits if ordered_only else apply.apply_commits)(config, events)
    return {name: rows(app, statement) for name, statement in TABLES.items()}


@pytest.mark.parametrize("seed", range(6))
def test_random_batches_with_reposts_give_exactly_the_per_event_result(make_app, tmp_path, seed):
    app = feeds_app(make_app, tmp_path, REPOST_TOML, sources=FakeSources())
    batches = random_batches(seed)
    reference = apply_log(app, batches, ordered_only=True)
    assert any(row[4] for row in reference["feed_items"])  # reposts were fanned out
    assert apply_log(app, batches, ordered_only=False) == reference


# --- the feed generator -------------------------------------------------------------------------

def test_the_skeleton_carries_the_repost_reason_in_getfeeds_order(make_app, tmp_path):
    from tests.test_feed_generator import PUBLIC, SERVICE, SKELETON, remember_published
    from tests.test_feeds_auth import P256, mint

    app = feeds_app(make_app, tmp_path, sources=FakeSources(keys={A: P256.public_key()}),
                    FEATHERREADER_PUBLIC_URL=PUBLIC)
    with app.app_context(), db.connection_context(), db.atomic():
        for name in ("timeline", "posts"):
            db.execute_sql(_q("INSERT INTO feed_backfills (actor, feed, completed) VALUES (?, ?, 1)"), (A, name))
    remember_published(app, uri=f"at://{A}/app.bsky.feed.generator/following", feed="timeline")
    ingest(app, [follow(A, "f1", B), follow(A, "f2", C), post(B, "p1", BASE_US + 10), post(D, "q1", BASE_US + 11)])
    ingest(app, [repost(C, "r1", puri(D, "q1"), BASE_US + 20)])
    token = mint(P256, iss=A, aud=SERVICE, lxm=SKELETON)
    body = app.test_client().get(f"/xrpc/{SKELETON}", headers={"Authorization": f"Bearer {token}"},
                                 query_string={"feed": f"at://{A}/app.bsky.feed.generator/following"}).json
    assert body == {"feed": [{"post": puri(D, "q1"), "reason": {"$type": REASON, "repost": ruri(C, "r1")}},
                             {"post": puri(B, "p1")}]}
    assert [r["uri"] for r in feed(app)["records"]] == [i["post"] for i in body["feed"]]
    join_backfills(app)


def test_the_skeleton_looks_for_missing_reposted_posts_below_its_cursor(make_app, tmp_path):
    from feather.feeds.read import reposts as read_reposts
    from tests.test_feed_generator import PUBLIC, SERVICE, SKELETON, remember_published
    from tests.test_feeds_auth import P256, mint

    q1 = {"$type": POST, "text": "from afar", "createdAt": iso(BASE_US + 5)}
    sources = FakeSources(keys={A: P256.public_key()})
    sources.repos[(D, POST)] = [("q1", cid_of(q1), q1)]
    app = feeds_app(make_app, tmp_path, sources=sources, FEATHERREADER_PUBLIC_URL=PUBLIC)
    with app.app_context(), db.connection_context(), db.atomic():
        for name in ("timeline", "posts"):
            db.execute_sql(_q("INSERT INTO feed_backfills (actor, feed, completed) VALUES (?, ?, 1)"), (A, name))
    generator = f"at://{A}/app.bsky.feed.generator/following"
    remember_published(app, uri=generator, feed="timeline")
    n = read_reposts.WINDOW
    ingest(app, [follow(A, "f2", C), repost(C, "old", puri(D, "q1"), BASE_US + 5)])
    ingest(app, [post(C, f"p{i}", BASE_US + 100 + i) for i in range(n)]
           + [repost(C, f"r{i}", puri(C, f"p{i}"), BASE_US + 1_000 + i) for i in range(n)])

    def skeleton(**params):
        token = mint(P256, iss=A, aud=SERVICE, lxm=SKELETON)
        return app.test_client().get(f"/xrpc/{SKELETON}", headers={"Authorization": f"Bearer {token}"},
                                     query_string={"feed": generator, "limit": n, **params}).json

    first = skeleton()
    assert len(first["feed"]) == n and ("get", D, POST) not in sources.calls
    second = skeleton(cursor=first["cursor"])
    assert ("get", D, POST) in sources.calls
    assert second["feed"] == [{"post": puri(D, "q1"), "reason": {"$type": REASON, "repost": ruri(C, "old")}}]
    join_backfills(app)


# --- reference hydration ------------------------------------------------------------------------

def test_get_feed_hydrates_the_reply_parent_and_the_quoted_post_when_stored(app):
    parent = {"uri": puri(D, "q1"), "cid": "bafyq"}
    ingest(app, [follow(A, "f1", B), post(D, "q1", BASE_US + 1, text="the parent")])
    ingest(app, [post(B, "p1", BASE_US + 2, text="answer", reply={"root": parent, "parent": parent}),
                 post(B, "p2", BASE_US + 3, text="quote", embed={"$type": "app.bsky.embed.record",
                                                                 "record": {"uri": puri(D, "q1"), "cid": "bafyq"}}),
                 post(B, "p3", BASE_US + 4, text="quote of the unknown",
                      embed={"$type": "app.bsky.embed.record", "record": {"uri": puri(D, "zz"), "cid": "bafyz"}})])
    plain = feed(app)["records"]
    assert all("parent" not in r and "quote" not in r for r in plain)
    body = feed(app, hydrateParent="true", hydrateQuote="1")["records"]
    got = {r["rkey"]: {k: (r[k]["uri"], r[k]["did"], r[k]["rkey"], r[k]["value"]["text"])
                       for k in ("parent", "quote") if k in r} for r in body}
    expected_ref = (puri(D, "q1"), D, "q1", "the parent")
    assert got == {"p3": {}, "p2": {"quote": expected_ref}, "p1": {"parent": expected_ref}}
    assert set(body[1]["quote"]) == {"uri", "cid", "did", "collection", "rkey", "time_us", "value"}


def test_both_built_in_feeds_are_offered_for_publishing_under_their_titles(make_app, tmp_path, monkeypatch):
    from tests.test_sync_views import sign_in

    app = feeds_app(make_app, tmp_path, FEATHERREADER_PUBLIC_URL="https://feather.example.com",
                    FEATHERREADER_ADMIN_DIDS=[A])
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    page = client.get("/feeds/publish").get_data(as_text=True)
    assert '<h2>Following <span class="muted">(timeline)</span></h2>' in page
    assert '<h2>Following, posts only <span class="muted">(posts)</span></h2>' in page
    assert 'name="display_name" maxlength="64" required\n        value="Following, posts only"' in page


def test_identity_events_of_followees_and_strangers_pass_admission_beside_reposts(admitted):
    """An account's identity event has no collection: the repost checks must not read one."""
    from feather.jetstream.events import IdentityEvent

    app, sources = admitted
    ingest(app, [follow(A, "f2", C)])
    ingest(app, [IdentityEvent(C, BASE_US + 1, "cee.test"), IdentityEvent(D, BASE_US + 2, "dee.test"),
                 repost(C, "r1", puri(D, "q1"), BASE_US + 20)])
    assert rows(app, "SELECT uri FROM feed_records_repost") == [(ruri(C, "r1"),)]


def test_new_posts_count_from_a_page_whose_newest_entry_is_a_repost(app):
    from feather.feeds.read import timeline

    ingest(app, [follow(A, "f1", B), follow(A, "f2", C), post(B, "p1", BASE_US + 10), post(D, "q1", BASE_US + 11)])
    ingest(app, [repost(C, "r1", puri(D, "q1"), BASE_US + 20)])
    config = app.extensions["feeds"]
    feed_ = config.feeds["timeline"]
    with app.app_context(), db.connection_context():
        entries, _older, top = timeline.read(app, config, feed_, A, None, 30)
        assert [(e.uri, e.reposted_by, e.shown_iso) for e in entries] == [
            (puri(D, "q1"), C, iso(BASE_US + 20)[:19] + "Z"), (puri(B, "p1"), None, iso(BASE_US + 10)[:19] + "Z")]
        assert timeline.newer_count(config, feed_, A, top) == 0
    ingest(app, [post(B, "p2", BASE_US + 30), repost(C, "r2", puri(B, "p1"), BASE_US + 40)])
    with app.app_context(), db.connection_context():
        assert timeline.newer_count(config, feed_, A, top) == 2
