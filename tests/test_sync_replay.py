"""Issue 13: the iron rule under replay, failures that must not change meaning, re-enabling, shard
capacity and resuming on sign-in. Every test drives the handler, backfill and runner against the
in-memory PDS with a fake clock; the stream's replays are the same events delivered again."""
from __future__ import annotations

import pytest

from tests.test_sync_kit import ALICE, BOB, BSKY, CAROL, TANGLED, env  # noqa: F401

from feather import sql

TANGLED_PROFILE = "sh.tangled.actor.profile"


def _sync(env, rounds: int = 3) -> None:
    """Run the runner and deliver its echoes until nothing moves."""
    for _ in range(rounds):
        env.run()
        env.echo()


def test_replayed_follow_unfollow_never_deletes_a_follow_the_owner_made_afterwards(env):
    env.pds.add_profile(BOB, TANGLED_PROFILE)
    env.pds.add_profile(BOB, "app.bsky.actor.profile")
    env.enable(ALICE, ["bluesky", "tangled"])
    env.seen = len(env.pds.log)
    follow = env.follow(ALICE, BSKY, BOB)
    env.echo()
    _sync(env)  # sync wrote the Tangled copy T1
    [t1] = env.pds.records(ALICE, TANGLED)
    unfollow = env.pds.user_unfollow(ALICE, BSKY, follow.rkey)
    env.echo()
    _sync(env)  # T1 deleted: the unfollow propagated
    assert env.pds.records(ALICE, TANGLED) == {}
    t2 = env.follow(ALICE, TANGLED, BOB)  # the owner follows BOB on Tangled themselves
    env.echo()
    _sync(env)  # ...which sync copies to Bluesky as B2
    [b2] = env.pds.records(ALICE, BSKY)
    env.deliver(follow, unfollow, t2)  # the stream replays the window after a restart
    _sync(env)
    assert env.pds.records(ALICE, TANGLED) == {t2.rkey: BOB}
    assert env.pds.records(ALICE, BSKY) == {b2: BOB}
    assert [w[0] for w in env.pds.writes] == ["create", "delete", "create"]
    assert t1 != t2.rkey


def test_a_delete_delivered_twice_queues_its_unfollows_once(env):
    env.pds.add_profile(BOB, TANGLED_PROFILE)
    env.enable(ALICE, ["bluesky", "tangled"])
    env.seen = len(env.pds.log)
    follow = env.follow(ALICE, BSKY, BOB)
    env.echo()
    _sync(env)
    unfollow = env.pds.user_unfollow(ALICE, BSKY, follow.rkey)
    env.deliver(unfollow)
    env.deliver(unfollow)
    assert [(q[0], q[1]) for q in env.queue() if q[1] == "unfollow"] == [("tangled", "unfollow")]


def test_a_replayed_create_of_a_record_deleted_later_is_not_mirrored_again(env):
    env.enable(ALICE, ["bluesky", "tangled"])
    env.seen = len(env.pds.log)
    follow = env.follow(ALICE, BSKY, BOB)
    unfollow = env.pds.user_unfollow(ALICE, BSKY, follow.rkey)
    env.deliver(follow, unfollow)
    env.deliver(follow)  # replay from the cursor - 5 s: the create comes back alone
    assert env.mirror() == []
    assert [q[5] for q in env.queue()] == ["cancelled"]


def test_a_late_delete_only_reaches_records_born_before_it(env):
    """A lagging shard delivers an unfollow after a listing already mirrored a newer follow."""
    from feather.sync import queue
    from feather.atproto.syntax import encode_tid

    env.enable(ALICE, ["bluesky", "tangled"])
    env.seen = len(env.pds.log)
    follow = env.follow(ALICE, BSKY, BOB)
    env.deliver(follow)
    unfollow = env.pds.user_unfollow(ALICE, BSKY, follow.rkey)
    old = encode_tid(unfollow.time_us - 10, 0)
    new = encode_tid(unfollow.time_us + 10, 0)
    for rkey in (old, new):  # as a sweep listing records them: born at their TID's time
        queue.upsert_mirror(ALICE, "tangled", rkey, BOB, env.clock(), born_us=queue.born_of_listed(rkey, 0))
    env.deliver(unfollow)
    assert [(q[0], q[1], q[3]) for q in env.queue() if q[1] == "unfollow"] == [("tangled", "unfollow", old)]


