"""Narrow subscriptions (FEED_NARROW_MAX_DIDS, feather/feeds/ingest/narrow.py): while few DIDs
matter, the feeds' collections come on DID-filtered shards that change in place as follows come
and go; above the limit the `feeds` stream takes every DID; the two take turns without a gap."""
from __future__ import annotations

import time

import pytest

from feather.db import db
from feather.feeds.ingest import narrow
from feather.jetstream import store as jstore
from feather.jetstream.engine import Engine
from feather.jetstream.subscriptions import MAX_DIDS
from feather.jetstream.tuning import Tuning
from tests.fixtures.feeds.feedkit import REPOST_TOML, FakeSources, feed_uris, feeds_app, ingest, rows, toml
from tests.support.fake_jetstream import FakeJetstream, make_commit
from tests.support.waiting import wait_until

A, B, C, D, X = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc", "did:plc:dddd", "did:plc:xxxx"
FOLLOW, POST = "app.bsky.graph.follow", "app.bsky.feed.post"
FAST = Tuning(backoff=lambda attempt: 0.05)


OPERATOR = "did:plc:operator0000000000000000"


def operator_client(app):
    """Signed in as the operator, who is then served too (every account that signs in is)."""
    from tests.test_sync_views import sign_in
    client = app.test_client()
    sign_in(app, client, did=OPERATOR, handle="operator.test")
    return client


def admin_html(client, app, engine) -> str:
    with app.app_context(), db.connection_context():
        engine.board.publish()
    return client.get("/admin").get_data(as_text=True)


def served_app(make_app, tmp_path, limit: int, **settings):
    return feeds_app(make_app, tmp_path, 'actors = ["' + A + '"]\n' + toml(), sources=FakeSources(),
                     FEED_SERVE="signed-in", FEED_NARROW_MAX_DIDS=str(limit), **settings)


# --- the decision, pure --------------------------------------------------------------------------

def test_shards_are_the_limit_over_ten_thousand_plus_one_and_a_did_always_hashes_to_the_same_one():
    assert [narrow.shard_count(n) for n in (1, 9_999, 10_000, 30_000)] == [1, 1, 2, 4]
    assert narrow.shard_names(30_000) == ["feeds:0", "feeds:1", "feeds:2", "feeds:3"]
    assert narrow.family_names(0) == ["global"] and narrow.family_names(3) == ["feeds", "feeds:0"]
    dids = [f"did:plc:{i:024d}" for i in range(2_000)]
    shards = narrow.split(dids, 4)
    assert sorted(d for m in shards for d in m) == sorted(dids)
    assert all(narrow.shard_of(d, 4) == k for k, m in enumerate(shards) for d in m)
    assert min(len(m) for m in shards) > 400  # crc32 spreads them


def test_narrow_at_the_limit_and_full_one_past_it_with_no_members_then():
    dids = {f"did:plc:{i:024d}" for i in range(30)}
    mode, shards = narrow.decide(dids, 30)
    assert mode == "narrow" and sum(len(m) for m in shards) == 30 and len(shards) == 1
    mode, shards = narrow.decide(dids | {"did:plc:one-more"}, 30)
    assert (mode, shards) == ("full", [[]])
    assert narrow.decide(dids, 0) == ("full", [[]])  # 0: never narrow
    assert narrow.decide(set(), 30) == ("narrow", [[]])  # nobody served: nothing to receive


def test_a_shard_over_jetstreams_limit_keeps_the_whole_stream(monkeypatch):
    monkeypatch.setattr(narrow, "MAX_DIDS", 3)  # so that one shard overflows while the total fits
    dids = {f"did:plc:{i:024d}" for i in range(12)}
    assert narrow.shard_count(12) == 5 and max(len(m) for m in narrow.split(dids, 5)) > 3
    assert narrow.decide(dids, 12)[0] == "full"
    assert MAX_DIDS == 10_000


# --- whose DIDs, and the hand-over, on the database ----------------------------------------------

def follow(did, rkey, subject, at_us):
    from tests.fixtures.feeds.feedkit import follow as make
    return make(did, rkey, subject, at_us=at_us)


