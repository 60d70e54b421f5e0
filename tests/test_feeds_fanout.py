"""Fan-out on write (docs/design.md, "Timelines"), through the engine's batch path."""
from __future__ import annotations

import pytest

from tests.fixtures.feeds.feedkit import (
    BASE_US, FOLLOW, POST, FakeSources, create, delete, feed_uris, feeds_app, follow, ingest, iso, post, rows,
    toml, unfollow,
)

A, B, C, D = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc", "did:plc:dddd"


@pytest.fixture
def app(make_app, tmp_path):
    return feeds_app(make_app, tmp_path, toml(), sources=FakeSources())


def uri(did, rkey, nsid=POST):
    return f"at://{did}/{nsid}/{rkey}"


def test_a_post_lands_in_every_followers_feed_and_nowhere_else(app):
    ingest(app, [follow(A, "f1", C), follow(B, "f2", C), follow(D, "f3", A)])
    ingest(app, [post(C, "p1", BASE_US + 1)])
    assert rows(app, "SELECT actor, uri, collection, time_us FROM feed_items ORDER BY actor") == [
        (A, uri(C, "p1"), POST, BASE_US + 1), (B, uri(C, "p1"), POST, BASE_US + 1)]


def test_record_time_is_the_earlier_of_created_at_and_event_time(app):
    backdated = create(C, POST, "old", {"text": "x", "createdAt": iso(BASE_US - 5)}, time_us=BASE_US)
    future = create(C, POST, "new", {"text": "x", "createdAt": iso(BASE_US + 10**9)}, time_us=BASE_US + 7)
    garbage = create(C, POST, "bad", {"text": "x", "createdAt": "yesterday"}, time_us=BASE_US + 9)
    ingest(app, [backdated, future, garbage])
    assert rows(app, "SELECT rkey, time_us FROM feed_records_post ORDER BY rkey") == [
        ("bad", BASE_US + 9), ("new", BASE_US + 7), ("old", BASE_US - 5)]


def test_deleting_a_post_removes_it_from_every_feed(app):
    ingest(app, [follow(A, "f1", C), follow(B, "f2", C), post(C, "p1", BASE_US + 1), post(C, "p2", BASE_US + 2)])
    ingest(app, [delete(C, POST, "p1")])
    assert rows(app, "SELECT actor, uri FROM feed_items ORDER BY actor") == [(A, uri(C, "p2")), (B, uri(C, "p2"))]
    assert rows(app, "SELECT count(*) FROM feed_records_post") == [(1,)]


def test_a_new_follow_backfills_the_subjects_newest_follow_backfill_records(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, toml(max_items=200, follow_backfill=100), sources=FakeSources())
    ingest(app, [post(C, f"p{i:03d}", BASE_US + i) for i in range(150)])
    ingest(app, [follow(A, "f1", C, at_us=BASE_US + 1000)])
    got = feed_uris(app, A)
    assert len(got) == 100
    assert got[0] == uri(C, "p149") and got[-1] == uri(C, "p050")


def test_follow_backfill_is_never_more_than_the_cap(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, toml(max_items=30, follow_backfill=100), sources=FakeSources())
    ingest(app, [post(C, f"p{i:03d}", BASE_US + i) for i in range(50)])
    ingest(app, [follow(A, "f1", C, at_us=BASE_US + 1000)])
    assert len(feed_uris(app, A)) == 30


def test_default_follow_backfill_is_100(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, None, sources=FakeSources())  # the built-in config
    ingest(app, [post(C, f"p{i:03d}", BASE_US + i) for i in range(120)])
    ingest(app, [follow(A, "f1", C, at_us=BASE_US + 1000)])
    assert len(feed_uris(app, A)) == 100


def test_unfollow_removes_that_subjects_items_only(app):
    ingest(app, [post(C, "c1", BASE_US + 1), post(D, "d1", BASE_US + 2)])
    ingest(app, [follow(A, "f1", C), follow(A, "f2", D), follow(B, "f3", C)])
    assert feed_uris(app, A) == [uri(D, "d1"), uri(C, "c1")]
    ingest(app, [unfollow(A, "f1")])
    assert feed_uris(app, A) == [uri(D, "d1")]
    assert feed_uris(app, B) == [uri(C, "c1")]  # someone else's follow of C is untouched


