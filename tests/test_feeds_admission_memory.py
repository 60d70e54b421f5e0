"""The ingest filter's memory (feather/feeds/ingest/admission.py): this process's own follows and
unfollows change it without a version bump or a rebuild; a rebuild (another process's bump, or
the periodic one) reads the database in one statement per follow table and keeps what admit added
lately, whose batch may still be open on another stream."""
from __future__ import annotations

from feather import sql
from feather.db import db
from feather.feeds.ingest import admission as adm
from feather.feeds.store import served
from tests.fixtures.feeds.feedkit import BASE_US, FakeSources, feeds_app, feeds_subscription, follow, post, rows, toml, unfollow

A, B, C, D = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc", "did:plc:dddd"


class Clock:
    def __init__(self):
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def setup(make_app, tmp_path, actors=(A,)):
    app = feeds_app(make_app, tmp_path, "actors = [" + ", ".join(f'"{a}"' for a in actors) + "]\n" + toml(),
                    sources=FakeSources(), FEED_SERVE="signed-in")
    sub = feeds_subscription(app.config["FEATHER"])
    handler = next(h for h in sub.handlers if h.feature == "feeds").apply_batch
    clock = Clock()
    handler.admission.clock = clock
    return app, handler, handler.admission, clock


def run(app, handler, events):
    with app.app_context(), db.connection_context(), db.atomic():
        handler(list(events))


def version(app) -> int:
    with app.app_context(), db.connection_context():
        return served.version()


def stored_posts(app) -> list[tuple]:
    return rows(app, "SELECT uri FROM feed_records_post ORDER BY uri")


def test_this_process_follows_admit_the_author_with_no_version_bump_and_no_rebuild(make_app, tmp_path):
    app, handler, admission, clock = setup(make_app, tmp_path)
    run(app, handler, [post(A, "a0", BASE_US)])  # the first batch loads the filter
    before = version(app)
    run(app, handler, [follow(A, "f1", C)])
    clock.now += adm.POLL_SECS
    run(app, handler, [post(C, "c1", BASE_US + 1)])
    assert (version(app), admission.rebuilds, admission.changes) == (before, 1, 1)
    assert stored_posts(app) == [(f"at://{A}/app.bsky.feed.post/a0",), (f"at://{C}/app.bsky.feed.post/c1",)]


def test_an_unfollow_stops_admitting_the_author_once_its_batch_has_settled_without_a_rebuild(make_app, tmp_path):
    app, handler, admission, clock = setup(make_app, tmp_path)
    run(app, handler, [follow(A, "f1", C)])
    clock.now += adm.SETTLE_SECS
    run(app, handler, [unfollow(A, "f1", at_us=BASE_US + 5)])
    clock.now += adm.SETTLE_SECS - 0.5  # not yet: the unfollow's batch is taken to be still open
    run(app, handler, [post(C, "c1", BASE_US + 10)])
    assert stored_posts(app) == [(f"at://{C}/app.bsky.feed.post/c1",)]
    clock.now += adm.POLL_SECS  # the next poll: settled, probed, dropped
    run(app, handler, [post(C, "c2", BASE_US + 11)])
    assert stored_posts(app) == [(f"at://{C}/app.bsky.feed.post/c1",)]
    assert (C in admission.followees, admission.rebuilds, admission.pending) == (False, 1, {})


def test_an_unfollow_keeps_an_author_another_served_actor_still_follows(make_app, tmp_path):
    app, handler, admission, clock = setup(make_app, tmp_path, actors=(A, B))
    run(app, handler, [follow(A, "f1", C), follow(B, "f1", C), follow(A, "f2", D)])
    clock.now += adm.SETTLE_SECS
    run(app, handler, [unfollow(A, "f1", at_us=BASE_US + 5), unfollow(A, "f2", at_us=BASE_US + 6)])
    clock.now += adm.SETTLE_SECS
    run(app, handler, [post(C, "c1", BASE_US + 10), post(D, "d1", BASE_US + 11)])
    assert stored_posts(app) == [(f"at://{C}/app.bsky.feed.post/c1",)]
    assert sorted(admission.followees) == [C]


