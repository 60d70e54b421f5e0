"""The runner: re-verify, rkey-before-call, retries, pacing and every failure path (in-memory PDS)."""
from __future__ import annotations

import pytest

from tests.test_sync_kit import ALICE, BOB, BSKY, CAROL, SIFA, T0, TANGLED, env  # noqa: F401

from feather import sql

TANGLED_PROFILE = "sh.tangled.actor.profile"


def _rows(statement, *params):
    return sql.rows(statement, params)


def _followed(env, owner=ALICE):
    env.enable(owner, ["bluesky", "tangled"])
    env.pds.add_profile(BOB, TANGLED_PROFILE)
    env.follow(owner, BSKY, BOB)
    env.echo()


def test_follow_is_written_at_the_rkey_chosen_before_the_call_and_its_echo_propagates_nothing(env):
    seen = {}
    original = env.pds.create_follow

    def spy(owner, collection, rkey, subject, created_at):
        seen["mirror"] = _rows("SELECT rkey, created_by_sync, state FROM sync_follow_mirror WHERE app = 'tangled'")
        seen["queued_rkey"] = _rows("SELECT rkey FROM sync_queue WHERE app = 'tangled'")[0][0]
        original(owner, collection, rkey, subject, created_at)

    env.pds.create_follow = spy
    _followed(env)
    assert env.run() == 1
    (rkey, subject), = env.pds.records(ALICE, TANGLED).items()
    assert subject == BOB
    assert seen == {"mirror": [(rkey, 1, "pending")], "queued_rkey": rkey}
    env.echo()
    assert ("tangled", rkey, BOB, 1, "live") in env.mirror()
    assert [r[5] for r in env.queue()] == ["done"]
    assert _rows("SELECT kind, points FROM sync_activity WHERE app = 'tangled'") == [("follow", 3)]


def test_follow_of_a_subject_no_longer_followed_anywhere_is_skipped(env):
    from feather.sync import queue

    _followed(env)

    sql.execute("DELETE FROM sync_follow_mirror WHERE app = 'bluesky'")
    assert env.run() == 1
    assert env.pds.records(ALICE, TANGLED) == {}
    assert _rows("SELECT status, last_error FROM sync_queue") == [("skipped", "no longer followed on any app")]
    assert queue.waiting_count(ALICE) == 0


def test_follow_already_present_on_the_target_is_skipped(env):
    _followed(env)
    env.follow(ALICE, TANGLED, BOB, rkey="3ktttttttttt2")
    env.echo()
    env.run()
    assert env.pds.records(ALICE, TANGLED) == {"3ktttttttttt2": BOB}
    assert _rows("SELECT status FROM sync_queue") == [("skipped",)]


@pytest.mark.parametrize("apps, app, days", [(["bluesky", "tangled"], "tangled", 7),
                                             (["tangled", "bluesky"], "bluesky", 2),
                                             (["tangled", "semble"], "semble", 2)])
def test_subject_without_a_profile_waits_with_the_apps_recheck_interval(env, apps, app, days):
    from feather.sync.apps import BY_KEY

    env.enable(ALICE, apps)
    source = [a for a in apps if a != app][0]
    env.follow(ALICE, BY_KEY[source].follow, BOB)
    env.echo()
    env.run()
    assert _rows("SELECT app, subject, next_check_at FROM sync_waiting") == [(app, BOB, T0 + days * 86400)]
    assert _rows("SELECT status FROM sync_queue") == [("waiting",)]
    assert env.pds.writes == []


def test_semble_profile_check_reads_the_bluesky_profile(env):
    env.enable(ALICE, ["tangled", "semble"])
    env.pds.add_profile(BOB, "app.bsky.actor.profile")
    env.follow(ALICE, TANGLED, BOB)
    env.echo()
    env.run()
    assert list(env.pds.records(ALICE, "network.cosmik.follow").values()) == [BOB]


def test_lane_never_writes_a_follow_on_an_app_whose_latest_listing_is_not_done(env):
    from feather.sync import backfill

    _followed(env)
    backfill.start_run(ALICE, ["tangled"], "sweep", env.clock())
    assert env.run() == 0
    assert env.pds.writes == []
    while backfill.burst(env.pds, env.clock):
        pass
    assert env.run() == 1


def test_unfollow_deletes_the_record_leaves_a_tombstone_and_its_echo_removes_it(env):
    _followed(env)
    env.run()
    env.echo()
    bsky_rkey = next(iter(env.pds.records(ALICE, BSKY)))
    env.pds.user_unfollow(ALICE, BSKY, bsky_rkey)
    env.echo()
    assert env.run() == 1
    assert env.pds.records(ALICE, TANGLED) == {}
    assert [r[4] for r in env.mirror()] == ["gone"]
    env.echo()
    assert env.mirror() == []
    assert [(r[1], r[5]) for r in env.queue()] == [("follow", "done"), ("unfollow", "done")]
    assert _rows("SELECT kind, points FROM sync_activity WHERE app = 'tangled' ORDER BY id") == [
        ("follow", 3), ("unfollow", 1)]


