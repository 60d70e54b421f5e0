"""Batch-level ingest SQL (feather/feeds/ingest/plan.py, batch.py) gives the per-event result.

The reference is the same batch with every step applied on its own statements in stream order
(tests/fixtures/feeds/oracle.py: what ingest did before it was batched). Random batches over
a handful of accounts make every interaction happen often: a follow and a post by its subject
in one batch, follow then unfollow, duplicate follows, edits that move a post's time, deletes
and re-creates, replays of stored CIDs, deletes of unknown URIs and writes older than a
tombstone. Every table the feeds store writes is compared row for row.
"""
from __future__ import annotations

import random

import pytest

from feather.db import current_dialect, db
from feather.feeds.ingest import apply, plan
from feather.jetstream.events import IdentityEvent
from tests.fixtures.feeds import oracle
from tests.fixtures.feeds.feedkit import (
    BASE_US, FOLLOW, POST, PROFILE, FakeSources, create, delete, feeds_app, follow, iso, post, rows, toml,
)

FEW = [f"did:plc:{c * 4}" for c in "abcdef"]  # nearly every step meets another: the ordered path
MANY = [f"did:plc:many{i:03d}" for i in range(60)]  # mostly independent steps: the set-based path
TABLES = {
    "feed_items": "SELECT actor, uri, collection, time_us FROM feed_items ORDER BY actor, uri",
    "posts": "SELECT uri, did, rkey, cid, record, time_us FROM feed_records_post ORDER BY uri",
    "follows": "SELECT uri, did, rkey, cid, record, time_us FROM feed_records_follow ORDER BY uri",
    "profiles": "SELECT uri, did, rkey, cid, record, time_us FROM feed_records_profile ORDER BY uri",
    "tombstones": "SELECT uri, time_us FROM feed_tombstones ORDER BY uri",
    "heavy": "SELECT feed, did FROM feed_heavy_authors ORDER BY feed, did",
    # Stored order (hybrid reads compare it), as ranks: absolute stamps differ between runs.
    "arrival": "SELECT uri FROM feed_records_post UNION ALL SELECT uri FROM feed_records_follow"
               " ORDER BY 1",
}
ARRIVAL_ORDER = ("SELECT uri FROM (SELECT uri, arrival FROM feed_records_post UNION ALL"
                 " SELECT uri, arrival FROM feed_records_follow) x ORDER BY arrival")
SECOND_FEED = """
[feeds.recent]
follow = "follow"
targets = [{ collection = "post", maxItems = 2 }]
followBackfill = 2
fanoutMaxFollowers = 2
"""


@pytest.fixture
def app(make_app, tmp_path):
    return feeds_app(make_app, tmp_path, toml(max_items=5, follow_backfill=3, extra=SECOND_FEED),
                     sources=FakeSources())


def random_batches(seed: int, dids: list[str], batches: int = 6, size: int = 40) -> list[list]:
    rng = random.Random(seed)
    t = BASE_US
    out = []
    for _ in range(batches):
        batch = []
        for _ in range(size):
            t += rng.randint(0, 3)  # equal times happen: the uri tie-break matters
            did, other = rng.choice(dids), rng.choice(dids)
            rkey = f"k{rng.randrange(6)}"  # few rkeys: the same URI comes back often
            roll = rng.random()
            if roll < 0.35:
                created = t - rng.randrange(0, 40) if rng.random() < 0.3 else t
                batch.append(create(did, POST, rkey, {"text": f"v{rng.randrange(3)}", "createdAt": iso(created)},
                                    time_us=t, op=rng.choice(("create", "update"))))
            elif roll < 0.6:
                batch.append(create(did, FOLLOW, rkey, {"subject": other, "createdAt": iso(t)}, time_us=t,
                                    op="create" if rng.random() < 0.85 else "update"))
            elif roll < 0.85:
                batch.append(delete(did, rng.choice((POST, FOLLOW)), rkey, time_us=t))
            elif roll < 0.92 and batch:
                batch.append(rng.choice(batch))  # a replay inside the batch (same CID, same time)
            else:
                batch.append(create(did, PROFILE, "self", {"displayName": f"n{rng.randrange(3)}"}, time_us=t))
        out.append(batch)
    return out