def test_a_follow_that_failed_for_good_does_not_swallow_a_later_unfollow(env):
    env.pds.add_profile(BOB, TANGLED_PROFILE)
    env.pds.add_profile(BOB, "app.bsky.actor.profile")
    env.enable(ALICE, ["bluesky", "tangled"])
    env.seen = len(env.pds.log)
    env.follow(ALICE, TANGLED, BOB)
    env.echo()
    env.pds.faults = ["500"] * 5
    for _ in range(5):  # the Bluesky copy fails five times: failed for good
        env.run()
        env.clock.advance(3600)
    assert [q[5] for q in env.queue()] == ["failed"]
    assert env.pds.records(ALICE, BSKY) == {}
    mine = env.follow(ALICE, BSKY, BOB)  # the owner follows on Bluesky by hand, later unfollows there
    env.echo()
    env.pds.user_unfollow(ALICE, BSKY, mine.rkey)
    env.echo()
    _sync(env)
    assert env.pds.records(ALICE, TANGLED) == {}  # the unfollow propagated


def test_turning_sync_off_and_on_after_a_failure_queues_what_the_preview_promises(env):
    from feather.sync import backfill, preview, service

    for subject in (BOB, CAROL):
        env.pds.add_profile(subject, TANGLED_PROFILE)
        env.follow(ALICE, BSKY, subject)
    env.enable(ALICE, ["bluesky", "tangled"])
    env.seen = len(env.pds.log)
    env.pds.faults = ["500"] * 10
    for _ in range(10):
        env.run()
        env.clock.advance(3600)
    assert {q[5] for q in env.queue()} == {"failed"}
    service.configure(ALICE, env.settings, env.clock(), enabled=False)
    promised = preview.compute(ALICE, ["bluesky", "tangled"], env.settings, env.pds)
    assert promised["will_follow"] == 2
    before = len(env.queue())
    service.configure(ALICE, env.settings, env.clock(), enabled=True)
    while backfill.burst(env.pds, env.clock):
        pass
    queued = [q for q in env.queue()[before:] if q[1] == "follow" and q[5] == "pending"]
    assert sorted(q[2] for q in queued) == sorted([BOB, CAROL])
    _sync(env)
    assert sorted(env.pds.records(ALICE, TANGLED).values()) == sorted([BOB, CAROL])


def test_an_unexpected_fault_before_the_pds_is_reached_costs_nothing_and_shows(env):
    from feather.sync import service

    env.pds.add_profile(BOB, TANGLED_PROFILE)
    env.enable(ALICE, ["bluesky", "tangled"])
    env.follow(ALICE, BSKY, BOB)
    env.echo()
    real = env.pds.create_follow

    def broken(*args):
        raise RuntimeError("Working outside of application context.")

    env.pds.create_follow = broken
    env.run()
    assert sql.rows("SELECT kind, points FROM sync_activity WHERE app = 'tangled'") == [("error", 0)]
    assert sql.rows("SELECT status, attempts, last_error FROM sync_queue") == [
        ("pending", 1, "RuntimeError: Working outside of application context.")]
    assert [a["kind"] for a in service.activity(ALICE)][:1] == ["error"]
    env.pds.create_follow = real
    env.clock.advance(60)
    env.run()
    assert sorted(env.pds.records(ALICE, TANGLED).values()) == [BOB]


def test_a_write_interrupted_by_a_crash_keeps_its_points_and_is_labelled(env):
    env.pds.add_profile(BOB, TANGLED_PROFILE)
    env.enable(ALICE, ["bluesky", "tangled"])
    env.follow(ALICE, BSKY, BOB)
    env.echo()
    real = env.pds.create_follow

    class Killed(BaseException):
        pass

    def killed(*args):
        raise Killed()

    env.pds.create_follow = killed
    with pytest.raises(Killed):
        env.runner.tick(concurrent=False)
    env.pds.create_follow = real
    env.clock.advance(120)  # the dead process's lease expires
    env.run()
    assert sql.rows("SELECT kind, points FROM sync_activity WHERE app = 'tangled' ORDER BY id") == [
        ("interrupted", 3), ("follow", 3)]
    assert sorted(env.pds.records(ALICE, TANGLED).values()) == [BOB]