def test_retry_after_a_500_reuses_the_rkey(env):
    _followed(env)
    env.pds.faults = ["500"]
    assert env.run() == 0
    rkey = _rows("SELECT rkey FROM sync_queue")[0][0]
    assert _rows("SELECT attempts, not_before FROM sync_queue") == [(1, T0 + 60)]
    env.clock.advance(60)
    assert env.run() == 1
    assert env.pds.records(ALICE, TANGLED) == {rkey: BOB}


def test_timeout_after_success_never_creates_a_second_record(env):
    _followed(env)
    env.pds.faults = ["timeout_after_success"]
    env.run()
    env.clock.advance(60)
    env.run()
    assert len(env.pds.records(ALICE, TANGLED)) == 1
    assert [w[0] for w in env.pds.writes] == ["create"]
    assert _rows("SELECT status, attempts FROM sync_queue") == [("done", 1)]


def test_five_server_errors_fail_the_row_with_backoff_between_attempts(env):
    _followed(env)
    env.pds.faults = ["500"] * 5
    waits = []
    for _ in range(5):
        env.run()
        status, attempts, not_before = _rows("SELECT status, attempts, not_before FROM sync_queue")[0]
        waits.append(not_before - env.clock())
        env.clock.advance(max(0, not_before - env.clock()))
    assert (status, attempts) == ("failed", 5)
    assert waits[:4] == [60, 120, 240, 480]
    # Remembered (the write may have landed) but no longer counted as a follow.
    assert _rows("SELECT state FROM sync_follow_mirror WHERE app = 'tangled'") == [("failed",)]


def test_429_parks_the_whole_account_until_reset_without_spending_an_attempt(env):
    _followed(env)
    env.follow(ALICE, BSKY, CAROL)
    env.pds.add_profile(CAROL, TANGLED_PROFILE)
    env.echo()
    env.pds.faults = ["429"]
    assert env.run() == 0
    assert _rows("SELECT parked_until FROM sync_sets") == [(T0 + 121,)]
    assert _rows("SELECT attempts, status FROM sync_queue ORDER BY id") == [(0, "pending"), (0, "pending")]
    assert _rows("SELECT SUM(points) FROM sync_activity") == [(0,)]
    env.clock.advance(120)
    assert env.run() == 0
    env.clock.advance(1)
    assert env.run() == 2


def test_401_parks_the_lane_and_five_in_a_row_pause_the_set(env):
    from feather.sync.store import get_set, shard_members

    _followed(env)
    for n in range(1, 6):
        env.pds.faults = ["401"]
        env.run()
        assert get_set(ALICE).auth_failures == n
        assert _rows("SELECT not_before, attempts FROM sync_queue")[0] == (env.clock() + 300, 0)
        env.clock.advance(300)
    sync_set = get_set(ALICE)
    assert (sync_set.paused, sync_set.enabled) == (True, True)
    assert shard_members(0, 1) == [ALICE]  # a paused owner stays subscribed
    env.follow(ALICE, BSKY, CAROL)
    env.echo()
    assert [r[2] for r in env.queue() if r[5] == "pending"] == [BOB, CAROL]  # and keeps queuing
    assert env.run() == 0


def test_a_success_resets_the_auth_streak(env):
    from feather.sync.store import get_set

    _followed(env)
    env.pds.faults = ["401"]
    env.run()
    env.clock.advance(300)
    env.run()
    assert get_set(ALICE).auth_failures == 0


def test_a_gone_session_pauses_at_once_and_signing_in_again_resumes_drains_and_sweeps(env):
    from feather.sync.store import get_set, resume

    _followed(env)
    env.pds.signed_out.add(ALICE)
    env.run()
    sync_set = get_set(ALICE)
    assert (sync_set.paused, sync_set.pause_reason) == (True, "signed out")
    env.pds.signed_out.clear()
    env.clock.advance(3600)
    assert resume(ALICE, env.clock()) is True
    sync_set = get_set(ALICE)
    assert (sync_set.paused, sync_set.next_sweep_at) == (False, env.clock())
    assert env.run() == 1


def three_follows_to_copy(env, budget) -> None:
    """Alice syncs Bluesky and Tangled under this budget, with three Bluesky follows to copy."""
    env.runner.budget = budget
    env.enable(ALICE, ["bluesky", "tangled"])
    for subject in ("did:plc:s1", "did:plc:s2", "did:plc:s3"):
        env.pds.add_profile(subject, TANGLED_PROFILE)
        env.follow(ALICE, BSKY, subject)
    env.echo()