def apply_commits(config, events, ordered_only: bool):
    """The per-event reference (ordered_only) or production's batch path."""
    return oracle.apply_commits(config, events) if ordered_only else apply.apply_commits(config, events)


def apply_log(app, batches, ordered_only: bool, paths=None) -> dict:
    """Apply the log from empty tables; paths (a dict) counts the steps each path took."""
    config = app.extensions["feeds"]
    with app.app_context(), db.connection_context():
        for table in ("feed_items", "feed_records_post", "feed_records_follow", "feed_records_profile",
                      "feed_tombstones", "feed_heavy_authors"):
            db.execute_sql(f"DELETE FROM {table}")
        for events in batches:
            with db.atomic():
                p = apply_commits(config, events, ordered_only)
            if paths is not None:
                paths["ordered"] = paths.get("ordered", 0) + len(p.ordered)
                paths["grouped"] = paths.get("grouped", 0) + len(p.grouped)
    state = {name: rows(app, sql) for name, sql in TABLES.items()}
    state["arrival"] = rows(app, ARRIVAL_ORDER)
    return state


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("dids", [FEW, MANY], ids=["few-accounts", "many-accounts"])
def test_random_batches_give_exactly_the_per_event_result(app, seed, dids):
    batches = random_batches(seed, dids, size=40 if dids is FEW else 150)
    reference = apply_log(app, batches, ordered_only=True)
    assert reference["feed_items"] and reference["tombstones"]  # the log exercises fan-out and deletes
    paths: dict = {}
    assert apply_log(app, batches, ordered_only=False, paths=paths) == reference
    assert paths["grouped"] > 0 and paths["ordered"] > 0  # both paths ran


def _statements(app, events, run=apply.apply_commits) -> list[list[str]]:
    """What one apply_commits sends the database, one list per round trip (every trip goes
    through db.execute_sql; on PostgreSQL a trip may carry several statements), each statement
    cut to its first words."""
    config = app.extensions["feeds"]
    trips: list[list[str]] = []
    with app.app_context(), db.connection_context():
        real = db.obj.execute_sql

        def counting(sql, params=None, *args, **kwargs):
            text = sql.decode() if isinstance(sql, bytes) else sql
            trips.append([" ".join(s.split()[:4]) for s in text.split(";\n")])
            return real(sql, params, *args, **kwargs)

        db.obj.execute_sql = counting
        try:
            with db.atomic():
                run(config, events)
        finally:
            del db.obj.execute_sql
    return trips


def test_a_whole_batch_sends_its_handle_reset_and_prune_flag_with_its_other_statements(app):
    """The handler's own writes around the steps (a renamed account's handle to check again, the
    prune flag) wait in the batch's round trips too, on PostgreSQL."""
    events = [IdentityEvent("did:plc:renamed", BASE_US, "new.example"), post("did:plc:author", "p1", BASE_US + 1)]
    trips = _statements(app, events, run=apply.apply_batch)
    statements = [s for trip in trips for s in trip]
    assert any(s.startswith("UPDATE feed_identities SET") for s in statements)
    assert any(s.startswith("UPDATE feed_prune_state SET") for s in statements)
    alone = [trip[0] for trip in trips if len(trip) == 1]
    with app.app_context():
        sqlite = current_dialect().is_sqlite
    if sqlite:
        assert len(alone) == len(trips)  # each statement its own call
    else:
        assert not any(s.startswith(("UPDATE feed_identities", "UPDATE feed_prune_state")) for s in alone)
        # The last write goes when the block ends, before the planner settings are put back.
        assert trips[-2][-1].startswith("UPDATE feed_prune_state SET") and trips[-1][0].startswith("SET LOCAL")