def test_unfollow_leaves_a_lookalike_did_prefix_alone(app):
    """The delete is a prefix range on at://<subject>/<nsid>/; did:plc:cccc must not hit did:plc:cccc2."""
    lookalike = C + "2"
    ingest(app, [post(C, "c1", BASE_US + 1), post(lookalike, "x1", BASE_US + 2)])
    ingest(app, [follow(A, "f1", C), follow(A, "f2", lookalike)])
    ingest(app, [unfollow(A, "f1")])
    assert feed_uris(app, A) == [uri(lookalike, "x1")]


def test_replayed_create_with_the_same_cid_fans_out_nothing(app):
    ingest(app, [follow(A, "f1", C), post(C, "p1", BASE_US + 1)])
    ingest(app, [delete(A, FOLLOW, "f1")])  # A no longer follows C
    assert feed_uris(app, A) == []
    ingest(app, [follow(A, "f9", B)])
    # The same post arrives again (cursor replay): nothing is written, nobody gets a row.
    ingest(app, [post(C, "p1", BASE_US + 1)])
    ingest(app, [follow(B, "f2", C)])
    assert rows(app, "SELECT actor FROM feed_items") == [(B,)]  # only from B's follow backfill
    before = rows(app, "SELECT indexed_at, arrival FROM feed_records_post")
    ingest(app, [post(C, "p1", BASE_US + 1)])
    assert rows(app, "SELECT indexed_at, arrival FROM feed_records_post") == before


def test_replayed_delete_of_an_unknown_uri_is_a_no_op(app):
    ingest(app, [follow(A, "f1", C), post(C, "p1", BASE_US + 1)])
    ingest(app, [delete(C, POST, "never-stored")])
    assert feed_uris(app, A) == [uri(C, "p1")]


def test_an_update_with_a_new_time_moves_the_feed_row_with_it(app):
    ingest(app, [follow(A, "f1", C), post(C, "p1", BASE_US + 50)])
    edited = create(C, POST, "p1", {"text": "edited", "createdAt": iso(BASE_US + 10)}, time_us=BASE_US + 60,
                    op="update")
    ingest(app, [edited])
    assert rows(app, "SELECT time_us FROM feed_items WHERE actor = ?", (A,)) == [(BASE_US + 10,)]


def test_the_batch_marks_the_prune_flag_only_for_feed_mutating_records(app):
    ingest(app, [create(C, "app.bsky.actor.profile", "self", {"displayName": "C"})])
    assert rows(app, "SELECT dirty FROM feed_prune_state") == [(0,)]
    ingest(app, [post(C, "p1", BASE_US + 1)])
    assert rows(app, "SELECT dirty FROM feed_prune_state") == [(1,)]


def test_the_global_subscription_carries_the_configured_collections(app):
    from feather import features
    from feather.jetstream.subscriptions import merge

    (sub,) = [s for s in merge(features.subscriptions(app.config["FEATHER"])) if s.name == "global"]
    mine = {"app.bsky.actor.profile", "app.bsky.feed.post", "app.bsky.graph.follow"}
    assert mine <= set(sub.collections)  # other features may share the stream
    (handler,) = [h for h in sub.handlers if h.feature == "feeds"]
    assert handler.collections == frozenset(mine)
    assert sub.dids is None


def test_dev_injection_reaches_the_feed(app):
    from feather.jetstream.dev import frame_from_fields, inject

    settings = app.config["FEATHER"]
    with app.app_context():
        inject(settings, frame_from_fields(A, FOLLOW, "create", rkey="f1", subject=C))
        inject(settings, frame_from_fields(C, POST, "create", rkey="p1", record={"text": "hi"}))
    assert feed_uris(app, A) == [uri(C, "p1")]


# --- several events for one URI inside one batch: each sees the ones before it -----------------

def test_create_then_delete_in_one_batch_leaves_nothing(app):
    ingest(app, [follow(A, "f1", C)])
    ingest(app, [post(C, "p1", BASE_US + 1), delete(C, POST, "p1")])
    assert rows(app, "SELECT count(*) FROM feed_items") == [(0,)]
    assert rows(app, "SELECT count(*) FROM feed_records_post") == [(0,)]