def test_an_author_followed_again_in_a_batch_still_open_stays_admitted(make_app, tmp_path):
    app, handler, admission, clock = setup(make_app, tmp_path)
    run(app, handler, [follow(A, "f1", C)])
    clock.now += adm.SETTLE_SECS
    run(app, handler, [unfollow(A, "f1", at_us=BASE_US + 5)])
    clock.now += adm.SETTLE_SECS - 1
    # Another stream's batch follows C again; it has not committed when the probe comes due.
    admission.admit([follow(A, "f2", C, at_us=BASE_US + 6)])
    clock.now += 1
    run(app, handler, [post(C, "c1", BASE_US + 10)])
    assert stored_posts(app) == [(f"at://{C}/app.bsky.feed.post/c1",)]
    assert list(admission.pending) == [C]  # probed once that batch too has had time to commit


def test_a_rebuild_keeps_a_followee_whose_batch_is_still_open_and_drops_the_unfollowed(make_app, tmp_path):
    app, handler, admission, clock = setup(make_app, tmp_path, actors=(A, B))
    run(app, handler, [follow(A, "f1", C)])
    clock.now += adm.RECENT_SECS
    run(app, handler, [unfollow(A, "f1", at_us=BASE_US + 5)])
    admission.admit([follow(B, "f1", D)])  # another stream's batch, not committed
    with app.app_context(), db.connection_context(), db.atomic():
        served.bump()  # another process: a sign-in
    clock.now += adm.POLL_SECS
    run(app, handler, [post(C, "c1", BASE_US + 10), post(D, "d1", BASE_US + 11)])
    assert admission.rebuilds == 2
    assert stored_posts(app) == [(f"at://{D}/app.bsky.feed.post/d1",)]
    assert sorted(admission.followees) == [D]


def test_the_filter_is_rebuilt_every_rebuild_secs_without_a_bump(make_app, tmp_path):
    app, handler, admission, clock = setup(make_app, tmp_path)
    run(app, handler, [post(A, "a0", BASE_US)])
    admission.followees.add(D)  # over-admission the probes missed
    clock.now += adm.REBUILD_SECS - adm.POLL_SECS
    run(app, handler, [post(A, "a1", BASE_US + 1)])
    assert (admission.rebuilds, D in admission.followees) == (1, True)
    clock.now += adm.POLL_SECS
    run(app, handler, [post(A, "a2", BASE_US + 2)])
    assert (admission.rebuilds, D in admission.followees) == (2, False)


def test_a_rebuild_reads_whom_every_served_actor_follows_config_feed_actors_and_earlier_sign_ins(make_app, tmp_path):
    app, handler, admission, clock = setup(make_app, tmp_path, actors=(A,))
    with app.app_context(), db.connection_context(), db.atomic():
        sql.execute("INSERT INTO auth_grant (did, kind, pds_url, access_enc, refresh_enc, expires_at,"
                       " created_at, updated_at) VALUES (?, 'password', 'https://pds.example', 'x', 'y', 0, 0, 0)", (B,))
        served.serve(D, "reader")
    run(app, handler, [follow(A, "f1", C), follow(B, "f1", D), follow(D, "f1", B), follow(C, "f1", A)])
    clock.now += adm.RECENT_SECS  # nothing recent left to keep: the rebuild reads the database alone
    with app.app_context(), db.connection_context(), db.atomic():
        served.bump()
    run(app, handler, [])
    assert admission.rebuilds == 2
    assert (sorted(admission.served), sorted(admission.followees)) == ([A, B, D], [B, C, D])


def test_a_rebuild_soon_after_a_follow_does_not_undo_its_unfollow(make_app, tmp_path):
    """Another process's bump (a first read's backfill) within RECENT_SECS of C's follow: the
    rebuild keeps what admit added lately, but not C, whose unfollow came after."""
    app, handler, admission, clock = setup(make_app, tmp_path)
    run(app, handler, [follow(A, "f1", C)])
    clock.now += adm.SETTLE_SECS
    run(app, handler, [unfollow(A, "f1", at_us=BASE_US + 5)])
    clock.now += adm.SETTLE_SECS + adm.POLL_SECS
    run(app, handler, [post(C, "c1", BASE_US + 10)])  # probed: C dropped
    assert C not in admission.followees
    with app.app_context(), db.connection_context(), db.atomic():
        served.bump()
    clock.now += adm.POLL_SECS  # still within RECENT_SECS of the follow
    run(app, handler, [post(C, "c2", BASE_US + 11)])
    assert (admission.rebuilds, C in admission.followees, stored_posts(app)) == (2, False, [])