def _independent_batch(n: int, offset: int) -> list:
    """n/2 posts by authors nobody in the batch follows, n/2 follows of accounts that do not post in it."""
    events = []
    for i in range(n // 2):
        events.append(post(f"did:plc:author{offset + i:05d}", "p1", BASE_US + offset + i))
        events.append(follow(f"did:plc:reader{offset + i:05d}", "f1", f"did:plc:star{i % 7}",
                             at_us=BASE_US + offset + i))
    return events


def test_a_batch_runs_the_same_statements_whatever_its_size(app):
    small = _statements(app, _independent_batch(20, 0))
    large = _statements(app, _independent_batch(500, 100_000))
    # Per collection (post, follow): the stored records and the tombstones read, one upsert; per
    # follow collection and target: one backfill and one fan-out, whichever feeds share them
    # (timeline and recent both show the follows' posts, in one set of rows), plus the hybrid
    # feed's heavy-author probe; one time resync for the new posts (a feed row may outlive its
    # trimmed record). Nothing per event, nor per feed.
    statements = [s for trip in large for s in trip]
    assert [s for trip in small for s in trip] == statements and len(statements) == 2 * 3 + 2 + 1 + 1
    with app.app_context():
        sqlite = current_dialect().is_sqlite
    if sqlite:
        assert [len(trip) for trip in large] == [1] * 10  # no round trips to save
    else:
        # The reads of what is stored go alone; the writes after them wait (sql.write) and ride
        # with the heavy-author probe, the next read; the fan-out goes when the batch ends.
        assert [len(trip) for trip in small] == [len(trip) for trip in large] == [1, 1, 1, 1, 5, 1]
        assert large[4][-1].startswith("WITH a(author)") and large[5][0].startswith("WITH t(uri,")


def test_a_follow_and_a_post_by_its_subject_in_one_batch_keep_stream_order(app):
    """The ordered path: F follows S, then S posts; and S posts, then F' follows S."""
    s, f, g = "did:plc:ssss", "did:plc:ffff", "did:plc:gggg"
    old = [post(s, f"old{i}", BASE_US + i) for i in range(4)]
    batch = [follow(f, "f1", s, at_us=BASE_US + 10), post(s, "new", BASE_US + 11),
             follow(g, "f1", s, at_us=BASE_US + 12)]
    reference = apply_log(app, [old, batch], ordered_only=True)
    # followBackfill 3: f backfilled old1..old3 and then got "new" by fan-out (four rows); g's
    # backfill came after "new", so it is new, old3, old2 (three rows).
    timeline = [(a, u.rsplit("/", 1)[1]) for a, u, *_ in reference["feed_items"]]
    assert sorted(x for x in timeline if x[0] == f) == [(f, "new"), (f, "old1"), (f, "old2"), (f, "old3")]
    assert sorted(x for x in timeline if x[0] == g) == [(g, "new"), (g, "old2"), (g, "old3")]
    assert apply_log(app, [old, batch], ordered_only=False) == reference


@pytest.mark.parametrize("ordered_only", [True, False], ids=["per-event", "set-based"])
def test_an_edit_of_a_record_no_longer_stored_moves_its_old_feed_row_instead_of_adding_one(
        make_app, tmp_path, ordered_only):
    """Feed rows can outlive their record (the records sweep trims old records first). An edit of
    such a record must meet the old row at its old time: feed_items is unique by (actor,
    collection, time_us, uri), so a fan-out at the new time alone would add a second row."""
    app = feeds_app(make_app, tmp_path, toml())
    a, s = "did:plc:reader", "did:plc:author"
    apply_log(app, [[follow(a, "f1", s), post(s, "p1", BASE_US + 10)]], ordered_only=ordered_only)
    uri = f"at://{s}/{POST}/p1"
    with app.app_context(), db.connection_context():
        db.execute_sql(current_dialect().q("DELETE FROM feed_records_post WHERE uri = ?"), (uri,))  # trimmed
    edit = create(s, POST, "p1", {"text": "edited", "createdAt": iso(BASE_US + 50)}, time_us=BASE_US + 60,
                  op="update")
    with app.app_context(), db.connection_context(), db.atomic():
        apply_commits(app.extensions["feeds"], [edit], ordered_only)
    assert rows(app, "SELECT actor, uri, time_us FROM feed_items") == [(a, uri, BASE_US + 50)]


def test_a_record_deleted_twice_in_one_batch_keeps_the_later_delete_as_its_tombstone(app):
    """Delete, re-create, delete again, all in one batch on the set-based path: the tombstone is
    the second delete, so a replay of the re-create (older than it) is refused afterwards."""
    s, reader = "did:plc:solo", "did:plc:reader"
    uri = f"at://{s}/{POST}/p1"
    first = [follow(reader, "f1", s), post(s, "p1", BASE_US + 1)]
    recreate = create(s, POST, "p1", {"text": "again", "createdAt": iso(BASE_US + 3)}, time_us=BASE_US + 3)
    batch = [delete(s, POST, "p1", time_us=BASE_US + 2), recreate, delete(s, POST, "p1", time_us=BASE_US + 4)]
    paths: dict = {}
    result = apply_log(app, [first, batch, [recreate]], ordered_only=False, paths=paths)
    assert result["tombstones"] == [(uri, BASE_US + 4)]
    assert (result["posts"], [r for r in result["feed_items"] if r[1] == uri]) == ([], [])
    # The first batch's follow and post meet (ordered); the second's three steps went set-based;
    # the replayed re-create is refused (no step at all).
    assert paths == {"ordered": 2, "grouped": 3}
    assert apply_log(app, [first, batch, [recreate]], ordered_only=True) == result


@pytest.mark.parametrize("ordered_only", [True, False], ids=["per-event", "set-based"])
def test_a_replayed_older_delete_never_moves_a_tombstone_back(app, ordered_only):
    """Deleted at +4, re-created at +5, then a replay brings the delete at +2 again (the record is
    stored, so the delete applies): the tombstone stays at +4, the newest delete seen."""
    s, reader = "did:plc:solo", "did:plc:reader"
    uri = f"at://{s}/{POST}/p1"
    first = [follow(reader, "f1", s), post(s, "p1", BASE_US + 1)]
    recreate = create(s, POST, "p1", {"text": "again", "createdAt": iso(BASE_US + 5)}, time_us=BASE_US + 5)
    result = apply_log(app, [first, [delete(s, POST, "p1", time_us=BASE_US + 4)], [recreate],
                             [delete(s, POST, "p1", time_us=BASE_US + 2)]], ordered_only=ordered_only)
    assert result["tombstones"] == [(uri, BASE_US + 4)]


@pytest.mark.parametrize("ordered_only", [True, False], ids=["per-event", "set-based"])
def test_a_write_stamped_at_its_uris_delete_time_is_refused(app, ordered_only):
    """The tombstone refuses every write not newer than the delete: one at the very same instant
    cannot be told to come after it, so the record stays deleted and off the follower's feed."""
    s, reader = "did:plc:solo", "did:plc:reader"
    same = create(s, POST, "p1", {"text": "again", "createdAt": iso(BASE_US + 5)}, time_us=BASE_US + 5)
    result = apply_log(app, [[follow(reader, "f1", s), post(s, "p1", BASE_US + 1)],
                             [delete(s, POST, "p1", time_us=BASE_US + 5)], [same]], ordered_only=ordered_only)
    assert (result["posts"], result["feed_items"], result["tombstones"]) == (
        [], [], [(f"at://{s}/{POST}/p1", BASE_US + 5)])


@pytest.mark.parametrize("ordered_only", [True, False], ids=["per-event", "set-based"])
def test_a_create_over_a_stored_follow_is_an_edit_and_backfills_nothing(app, ordered_only):
    """Only a follow's first create backfills its subject's past posts: a create event at a URI
    already stored (a changed subject) moves the follow and fans out what comes next, no more."""
    reader, first, second = "did:plc:reader", "did:plc:first", "did:plc:second"
    old = [post(second, f"old{i}", BASE_US + i) for i in range(2)]
    moved = create(reader, FOLLOW, "f1", {"subject": second, "createdAt": iso(BASE_US + 20)}, time_us=BASE_US + 20)
    result = apply_log(app, [old + [follow(reader, "f1", first, at_us=BASE_US + 10)], [moved],
                             [post(second, "new", BASE_US + 30)]], ordered_only=ordered_only)
    assert [(a, u.rsplit("/", 1)[1]) for a, u, *_ in result["feed_items"]] == [(reader, "new")]


def test_steps_that_commute_share_a_run_whatever_lies_between_them(app):
    """F follows S, S posts, G follows T, T posts: the two meetings need two runs, not three (the
    greedy cut in stream order made a third when T's post met G's follow), with the per-event rows."""
    s, t, f, g = "did:plc:ssss", "did:plc:tttt", "did:plc:ffff", "did:plc:gggg"
    old = [post(s, "olds", BASE_US), post(t, "oldt", BASE_US + 1)]
    batch = [follow(f, "f1", s, at_us=BASE_US + 10), post(s, "new", BASE_US + 11),
             follow(g, "f1", t, at_us=BASE_US + 12), post(t, "new", BASE_US + 13)]
    config = app.extensions["feeds"]
    with app.app_context(), db.connection_context():
        with db.atomic() as tx:
            runs = plan.segments(plan.plan(config, batch).ordered)
            tx.rollback()
    assert [[step.uri.split("/", 2)[2] for step in run] for run in runs] == [
        [f"{f}/app.bsky.graph.follow/f1", f"{g}/app.bsky.graph.follow/f1"],
        [f"{s}/app.bsky.feed.post/new", f"{t}/app.bsky.feed.post/new"]]
    reference = apply_log(app, [old, batch], ordered_only=True)
    assert sorted((a, u.rsplit("/", 3)[1]) for a, u, *_ in reference["feed_items"]) == [
        (f, s), (f, s), (g, t), (g, t)]  # each follower: the backfilled post, then the new one
    assert apply_log(app, [old, batch], ordered_only=False) == reference


def test_a_drop_after_a_gain_of_the_same_pair_waits_for_the_gains_run(app):
    """G's follow f1 moves from U to T (an edit: it meets U's post before it, so it goes to the
    second run); then G's other follow of T, f0, is deleted. Per event the delete leaves f1, so
    T's rows stay. Run before the edit, the delete would find no follow of T left and take them
    (and the edit backfills nothing)."""
    t, u, g = "did:plc:tttt", "did:plc:uuuu", "did:plc:gggg"
    before = [post(t, "old", BASE_US), follow(g, "f0", t, at_us=BASE_US + 1), follow(g, "f1", u, at_us=BASE_US + 2)]
    batch = [post(u, "new", BASE_US + 10),
             create(g, FOLLOW, "f1", {"subject": t, "createdAt": iso(BASE_US + 11)}, time_us=BASE_US + 11, op="update"),
             delete(g, FOLLOW, "f0", time_us=BASE_US + 12)]
    config = app.extensions["feeds"]
    with app.app_context(), db.connection_context():
        apply_log(app, [before], ordered_only=True)
        with db.atomic() as tx:
            runs = plan.segments(plan.plan(config, batch).ordered)
            tx.rollback()
    assert [[step.uri.rsplit("/", 1)[1] for step in run] for run in runs] == [["new"], ["f1"], ["f0"]]
    reference = apply_log(app, [before, batch], ordered_only=True)
    assert sorted(u_.rsplit("/", 1)[1] for a, u_, *_ in reference["feed_items"] if a == g) == ["old"]
    assert apply_log(app, [before, batch], ordered_only=False) == reference