def test_the_wanted_dids_are_the_served_whom_they_follow_and_the_authors_of_what_they_repost(make_app, tmp_path):
    from feather.feeds.store import served
    from tests.fixtures.feeds.feedkit import create, iso, post
    app = feeds_app(make_app, tmp_path, sources=FakeSources(), FEED_SERVE="signed-in")  # built-in: reposts too
    with app.app_context(), db.connection_context(), db.atomic():
        served.serve(A, "reader")
    base = 1_760_000_000_000_000
    reposted = f"at://{X}/{POST}/3kpost"
    ingest(app, [follow(A, "f1", B, base), follow(C, "f2", D, base + 1), post(B, "p1", base + 2),
                 create(B, "app.bsky.feed.repost", "r1", {"subject": {"uri": reposted, "cid": "bafyx"},
                                                          "createdAt": iso(base + 3)}, time_us=base + 3)])
    with app.app_context(), db.connection_context():
        assert narrow.wanted_dids(app.extensions["feeds"]) == {A, B, X}  # C is not served: D is nobody's
        assert narrow.current_mode(app.extensions["feeds"], 3) == ("narrow", 3)
        assert narrow.current_mode(app.extensions["feeds"], 2) == ("full", 3)


def saved(app) -> dict:
    with app.app_context(), db.connection_context():
        return {r.name: r.time_us for r in jstore.cursor_rows() if r.time_us > 0}


def put(app, **cursors):
    with app.app_context(), db.connection_context(), db.atomic():
        for name, t in cursors.items():
            jstore.save_cursor(name.replace("_", ":"), jstore.Cursor(t))


def place(app, mode, shards, limit, now=9_999):
    with app.app_context(), db.connection_context(), db.atomic():
        return narrow.place(mode, shards, limit, now)


def test_switched_off_streams_are_placed_where_the_switched_on_side_is_complete(make_app, tmp_path):
    app = served_app(make_app, tmp_path, 10_000)  # two shards
    put(app, feeds=5_000, feeds_0=4_000, feeds_1=4_500)
    # Narrow with both shards in use: `feeds` resumes at the older shard's position.
    assert place(app, "narrow", [[A], [B]], 10_000) == {"feeds": 4_000}
    # Narrow with shard 1 empty: it follows the one in use, so its first member starts near now.
    put(app, feeds_0=6_000)
    assert place(app, "narrow", [[A], []], 10_000) == {"feeds": 6_000, "feeds:1": 6_000}
    # Back to full: the shards resume where `feeds` is.
    put(app, feeds=7_000)
    assert place(app, "full", [[], []], 10_000) == {"feeds:0": 7_000, "feeds:1": 7_000}
    # Nobody served: nothing is on, everything waits at now.
    assert place(app, "narrow", [[], []], 10_000, now=8_000) == {"feeds": 8_000, "feeds:0": 8_000,
                                                                  "feeds:1": 8_000}
    assert saved(app) == {"feeds": 8_000, "feeds:0": 8_000, "feeds:1": 8_000}


def test_the_first_start_after_an_upgrade_resumes_where_global_had_got_to(make_app, tmp_path):
    app = served_app(make_app, tmp_path, 3)
    put(app, **{"global": 5_000})
    assert place(app, "narrow", [[A]], 3) == {"feeds:0": 5_000, "feeds": 5_000}
    assert saved(app) == {"global": 5_000, "feeds": 5_000, "feeds:0": 5_000}


def test_a_reader_of_the_subscription_list_places_nothing(make_app, tmp_path):
    from feather import features
    app = served_app(make_app, tmp_path, 3)
    put(app, **{"global": 5_000})
    with app.app_context(), db.connection_context():
        subs = {s.name: s for s in features.subscriptions(app.config["FEATHER"])}
        assert subs["feeds"].active() is False and subs["feeds:0"].dids() == [A]
    assert saved(app) == {"global": 5_000}  # only the engine that claims the family places cursors


# --- through the engine and the fake Jetstream ---------------------------------------------------

@pytest.fixture
def jetstream():
    with FakeJetstream() as js:
        yield js


def post_frame(did, rkey, text="hi"):
    return make_commit(did, POST, rkey, "create", {"$type": POST, "text": text,
                                                     "createdAt": "2026-01-01T00:00:00.000Z"})


def follow_frame(did, rkey, subject, op="create"):
    record = {"$type": FOLLOW, "subject": subject, "createdAt": "2026-01-01T00:00:00.000Z"}
    return make_commit(did, FOLLOW, rkey, op, record if op != "delete" else None)


def feeds_connections(js) -> list[dict]:
    return [c for c in js.stats()["opened"] if POST in (c.get("wantedCollections") or [])]