def test_enabling_refuses_plainly_when_the_shard_is_full(env, monkeypatch):
    from feather.jetstream import subscriptions
    from feather.sync import service
    from feather.sync.store import get_set

    monkeypatch.setattr(subscriptions, "MAX_DIDS", 2)
    for owner in ("did:plc:one", "did:plc:two"):
        service.configure(owner, env.settings, env.clock(), apps=["bluesky", "tangled"], enabled=True)
    with pytest.raises(service.InstanceFull, match="This instance is full"):
        service.configure(ALICE, env.settings, env.clock(), apps=["bluesky", "tangled"], enabled=True)
    assert get_set(ALICE) is None  # nothing of the refused change was stored


def test_signing_in_again_resumes_a_set_paused_for_its_session_but_not_one_paused_by_its_owner(env):
    from feather.sync import service
    from feather.sync.store import get_set, pause

    env.pds.add_profile(BOB, TANGLED_PROFILE)
    env.enable(ALICE, ["bluesky", "tangled"])
    env.follow(ALICE, BSKY, BOB)
    env.echo()
    env.pds.faults = ["401"]
    env.run()  # the PDS refused the session: the lane is parked for five minutes
    assert sql.rows("SELECT not_before FROM sync_queue WHERE status = 'pending'") == [(env.clock() + 300,)]
    pause(ALICE, "signed out", env.clock())
    env.clock.advance(10)
    assert service.resume_after_sign_in(ALICE, env.clock()) is True
    state = get_set(ALICE)
    assert (state.paused, state.next_sweep_at) == (False, env.clock())
    assert sql.rows("SELECT not_before FROM sync_queue WHERE status = 'pending'") == [(0,)]
    assert env.run() == 1  # drained at once, not when the park would have ended
    assert list(env.pds.records(ALICE, TANGLED).values()) == [BOB]
    service.configure(ALICE, env.settings, env.clock(), paused=True)
    assert service.resume_after_sign_in(ALICE, env.clock()) is False
    assert get_set(ALICE).paused is True


def _reenable_and_list(env):
    from feather.sync import backfill, service

    service.configure(ALICE, env.settings, env.clock(), enabled=True)
    while backfill.burst(env.pds, env.clock):
        pass


def _pending_follows(env) -> list[tuple[str, str]]:
    return sorted((q[0], q[2]) for q in env.queue() if q[1] == "follow" and q[5] == "pending")


def _promised(env) -> int:
    from feather.sync import preview

    return preview.compute(ALICE, ["bluesky", "tangled"], env.settings, env.pds)["will_follow"]


def test_reenabling_after_an_unfollow_made_while_off_follows_again(env):
    """A record deleted while sync was off left a stale mirror row; the new listing drops it."""
    from feather.sync import service

    env.pds.add_profile(BOB, TANGLED_PROFILE)
    env.follow(ALICE, BSKY, BOB)
    tangled = env.follow(ALICE, TANGLED, BOB)
    env.enable(ALICE, ["bluesky", "tangled"])
    service.configure(ALICE, env.settings, env.clock(), enabled=False)
    env.pds.user_unfollow(ALICE, TANGLED, tangled.rkey)
    env.echo()  # ignored: the set is off
    env.clock.advance(5)
    assert _promised(env) == 1
    _reenable_and_list(env)
    assert _pending_follows(env) == [("tangled", BOB)]


def test_reenabling_forgets_waits_from_before(env):
    """A subject that waited for a profile while on, and got one while off, is followed again."""
    from feather.sync import service

    env.follow(ALICE, BSKY, BOB)
    env.enable(ALICE, ["bluesky", "tangled"])
    env.run()  # no Tangled profile: BOB waits
    assert env.queue()[0][5] == "waiting"
    service.configure(ALICE, env.settings, env.clock(), enabled=False)
    env.pds.add_profile(BOB, TANGLED_PROFILE)
    assert _promised(env) == 1
    _reenable_and_list(env)
    assert _pending_follows(env) == [("tangled", BOB)]