def test_delete_then_recreate_in_one_batch_fans_out_the_new_record(app):
    ingest(app, [follow(A, "f1", C), post(C, "p1", BASE_US + 1)])
    recreated = create(C, POST, "p1", {"text": "again", "createdAt": iso(BASE_US + 5)}, time_us=BASE_US + 5,
                       cid="bafyagain")
    ingest(app, [delete(C, POST, "p1"), recreated])
    assert rows(app, "SELECT actor, time_us FROM feed_items") == [(A, BASE_US + 5)]
    assert rows(app, "SELECT cid FROM feed_records_post") == [("bafyagain",)]


def test_the_same_create_twice_in_one_batch_is_applied_once(app):
    from feather.db import db
    from feather.feeds import config_for
    from feather.feeds.ingest import apply

    ingest(app, [follow(A, "f1", C)])
    with app.app_context(), db.connection_context(), db.atomic():
        changed = apply.apply_batch(config_for(app.config["FEATHER"]), [post(C, "p1", BASE_US + 1)] * 2)
    assert changed == 1
    assert rows(app, "SELECT actor FROM feed_items") == [(A,)]


def test_a_follow_and_its_unfollow_in_one_batch_leave_the_feed_as_it_was(app):
    ingest(app, [post(C, "c1", BASE_US + 1)])
    ingest(app, [follow(A, "f1", C), unfollow(A, "f1")])
    assert feed_uris(app, A) == []
    assert rows(app, "SELECT count(*) FROM feed_records_follow") == [(0,)]



# --- cursor replay after a crash: a since-deleted record is never resurrected ------------------

def test_replaying_a_window_with_a_deleted_follow_changes_no_feed(app):
    """Found by a kill -9 mid-ingest: replay re-created a deleted follow, its backfill copied a
    post made after the follow was gone, and the replayed delete (of a record whose update had
    dropped the subject) did not take it out again."""
    window = [follow(A, "f1", C, at_us=BASE_US + 1),
              create(A, FOLLOW, "f1", {"note": "subject dropped"}, time_us=BASE_US + 2, op="update"),
              delete(A, FOLLOW, "f1", time_us=BASE_US + 3),
              post(C, "p1", BASE_US + 4)]
    ingest(app, window)
    before = rows(app, "SELECT actor, uri FROM feed_items ORDER BY 1, 2")
    assert before == []
    ingest(app, window)  # the stream replays from the saved cursor minus 5 s
    assert rows(app, "SELECT actor, uri FROM feed_items ORDER BY 1, 2") == before
    assert rows(app, "SELECT count(*) FROM feed_records_follow") == [(0,)]


def test_a_create_after_the_delete_is_a_new_record_not_a_replay(app):
    ingest(app, [follow(A, "f1", C), post(C, "p1", BASE_US + 1)])
    ingest(app, [delete(C, POST, "p1", time_us=BASE_US + 2)])
    again = create(C, POST, "p1", {"text": "back", "createdAt": iso(BASE_US + 3)}, time_us=BASE_US + 3,
                   cid="bafyback")
    ingest(app, [again])
    assert feed_uris(app, A) == [uri(C, "p1")]
    assert rows(app, "SELECT tombstone.time_us FROM feed_tombstones tombstone") == [(BASE_US + 2,)]


def test_tombstones_far_behind_the_ingest_cursor_are_swept(app):
    """Exactly those more than the margin behind the cursor: a replay (5 s) never reaches them."""
    from feather.db import db
    from feather.feeds.tasks.tombstones import TOMBSTONE_MARGIN_US, sweep_tombstones

    cursor = BASE_US + TOMBSTONE_MARGIN_US + 100
    ingest(app, [post(C, "old", BASE_US + 1), post(C, "edge", BASE_US + 2), post(C, "new", BASE_US + 3)])
    ingest(app, [delete(C, POST, "old", time_us=cursor - TOMBSTONE_MARGIN_US - 1),
                 delete(C, POST, "edge", time_us=cursor - TOMBSTONE_MARGIN_US),
                 delete(C, POST, "new", time_us=cursor - 1)])
    ingest(app, [post(D, "later", cursor)])  # the cursor moves on
    with app.app_context(), db.connection_context():
        assert sweep_tombstones() == 1
    assert rows(app, "SELECT uri FROM feed_tombstones ORDER BY uri") == [(uri(C, "edge"),), (uri(C, "new"),)]