def test_a_small_instance_subscribes_by_did_changes_in_place_and_takes_turns_with_the_whole_stream(
        make_app, tmp_path, jetstream):
    from feather import feeds
    app = served_app(make_app, tmp_path, 3, FEATHERREADER_JETSTREAM_HOSTS=jetstream.url,
                     FEATHERREADER_ADMIN_DIDS=OPERATOR)
    client = operator_client(app)
    engine = Engine(app, feeds.subscriptions(app.config["FEATHER"]), tuning=FAST)
    engine.start()
    try:
        # 1. Two served actors (A and the operator): shard feeds:0 asks for them; `feeds` never connects.
        wait_until(lambda: len(feeds_connections(jetstream)) == 1, message="the shard's connection")
        (first,) = feeds_connections(jetstream)
        assert first["wantedDids"] == 2
        jetstream.append([post_frame(X, "x1"), follow_frame(A, "f1", B)])
        # The follow reaches the store; B joins the filter in place, on the same socket.
        wait_until(lambda: jetstream.stats()["options_updates_total"] == 1, message="options_update with B")
        wait_until(lambda: [len(f["wantedDids"]) for f in jetstream.stats()["last_filter"].values()] == [3],
                   message="the filter to hold A, the operator and B")
        jetstream.append([post_frame(B, "b1"), post_frame(X, "x2")])
        wait_until(lambda: feed_uris(app, A) == [f"at://{B}/{POST}/b1"], message="B's post in A's feed")
        shard = engine.streams["feeds:0"]
        assert shard.stats["received"] == 2  # A's follow and B's post: X's posts never came
        assert shard.stats["bytes"] > 0 and shard.stats["frames"] == 2
        html = admin_html(client, app, engine)
        assert '<th scope="row">feeds:0</th>\n        <td data-label="Asks for">3 DIDs</td>' in html
        assert "narrow: 3 DIDs matter (at most 3)" in html

        # 2. Past the limit (A, the operator, B, C, D > 3): the shard closes, `feeds` takes every DID from where
        # the shard had got to.
        jetstream.append([follow_frame(A, "f2", C), follow_frame(A, "f3", D)])
        wait_until(lambda: len(feeds_connections(jetstream)) == 2, message="the whole stream's connection")
        whole = feeds_connections(jetstream)[-1]
        assert whole["wantedDids"] == 0
        with app.app_context(), db.connection_context():
            assert int(whole["cursor"]) <= jstore.load_cursor("feeds:0").time_us
        wait_until(lambda: not shard.connected.is_set(), message="the shard to close")
        jetstream.append([post_frame(C, "c1"), post_frame(X, "x3")])
        wait_until(lambda: f"at://{C}/{POST}/c1" in feed_uris(app, A), message="C's post via the whole stream")
        html = admin_html(client, app, engine)
        assert '<th scope="row">feeds</th>\n        <td data-label="Asks for">every DID</td>' in html
        assert "the whole network on <code>feeds</code>: 5 DIDs matter, more than FEED_NARROW_MAX_DIDS (3)" in html
        assert engine.streams["feeds"].stats["received"] >= 2  # X's post came, and admission dropped it
        assert rows(app, "SELECT count(*) FROM feed_records_post WHERE did = ?", (X,)) == [(0,)]

        # 3. Unfollows bring it back under the limit: the shard resumes from the whole stream's cursor.
        jetstream.append([follow_frame(A, "f2", C, "delete"), follow_frame(A, "f3", D, "delete")])
        wait_until(lambda: len(feeds_connections(jetstream)) == 3, message="the shard's second connection")
        again = feeds_connections(jetstream)[-1]
        assert again["wantedDids"] == 3
        with app.app_context(), db.connection_context():
            assert int(again["cursor"]) <= jstore.load_cursor("feeds").time_us
        whole_stream = engine.streams["feeds"]
        def _why():
            n = engine.streams["feeds:0"].sub.extra["narrowing"]
            a = n.admission
            return (f"the whole stream to close: mode {n.mode} count {n.count} version {n.version}"
                    f" followees {sorted(a.followees)} pending {a.pending} recent {sorted(a.recent)} rebuilds {a.rebuilds}"
                    f" closed_for {whole_stream.closed_for!r} ws {whole_stream.ws is not None}"
                    f" follows {rows(app, 'SELECT uri FROM feed_records_follow ORDER BY uri')}"
                    f" tomb {rows(app, 'SELECT uri, time_us FROM feed_tombstones ORDER BY uri')}"
                    f" conns {[(c.get('cursor'), c.get('wantedDids')) for c in feeds_connections(jetstream)]}")
        wait_until(lambda: not whole_stream.connected.is_set(), message=_why)
        assert [len(f["wantedDids"]) for f in jetstream.stats()["last_filter"].values()] == [3]
        jetstream.append([post_frame(B, "b2"), post_frame(C, "c2")])
        wait_until(lambda: f"at://{B}/{POST}/b2" in feed_uris(app, A), message="B's second post")
        assert sorted(feed_uris(app, A)) == [f"at://{B}/{POST}/b1", f"at://{B}/{POST}/b2"]
    finally:
        engine.stop(timeout=5)