def test_reenabling_after_a_retry_was_cut_short_follows_again(env):
    """Turned off between two tries: the claimed-but-unconfirmed record no longer counts."""
    from feather.sync import service

    env.pds.add_profile(BOB, TANGLED_PROFILE)
    env.follow(ALICE, BSKY, BOB)
    env.enable(ALICE, ["bluesky", "tangled"])
    env.pds.faults = ["500"]
    env.run()  # first try fails: the row waits for its retry, its record claimed (pending)
    service.configure(ALICE, env.settings, env.clock(), enabled=False)
    assert _promised(env) == 1
    _reenable_and_list(env)
    assert _pending_follows(env) == [("tangled", BOB)]
    _sync(env)
    assert list(env.pds.records(ALICE, TANGLED).values()) == [BOB]


def test_a_follow_that_failed_for_good_is_queued_again_by_a_new_follow_elsewhere(env):
    env.pds.add_profile(BOB, TANGLED_PROFILE)
    env.pds.add_profile(BOB, "id.sifa.profile.self")
    env.enable(ALICE, ["bluesky", "tangled", "sifa"])
    env.seen = len(env.pds.log)
    env.follow(ALICE, BSKY, BOB)
    env.echo()
    env.pds.faults = ["500"] * 10
    for _ in range(10):
        env.run()
        env.clock.advance(3600)
    assert sorted((q[0], q[5]) for q in env.queue()) == [("sifa", "failed"), ("tangled", "failed")]
    env.pds.faults = []
    env.follow(ALICE, "id.sifa.graph.follow", BOB)  # the owner follows on Sifa by hand
    env.echo()
    assert _pending_follows(env) == [("tangled", BOB)]


def test_deleting_a_record_while_sync_writes_another_on_that_app_is_an_unfollow(env):
    """Only a confirmed record makes a delete duplicate cleanup; one sync has in flight does not."""
    from feather.sync import queue

    env.enable(ALICE, ["bluesky", "tangled"])
    env.seen = len(env.pds.log)
    t1 = env.follow(ALICE, TANGLED, BOB)
    b1 = env.follow(ALICE, BSKY, BOB)
    env.deliver(t1, b1)
    queue.upsert_mirror(ALICE, "bluesky", "3kinflight222", BOB, env.clock(), by_sync=True, state="pending",
                        born_us=t1.time_us)
    env.deliver(env.pds.user_unfollow(ALICE, BSKY, b1.rkey))
    assert sorted((q[0], q[3]) for q in env.queue() if q[1] == "unfollow") == [
        ("bluesky", "3kinflight222"), ("tangled", t1.rkey)]


def test_two_lanes_at_once_write_through_the_scheduled_runner_job(env):
    """Issue 13 point 1: the runner job's gevent pool ran lanes outside the app context, so the
    production writer (which reaches the owner's session through current_app) wrote nothing."""
    from flask import current_app

    from feather import sync
    from feather.process.scheduler import guarded
    from feather.sync.follow_writer import install_writer
    from feather.sync.memory import MemoryPds

    class ContextWriter(MemoryPds):
        """Like PdsFollowWriter: a write needs the app (the owner's session lives in its extensions)."""

        def create_follow(self, *args):
            assert current_app.extensions["sync_writer"] is self
            return super().create_follow(*args)

    pds = ContextWriter(env.clock)
    pds.repos, pds.profiles, pds.log = env.pds.repos, env.pds.profiles, env.pds.log
    env.pds = pds
    for subject in (BOB, CAROL):
        env.pds.add_profile(subject, TANGLED_PROFILE)
        env.pds.add_profile(subject, "social.grain.actor.profile")
    env.follow(ALICE, BSKY, BOB)
    env.follow("did:plc:dave", BSKY, CAROL)
    for owner in (ALICE, "did:plc:dave"):
        env.enable(owner, ["bluesky", "tangled", "grain"])
    install_writer(env.app, pds)
    [job] = [j for j in sync.jobs(env.settings) if j.id == "sync-runner"]
    guarded(env.app, job)()  # the scheduler's wrapper: app context and a connection, as in production
    assert sql.rows("SELECT COUNT(DISTINCT owner_did || app) FROM sync_queue WHERE status = 'done'") == [(4,)]
    assert sorted(w[1:3] + (w[4],) for w in pds.writes) == [
        ("did:plc:alice", "sh.tangled.graph.follow", BOB), ("did:plc:alice", "social.grain.graph.follow", BOB),
        ("did:plc:dave", "sh.tangled.graph.follow", CAROL), ("did:plc:dave", "social.grain.graph.follow", CAROL)]