def test_exhausted_hourly_budget_waits_and_disables_nothing(env):
    from feather.sync.pacer import Budget
    from feather.sync.store import get_set

    three_follows_to_copy(env, Budget(hourly=7, daily=100))
    assert env.run() == 2  # 3 + 3 points; a third create would make 9 > 7
    assert (get_set(ALICE).enabled, get_set(ALICE).paused) == (True, False)
    env.clock.advance(3599)
    assert env.run() == 0
    env.clock.advance(1)
    assert env.run() == 1


def test_the_daily_budget_allows_spending_exactly_up_to_it(env):
    from feather.sync.pacer import Budget

    three_follows_to_copy(env, Budget(hourly=1000, daily=6))
    assert env.run() == 2  # 3 + 3 points is exactly the day's 6; a third create would make 9
    env.clock.advance(86399)
    assert env.run() == 0
    env.clock.advance(1)
    assert env.run() == 1


def test_per_app_daily_follow_cap(env):
    from feather.sync.pacer import Budget

    env.runner.budget = Budget(hourly=1500, daily=15000, app_daily_follows=1)
    env.enable(ALICE, ["bluesky", "tangled"])
    for subject in ("did:plc:s1", "did:plc:s2"):
        env.pds.add_profile(subject, TANGLED_PROFILE)
        env.follow(ALICE, BSKY, subject)
    env.echo()
    assert env.run() == 1
    env.clock.advance(86400)
    assert env.run() == 1


def test_lanes_of_one_owner_run_in_parallel_but_in_order_within_a_lane(env):
    env.enable(ALICE, ["bluesky", "tangled", "sifa"])
    for subject in ("did:plc:s1", "did:plc:s2"):
        env.pds.add_profile(subject, TANGLED_PROFILE)
        env.pds.add_profile(subject, "id.sifa.profile.self")
        env.follow(ALICE, BSKY, subject)
    env.echo()
    assert env.runner.tick(concurrent=True) == 4
    assert sorted(env.pds.records(ALICE, SIFA).values()) == ["did:plc:s1", "did:plc:s2"]
    creates = [w for w in env.pds.writes if w[2] == TANGLED]
    assert [w[4] for w in creates] == ["did:plc:s1", "did:plc:s2"]


def _unfollow_queued(env):
    _followed(env)
    env.run()
    env.echo()
    env.pds.user_unfollow(ALICE, BSKY, next(iter(env.pds.records(ALICE, BSKY))))
    env.echo()


def _refuse_with_400(*args, **kwargs):
    from feather.sync.follow_writer import BadRequest

    raise BadRequest("Invalid record", status=400)


def test_a_400_on_an_unfollow_is_retried_with_backoff(env, monkeypatch):
    _unfollow_queued(env)
    monkeypatch.setattr(env.pds, "delete_follow", _refuse_with_400)
    assert env.run() == 0
    assert _rows("SELECT kind, status, attempts, not_before FROM sync_queue WHERE kind = 'unfollow'") == [
        ("unfollow", "pending", 1, T0 + 60)]
    assert [r[4] for r in env.mirror()] == ["deleting"]  # still on its way out, not given up


def test_a_400_on_a_follow_fails_it_at_once(env, monkeypatch):
    _followed(env)
    monkeypatch.setattr(env.pds, "create_follow", _refuse_with_400)
    assert env.run() == 0
    assert _rows("SELECT kind, status, attempts FROM sync_queue") == [("follow", "failed", 1)]


def test_a_fault_of_ours_before_the_pds_answers_refunds_the_points_and_retries(env, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug of ours")

    _followed(env)
    monkeypatch.setattr(env.pds, "create_follow", broken)
    assert env.run() == 0
    assert _rows("SELECT status, attempts, not_before FROM sync_queue") == [("pending", 1, T0 + 60)]
    assert _rows("SELECT kind, points FROM sync_activity WHERE app = 'tangled' ORDER BY id") == [("error", 0)]


def test_signing_in_again_lets_a_lane_parked_by_401s_write_at_once(env):
    from feather.sync.store import pause, resume, sets_due_for_sweep

    _followed(env)
    env.pds.faults = ["401"]
    env.run()
    assert _rows("SELECT not_before FROM sync_queue") == [(T0 + 300,)]
    pause(ALICE, "signed out", env.clock())
    assert resume(ALICE, env.clock()) is True
    assert sets_due_for_sweep(env.clock(), 10) == [ALICE]  # a sweep due this very second
    assert env.run() == 1  # no wait for the lane's 300 s park
    assert resume(ALICE, env.clock()) is False  # not paused any more: nothing to resume


def test_a_shorter_rate_limit_never_shortens_an_account_park(env):
    from feather.sync.store import get_set, park_account

    _followed(env)
    park_account(ALICE, T0 + 500, T0)
    park_account(ALICE, T0 + 100, T0)
    assert get_set(ALICE).parked_until == T0 + 500
    park_account(ALICE, T0 + 900, T0)
    assert get_set(ALICE).parked_until == T0 + 900