def test_a_followees_repost_of_a_stranger_adds_the_stranger_without_a_version_bump(make_app, tmp_path):
    from feather.feeds.ingest.admission import Admission
    app = served_app(make_app, tmp_path, 3)
    clock = [0.0]
    narrowing = narrow.Narrowing(app.extensions["feeds"], 3, clock=lambda: clock[0])
    # What the ingest filter holds in memory: a subject admitted in a batch not committed yet.
    narrowing.admission = Admission(app.extensions["feeds"], "signed-in", clock=lambda: clock[0])
    with app.app_context():
        assert narrowing.members(0) == [A]
        narrowing.admission.reposted.add(f"at://{X}/{POST}/3kpost")
        narrowing.admission.changes += 1
        assert narrowing.members(0) == [A]  # not before the next poll
        clock[0] += narrow.POLL_SECS
        assert narrowing.members(0) == [A, X]
        assert (narrowing.rebuilds, narrowing.admission.rebuilds) == (2, 1)


REPOST = "app.bsky.feed.repost"


def test_a_stranger_reposted_into_a_timeline_has_their_shard_replayed_from_the_repost(
        make_app, tmp_path, jetstream):
    """The stranger joins the filter a membership round after the repost; what they wrote in between
    (here the reposted post's delete) comes from the replay options_update could not give."""
    from feather import feeds
    app = feeds_app(make_app, tmp_path, 'actors = ["' + A + '"]\n' + REPOST_TOML, sources=FakeSources(),
                    FEED_SERVE="signed-in", FEED_NARROW_MAX_DIDS="3", FEATHERREADER_JETSTREAM_HOSTS=jetstream.url)
    engine = Engine(app, feeds.subscriptions(app.config["FEATHER"]), tuning=FAST)
    engine.start()
    try:
        wait_until(lambda: len(feeds_connections(jetstream)) == 1, message="the shard's connection")
        jetstream.append([follow_frame(A, "f1", B)])
        wait_until(lambda: jetstream.stats()["options_updates_total"] == 1, message="options_update with B")
        subject = f"at://{X}/{POST}/x1"
        # Explicit times, the last one well past the replay overlap: the shard's saved cursor is
        # then B's later post, and only setting it back replays the delete.
        base = int(time.time() * 1_000_000) + 1_000_000
        reposted_at = base + 1_000_000
        repost = make_commit(B, REPOST, "r1", "create", {"$type": REPOST, "subject": {"uri": subject, "cid": "bafyx1"},
                                                           "createdAt": "2026-01-01T00:00:00.000Z"}, time_us=reposted_at)
        jetstream.append([dict(post_frame(X, "x1"), time_us=base), repost,
                          make_commit(X, POST, "x1", "delete", time_us=base + 2_000_000),
                          dict(post_frame(B, "b1"), time_us=base + 20_000_000)])
        wait_until(lambda: rows(app, "SELECT uri FROM feed_tombstones") == [(subject,)],
                   message="the reposted post's delete, written before X joined the filter")
        shard = engine.streams["feeds:0"]
        assert shard.stats["rewinds"] == 1
        reconnect = feeds_connections(jetstream)[-1]
        assert len(feeds_connections(jetstream)) == 2 and reconnect["wantedDids"] == 3
        assert int(reconnect["cursor"]) == reposted_at - jstore.REPLAY_OVERLAP_US
        assert sorted(rows(app, "SELECT uri, subject FROM feed_items WHERE actor = ?", (A,))) == [
            (f"at://{B}/{POST}/b1", None), (f"at://{B}/{REPOST}/r1", subject)]
    finally:
        engine.stop(timeout=5)