def test_an_observed_delete_is_remembered_for_the_lookback_and_a_day_then_trimmed(env):
    """The delete memory must outlive any replay the consumer can make (a shard resumes up to its
    lookback back): cleanup keeps it max(2 days, lookback + 1 day) after it was seen, not less."""
    from feather.sync import service

    env.enable(ALICE, ["bluesky", "tangled"])
    env.seen = len(env.pds.log)
    follow = env.follow(ALICE, BSKY, BOB)
    unfollow = env.pds.user_unfollow(ALICE, BSKY, follow.rkey)
    env.deliver(follow, unfollow)
    seen_at = env.clock()
    assert service.cleanup(seen_at + 2 * 86400, 0)["tombstones"] == 0  # the default lookback (1 day): two days
    lookback_us = 3 * 86400 * 1_000_000  # a shard allowed to resume three days back: four days
    assert service.cleanup(seen_at + 4 * 86400, lookback_us)["tombstones"] == 0
    env.deliver(follow, unfollow)  # that shard's replay, four days later
    assert env.mirror() == []
    assert [q[5] for q in env.queue()] == ["cancelled"]
    assert service.cleanup(seen_at + 4 * 86400 + 1, lookback_us)["tombstones"] == 1
    assert sql.rows("SELECT COUNT(*) FROM sync_observed_deletes") == [(0,)]


def test_an_unfollow_reaches_a_follow_that_failed_for_good_after_its_write_landed(env):
    """The fifth try timed out after the PDS wrote the record (so the row failed for good) and its
    echo has not come yet: the owner's unfollow must still delete that record."""
    env.pds.add_profile(BOB, TANGLED_PROFILE)
    env.enable(ALICE, ["bluesky", "tangled"])
    env.seen = len(env.pds.log)
    follow = env.follow(ALICE, BSKY, BOB)
    env.deliver(follow)
    env.seen = len(env.pds.log)
    env.pds.faults = ["500"] * 4 + ["timeout_after_success"]
    for _ in range(5):
        env.run()
        env.clock.advance(3600)
    assert [(q[0], q[5]) for q in env.queue()] == [("tangled", "failed")]
    [landed] = env.pds.records(ALICE, TANGLED)
    assert env.mirror()[-1][1:] == (landed, BOB, 1, "failed")
    env.deliver(env.pds.user_unfollow(ALICE, BSKY, follow.rkey))  # before the create's echo
    env.run()
    assert env.pds.records(ALICE, TANGLED) == {}
    assert [w[0] for w in env.pds.writes] == ["create", "delete"]


def _bob_followed_on_bluesky_and_copied_to_tangled(env):
    """Alice syncs Bluesky and Tangled and follows Bob on Bluesky; sync writes the Tangled copy.
    Returns (the Bluesky follow, the copy's rkey), 30 s later."""
    for profile in (TANGLED_PROFILE, "app.bsky.actor.profile"):
        env.pds.add_profile(BOB, profile)
    env.enable(ALICE, ["bluesky", "tangled"])
    env.seen = len(env.pds.log)
    follow = env.follow(ALICE, BSKY, BOB)
    env.echo()
    _sync(env)
    [copy] = env.pds.records(ALICE, TANGLED)
    env.clock.advance(30)
    return follow, copy


