"""An unfollow removes only what no remaining follow still justifies (fanout.unfollow_triples).

feed_items has no feed column and no note of which follow put a row there: two follow records
of one subject (Bluesky keeps duplicates), or one subject followed on two graphs whose feeds
share a target, share the rows. So an unfollow (a follow deleted, or edited to another subject)
takes a subject's rows of a target out of the follower's feed only when no follow of that
subject by that follower is left in any follow collection of a feed with that target. Each case
runs on the engine's set-based path and on the per-event reference path.
"""
from __future__ import annotations

import random

import pytest

from feather.db import db
from feather.feeds.ingest import apply
from tests.fixtures.feeds.feedkit import (
    BASE_US, FOLLOW, POST, FakeSources, create, delete, feed_uris, feeds_app, follow, ingest, iso, post, rows,
    unfollow,
)
from tests.fixtures.feeds import oracle
from tests.fixtures.feeds.model import FeedModel

A, B, C, D = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc", "did:plc:dddd"
GRAPH, REPOST = "sh.tangled.graph.follow", "app.bsky.feed.repost"
# Two graphs: the Bluesky timeline shows posts and reposts; the other graph's feed shows posts.
TWO_GRAPHS = """
namespace = "com.example"
[collections.follow]
collection = "app.bsky.graph.follow"
[collections.graph]
collection = "sh.tangled.graph.follow"
[collections.post]
collection = "app.bsky.feed.post"
[collections.repost]
collection = "app.bsky.feed.repost"
[feeds.timeline]
follow = "follow"
targets = ["post", "repost"]
followBackfill = 3
[feeds.code]
follow = "graph"
targets = ["post"]
followBackfill = 2
"""


@pytest.fixture
def app(make_app, tmp_path):
    return feeds_app(make_app, tmp_path, TWO_GRAPHS, sources=FakeSources())


@pytest.fixture(params=["set-based", "per-event"])
def write(request, app):
    """Writes one batch through the engine (set-based) or every step on its own, in order."""
    if request.param == "set-based":
        return lambda events: ingest(app, events)

    def per_event(events):
        with app.app_context(), db.connection_context(), db.atomic():
            oracle.apply_commits(app.extensions["feeds"], events)
    return per_event


def uri(did, rkey, nsid=POST):
    return f"at://{did}/{nsid}/{rkey}"


def moved(did, rkey, subject, at_us, nsid=FOLLOW):
    """An edit of a follow record that points it at another subject."""
    return create(did, nsid, rkey, {"subject": subject, "createdAt": iso(at_us)}, time_us=at_us, op="update")


def test_unfollowing_one_of_two_follows_of_a_subject_keeps_its_posts(app, write):
    write([follow(A, "f1", C), follow(A, "f2", C), post(C, "p1", BASE_US + 1)])
    write([unfollow(A, "f1", BASE_US + 2)])
    assert feed_uris(app, A) == [uri(C, "p1")]
    write([unfollow(A, "f2", BASE_US + 3)])
    assert feed_uris(app, A) == []


def test_both_follows_of_a_subject_unfollowed_in_one_batch_empty_the_feed(app, write):
    write([follow(A, "f1", C), follow(A, "f2", C), follow(B, "f1", C), post(C, "p1", BASE_US + 1)])
    write([unfollow(A, "f1", BASE_US + 2), unfollow(A, "f2", BASE_US + 3)])
    assert (feed_uris(app, A), feed_uris(app, B)) == ([], [uri(C, "p1")])


def test_a_follow_made_in_the_batch_that_drops_the_others_keeps_the_posts(app, write):
    write([follow(A, "f1", C), follow(A, "f2", C), post(C, "p1", BASE_US + 1)])
    write([follow(A, "f3", C, at_us=BASE_US + 2), unfollow(A, "f1", BASE_US + 3), unfollow(A, "f2", BASE_US + 4)])
    assert feed_uris(app, A) == [uri(C, "p1")]


def test_a_refollow_after_the_last_unfollow_in_one_batch_starts_from_the_backfill(app, write):
    """The unfollow empties the feed of C at its moment; the new follow then backfills C's newest
    three (followBackfill 3), so the two older posts fanned out before stay gone."""
    write([follow(A, "f1", C)] + [post(C, f"p{i}", BASE_US + i) for i in range(5)])
    assert len(feed_uris(app, A)) == 5
    write([unfollow(A, "f1", BASE_US + 10), follow(A, "f2", C, at_us=BASE_US + 11)])
    assert feed_uris(app, A) == [uri(C, "p4"), uri(C, "p3"), uri(C, "p2")]


def test_an_edit_moving_a_follow_to_another_subject_unfollows_the_old_one(app, write):
    write([follow(A, "f1", C), follow(B, "f1", C), follow(B, "f2", C), post(C, "p1", BASE_US + 1)])
    write([moved(A, "f1", D, BASE_US + 2), moved(B, "f1", D, BASE_US + 2)])
    # A's only follow of C moved away; B still follows C through f2.
    assert (feed_uris(app, A), feed_uris(app, B)) == ([], [uri(C, "p1")])