def test_an_unfollow_pending_when_a_rebuild_runs_is_still_settled_after_it(make_app, tmp_path):
    app, handler, admission, clock = setup(make_app, tmp_path)
    run(app, handler, [follow(A, "f1", C)])
    clock.now += adm.SETTLE_SECS
    run(app, handler, [unfollow(A, "f1", at_us=BASE_US + 5)])
    with app.app_context(), db.connection_context(), db.atomic():
        served.bump()
    clock.now += adm.POLL_SECS  # a rebuild before the unfollow has settled
    run(app, handler, [post(C, "c1", BASE_US + 10)])
    assert (admission.rebuilds, C in admission.pending) == (2, True)
    clock.now += adm.SETTLE_SECS
    run(app, handler, [post(C, "c2", BASE_US + 11)])
    assert (C in admission.followees, admission.pending, stored_posts(app)) == (False, {}, [])


def test_a_probe_puts_back_an_author_a_served_actor_still_follows(make_app, tmp_path):
    """A rebuild read the database before another stream's follow of C committed: the pending
    unfollow's probe finds the follow and admits C again."""
    app, handler, admission, clock = setup(make_app, tmp_path, actors=(A, B))
    run(app, handler, [follow(A, "f1", C), follow(B, "f1", C)])
    clock.now += adm.SETTLE_SECS
    run(app, handler, [unfollow(A, "f1", at_us=BASE_US + 5)])
    admission.followees.discard(C)  # what that rebuild would have left
    clock.now += adm.SETTLE_SECS + adm.POLL_SECS
    run(app, handler, [post(C, "c1", BASE_US + 10)])
    assert (C in admission.followees, stored_posts(app)) == (True, [(f"at://{C}/app.bsky.feed.post/c1",)])


def test_a_replayed_follow_the_store_refuses_stops_admitting_its_subject_once_settled(make_app, tmp_path):
    """A shard's replay brings a follow's create again after its delete: the store keeps the
    tombstone, and the filter, which admitted the subject when it saw the create, drops them."""
    app, handler, admission, clock = setup(make_app, tmp_path)
    run(app, handler, [follow(A, "f1", C)])
    clock.now += adm.SETTLE_SECS
    run(app, handler, [unfollow(A, "f1", at_us=BASE_US + 5)])
    clock.now += adm.SETTLE_SECS + adm.POLL_SECS
    run(app, handler, [post(C, "c1", BASE_US + 10)])
    assert C not in admission.followees
    changes = admission.changes
    run(app, handler, [follow(A, "f1", C)])  # the replay: refused, the delete is newer
    assert (C in admission.followees, admission.changes) == (False, changes + 2)  # in, then out, in one batch
    run(app, handler, [post(C, "c2", BASE_US + 11)])
    assert stored_posts(app) == []


def test_a_replayed_follow_that_is_still_stored_keeps_its_subject(make_app, tmp_path):
    app, handler, admission, clock = setup(make_app, tmp_path)
    run(app, handler, [follow(A, "f1", C)])
    admission.followees.discard(C)  # as if a rebuild had not seen it yet
    run(app, handler, [follow(A, "f1", C), post(C, "c1", BASE_US + 10)])  # the replay of a kept follow
    assert (C in admission.followees, stored_posts(app)) == (True, [(f"at://{C}/app.bsky.feed.post/c1",)])


def test_another_streams_admit_while_a_batch_is_writing_does_not_take_its_followee_out(make_app, tmp_path, monkeypatch):
    """The streams' batches run side by side: B's follow of D is admitted by its stream while A's
    batch is still writing (here, at the moment A's batch asks for its new followee's fetch).
    A's check of the follows it admitted must look at its own only: D's follow is not committed
    yet, and taking D out would drop B's timeline posts from D until the next rebuild."""
    from feather.feeds.store import fetches

    app, handler, admission, clock = setup(make_app, tmp_path, actors=(A, B))
    request = fetches.request

    def another_stream_admits(subjects):
        admission.admit([follow(B, "f1", D)])  # its batch has not written anything yet
        return request(subjects)
    monkeypatch.setattr(fetches, "request", another_stream_admits)
    run(app, handler, [follow(A, "f1", C)])
    assert sorted(admission.followees) == [C, D]