def test_a_sweep_that_lists_before_a_lagging_delete_arrives_still_propagates_the_unfollow(env):
    """The owner unfollows on Bluesky; the sweep lists before the shard delivers that delete, so it
    finds the record gone. The delete, when it comes, must still unfollow on Tangled (found by the
    property test: the sweep used to forget the record, and the late delete found nothing)."""
    from feather.sync import backfill, service

    follow, copy = _bob_followed_on_bluesky_and_copied_to_tangled(env)
    unfollow = env.pds.user_unfollow(ALICE, BSKY, follow.rkey)  # not delivered yet: the shard lags
    sql.execute("UPDATE sync_sets SET next_sweep_at = 0")
    assert backfill.sweep_due(env.clock, env.settings) == [ALICE]
    while backfill.burst(env.pds, env.clock):
        pass
    assert [(r[0], r[4]) for r in env.mirror()] == [("bluesky", "dropped"), ("tangled", "live")]
    env.deliver(unfollow)
    assert [(q[0], q[1], q[3], q[5]) for q in env.queue() if q[1] == "unfollow"] == [
        ("tangled", "unfollow", copy, "pending")]
    _sync(env)
    assert env.pds.records(ALICE, TANGLED) == {}
    assert env.mirror() == []
    assert service.cleanup(env.clock() + 3 * 86400)["tombstones"] == 2  # both deletes remembered, then trimmed


def test_a_newer_follow_a_sweep_mirrored_before_a_lagging_delete_is_propagated_after_it(env):
    """Unfollow on Bluesky, then follow again on Tangled; the sweep lists both before the shard
    delivers the delete. The delete removes sync's older Tangled copy and cancels what was queued
    for the subject, but the owner's newer Tangled follow stays, so Bluesky gets the follow back."""
    from feather.sync import backfill

    follow, copy = _bob_followed_on_bluesky_and_copied_to_tangled(env)
    unfollow = env.pds.user_unfollow(ALICE, BSKY, follow.rkey)
    again = env.follow(ALICE, TANGLED, BOB)  # neither event delivered yet: the shard lags
    sql.execute("UPDATE sync_sets SET next_sweep_at = 0")
    backfill.sweep_due(env.clock, env.settings)
    while backfill.burst(env.pds, env.clock):
        pass
    env.deliver(unfollow, again)
    # The sweep queued the Bluesky follow of the newer record; the delete keeps it (caused after it).
    assert [(q[0], q[1], q[3]) for q in env.queue() if q[5] == "pending"] == [
        ("bluesky", "follow", None), ("tangled", "unfollow", copy)]
    _sync(env)
    assert env.pds.records(ALICE, TANGLED) == {again.rkey: BOB}
    assert list(env.pds.records(ALICE, BSKY).values()) == [BOB]


def test_a_newer_follow_listed_while_a_delete_lags_is_propagated_once_the_delete_arrives(env):
    """The sweep lists Bluesky (the follow is there), then the owner unfollows on Bluesky and follows
    again on Tangled, then the sweep lists Tangled: Bluesky still looks followed, so nothing is
    queued. When the lagging delete arrives, the owner's newer Tangled follow must reach Bluesky."""
    from feather.sync import backfill

    follow, copy = _bob_followed_on_bluesky_and_copied_to_tangled(env)
    sql.execute("UPDATE sync_sets SET next_sweep_at = 0")
    backfill.sweep_due(env.clock, env.settings)
    assert backfill.burst(env.pds, env.clock, max_tasks=1) == 1  # Bluesky listed: the follow is there
    unfollow = env.pds.user_unfollow(ALICE, BSKY, follow.rkey)
    again = env.follow(ALICE, TANGLED, BOB)  # neither event delivered yet
    while backfill.burst(env.pds, env.clock):
        pass
    assert [q for q in env.queue() if q[5] == "pending"] == []
    env.deliver(unfollow, again)
    assert [(q[0], q[1], q[3]) for q in env.queue() if q[5] == "pending"] == [
        ("tangled", "unfollow", copy), ("bluesky", "follow", None)]
    _sync(env)
    assert env.pds.records(ALICE, TANGLED) == {again.rkey: BOB}
    assert list(env.pds.records(ALICE, BSKY).values()) == [BOB]