@pytest.mark.parametrize("unfollow_first, expected", [(True, []), (False, ["p1"])],
                         ids=["unfollow-then-edit", "edit-then-unfollow"])
def test_an_edit_moving_another_follow_onto_the_subject_counts_from_its_moment(app, write, unfollow_first, expected):
    """An edit never backfills: if the last follow of C went first, C's rows went with it and the
    edit brings none back; if the edit came first, a follow of C remained at the unfollow."""
    write([follow(A, "f1", C), follow(A, "f2", D), post(C, "p1", BASE_US + 1)])
    steps = [unfollow(A, "f1", BASE_US + 2), moved(A, "f2", C, BASE_US + 3)]
    write(steps if unfollow_first else steps[::-1])
    assert feed_uris(app, A) == [uri(C, rkey) for rkey in expected]


def test_a_follow_on_another_graph_keeps_the_targets_its_feed_shows(app, write):
    """A follows C on both graphs. Unfollowing on Bluesky keeps C's post (the other graph's feed
    shows posts) and removes C's repost (no feed of the other graph shows reposts)."""
    repost = create(C, REPOST, "r1", {"subject": {"uri": uri(D, "x")}, "createdAt": iso(BASE_US + 2)},
                    time_us=BASE_US + 2)
    write([follow(A, "f1", C), follow(A, "g1", C, nsid=GRAPH), post(C, "p1", BASE_US + 1), repost])
    assert feed_uris(app, A) == [uri(C, "r1", REPOST), uri(C, "p1")]
    write([unfollow(A, "f1", BASE_US + 3)])
    assert feed_uris(app, A) == [uri(C, "p1")]
    write([unfollow(A, "g1", BASE_US + 4, nsid=GRAPH)])
    assert feed_uris(app, A) == []


def test_unfollowing_on_the_other_graph_leaves_the_bluesky_follows_rows(app, write):
    repost = create(C, REPOST, "r1", {"createdAt": iso(BASE_US + 2)}, time_us=BASE_US + 2)
    write([follow(A, "f1", C), follow(A, "g1", C, nsid=GRAPH), post(C, "p1", BASE_US + 1), repost])
    write([unfollow(A, "g1", BASE_US + 3, nsid=GRAPH)])
    assert feed_uris(app, A) == [uri(C, "r1", REPOST), uri(C, "p1")]


# --- random batches against the plain-Python model -------------------------------------------

FEW = [f"did:plc:{c * 4}" for c in "abcde"]


def random_log(seed: int, batches: int = 6, size: int = 40) -> list[list]:
    """Few accounts and rkeys: duplicate follows, follows on both graphs, edits that move a
    follow's subject, unfollows and refollows of one subject in a batch, and its posts beside them."""
    rng = random.Random(seed)
    t = BASE_US
    out = []
    for _ in range(batches):
        batch: list = []
        for _ in range(size):
            t += rng.randint(0, 3)
            did, other, rkey = rng.choice(FEW), rng.choice(FEW), f"k{rng.randrange(4)}"
            roll = rng.random()
            if roll < 0.25:
                nsid = rng.choice((POST, POST, REPOST))
                created = t - rng.randrange(0, 40) if rng.random() < 0.3 else t
                batch.append(create(did, nsid, rkey, {"text": f"v{rng.randrange(3)}", "createdAt": iso(created)},
                                    time_us=t, op=rng.choice(("create", "update"))))
            elif roll < 0.6:
                batch.append(create(did, rng.choice((FOLLOW, GRAPH)), rkey, {"subject": other, "createdAt": iso(t)},
                                    time_us=t, op="create" if rng.random() < 0.7 else "update"))
            elif roll < 0.9:
                batch.append(delete(did, rng.choice((POST, REPOST, FOLLOW, FOLLOW, GRAPH)), rkey, time_us=t))
            elif batch:
                batch.append(rng.choice(batch))  # a replay inside the batch
        out.append(batch)
    return out


def _apply_log(app, log, ordered_only: bool) -> list[tuple]:
    config = app.extensions["feeds"]
    with app.app_context(), db.connection_context():
        for table in ("feed_items", "feed_records_post", "feed_records_repost", "feed_records_follow",
                      "feed_records_graph", "feed_tombstones"):
            db.execute_sql(f"DELETE FROM {table}")
        for events in log:
            with db.atomic():
                (oracle.apply_commits if ordered_only else apply.apply_commits)(config, events)
    return rows(app, "SELECT actor, uri, collection, time_us FROM feed_items ORDER BY actor, uri, collection, time_us")


@pytest.mark.parametrize("seed", range(10))
def test_random_batches_leave_exactly_the_rows_the_rules_justify(app, seed):
    log = random_log(seed)
    model = FeedModel(app.extensions["feeds"])
    for events in log:
        model.apply(events)
    expected = model.feed_items()
    # The log exercises fan-out and backfill, and unfollows that another follow overrode.
    assert len(expected) >= 10 and model.kept >= 3, (len(expected), model.kept)
    assert _apply_log(app, log, ordered_only=True) == expected
    assert _apply_log(app, log, ordered_only=False) == expected
