"""Backfill bursts, the union step, the sweep, cleanup, owner operations and the shard subscriptions."""
from __future__ import annotations

import pytest

from tests.test_sync_kit import ALICE, BOB, BSKY, CAROL, DAVE, T0, TANGLED, env  # noqa: F401

from feather import sql


def _q(statement, *params):
    return sql.rows(statement, params)


def test_backfill_lists_in_resumable_bursts_then_one_union_queues_every_missing_pair(env):
    from feather.sync import backfill, service

    for subject in (BOB, CAROL, DAVE):
        env.follow(ALICE, BSKY, subject)
    env.follow(ALICE, TANGLED, CAROL)
    env.pds.page_size = 1
    service.configure(ALICE, env.settings, env.clock(), apps=["bluesky", "tangled"], enabled=True)
    assert backfill.burst(env.pds, env.clock, pages=2) == 3  # 2 of 3 bluesky pages; tangled's one page
    assert backfill.progress(ALICE) == {"listed": 1, "total": 2, "done": False, "records": 3}
    assert _q("SELECT COUNT(*) FROM sync_queue") == [(0,)]
    while backfill.burst(env.pds, env.clock, pages=2):
        pass
    assert backfill.progress(ALICE) == {"listed": 2, "total": 2, "done": True, "records": 4}
    assert sorted(r[:3] for r in env.queue()) == [("tangled", "follow", BOB), ("tangled", "follow", DAVE)]
    assert backfill.union(ALICE, env.clock()) == 0  # guarded: once per run


def test_listing_errors_back_off_and_resume_from_the_saved_cursor(env):
    from feather.sync import backfill, service
    from feather.sync.follow_writer import ServerError

    env.follow(ALICE, BSKY, BOB)
    service.configure(ALICE, env.settings, env.clock(), apps=["bluesky", "tangled"], enabled=True)
    original = env.pds.list_follows
    env.pds.list_follows = lambda *a: (_ for _ in ()).throw(ServerError("down", status=502))
    assert backfill.burst(env.pds, env.clock) == 0
    assert _q("SELECT attempts, not_before FROM sync_backfill_tasks ORDER BY id") == [(1, T0 + 60), (1, T0 + 60)]
    env.pds.list_follows = original
    assert backfill.burst(env.pds, env.clock) == 0  # not due yet
    env.clock.advance(60)
    assert backfill.burst(env.pds, env.clock) == 2
    assert backfill.progress(ALICE)["done"] is True


def test_sweep_propagates_a_missed_follow_and_drops_only_rows_last_seen_before_it_started(env):
    from feather.sync import backfill, queue, service

    env.enable(ALICE, ["bluesky", "tangled"])
    queue.upsert_mirror(ALICE, "bluesky", "3kgonegonego2", DAVE, env.clock() - 10)  # record no longer exists
    env.clock.advance(86400)
    env.follow(ALICE, BSKY, BOB)  # missed by the stream (never delivered)
    assert backfill.sweep_due(env.clock, env.settings) == [ALICE]
    queue.upsert_mirror(ALICE, "bluesky", "3knewduring22", CAROL, env.clock())  # arrived while listing
    while backfill.burst(env.pds, env.clock):
        pass
    # DAVE's row was stale: it no longer counts as a follow, but is kept until the cleanup, for a
    # delete event the stream may still bring (test_sync_replay: a sweep ahead of a lagging delete).
    assert sorted((r[2], r[4]) for r in env.mirror()) == [(BOB, "live"), (CAROL, "live"), (DAVE, "dropped")]
    assert queue.followed_on(ALICE, DAVE) == set()  # no longer a follow anywhere
    assert [r[:3] + (r[4],) for r in env.queue()] == [("tangled", "follow", BOB, "sweep")]
    assert _q("SELECT next_sweep_at FROM sync_sets") == [(env.clock() + 86400,)]
    # No delete came for DAVE's record within the replay window: the cleanup forgets it.
    assert service.cleanup(env.clock() + 2 * 86400)["tombstones"] == 0
    assert service.cleanup(env.clock() + 2 * 86400 + 1)["tombstones"] == 1
    assert sorted(r[2] for r in env.mirror()) == [BOB, CAROL]


def test_due_waits_are_queued_again_for_the_runner_to_recheck(env):
    from feather.sync import backfill, queue

    env.enable(ALICE, ["bluesky", "tangled"])
    queue.add_waiting(ALICE, "tangled", BOB, env.clock(), env.clock() + 100)
    assert backfill.recheck_waiting(env.clock() + 99) == 0
    assert backfill.recheck_waiting(env.clock() + 100) == 1
    assert [r[:3] + (r[4],) for r in env.queue()] == [("tangled", "follow", BOB, "recheck")]


def test_a_paused_sets_waits_are_not_queued_again_until_it_resumes(env):
    from feather.sync import backfill, queue
    from feather.sync.store import pause

    env.enable(ALICE, ["bluesky", "tangled"])
    queue.add_waiting(ALICE, "tangled", BOB, env.clock(), env.clock() + 100)
    pause(ALICE, "signed out", env.clock())
    assert backfill.recheck_waiting(env.clock() + 100) == 0
    assert (env.queue(), queue.waiting_count(ALICE)) == ([], 1)


def test_adding_an_app_does_not_queue_again_a_follow_waiting_for_a_profile(env):
    from feather.sync import backfill, queue, service

    env.follow(ALICE, BSKY, BOB)
    env.follow(ALICE, BSKY, CAROL)
    env.pds.add_profile(CAROL, "sh.tangled.actor.profile")
    env.enable(ALICE, ["bluesky", "tangled"])
    env.run()
    env.echo()
    assert queue.waiting_count(ALICE) == 1  # BOB has no Tangled profile yet: the recheck decides, not a backfill
    service.configure(ALICE, env.settings, env.clock(), apps=["bluesky", "tangled", "sifa"])
    while backfill.burst(env.pds, env.clock):
        pass
    assert sorted((r[0], r[2]) for r in env.queue() if r[5] == "pending") == [("sifa", BOB), ("sifa", CAROL)]


def test_cleanup_cancels_pending_rows_of_a_set_paused_thirty_days(env):
    from feather.sync import queue, service
    from feather.sync.store import pause

    env.enable(ALICE, ["bluesky", "tangled"])
    queue.enqueue_follow(ALICE, "tangled", BOB, "event", env.clock())
    pause(ALICE, "signed out", env.clock())
    assert service.cleanup(env.clock() + 30 * 86400 - 1)["cancelled"] == 0
    assert service.cleanup(env.clock() + 30 * 86400)["cancelled"] == 1
    assert [r[5] for r in env.queue()] == ["cancelled"]


def test_configure_validates_and_reports_the_api_state(env):
    from feather.sync import service

    with pytest.raises(ValueError, match="'myspace' is not an app"):
        service.configure(ALICE, env.settings, env.clock(), apps=["bluesky", "myspace"])
    with pytest.raises(ValueError, match="at least two apps"):
        service.configure(ALICE, env.settings, env.clock(), apps=["bluesky"], enabled=True)
    state = service.configure(ALICE, env.settings, env.clock(), apps=["tangled", "bluesky"], enabled=True)
    counters = {k: v for k, v in state.items() if k not in ("per_app", "next_write", "problems")}  # test_sync_status
    assert counters == {"enabled": True, "paused": False, "pause_reason": None, "apps": ["bluesky", "tangled"],
                        "available_apps": ["bluesky", "tangled", "sifa", "grain", "semble"],
                        "backfill": {"listed": 0, "total": 2, "done": False},
                        "queue": {"pending": 0, "done": 0, "failed": 0}, "waiting": 0}
    state = service.configure(ALICE, env.settings, env.clock(), paused=True)
    assert (state["paused"], state["pause_reason"]) == (True, "paused by you")


def test_removing_an_app_forgets_its_mirror_and_cancels_its_queue(env):
    from feather.sync import service

    env.enable(ALICE, ["bluesky", "tangled", "sifa"])
    env.follow(ALICE, BSKY, BOB)
    env.follow(ALICE, "id.sifa.graph.follow", CAROL)
    env.echo()
    service.configure(ALICE, env.settings, env.clock(), apps=["bluesky", "tangled"])
    assert [r[0] for r in env.mirror()] == ["bluesky"]
    assert sorted((r[0], r[2], r[5]) for r in env.queue()) == [
        ("bluesky", CAROL, "pending"), ("sifa", BOB, "cancelled"), ("tangled", BOB, "pending"),
        ("tangled", CAROL, "pending")]


def test_shards_hold_every_enabled_owner_paused_included_and_cursors_of_an_unknown_count_resume_from_the_oldest(env):
    from feather.jetstream.subscriptions import merge
    from feather.sync import service, subscriptions
    from feather.sync.store import pause, shard_of

    owners = [f"did:plc:owner{n}" for n in range(6)]
    for owner in owners:
        service.configure(owner, env.settings, env.clock(), apps=["bluesky", "tangled"], enabled=True)
    pause(owners[0], "signed out", env.clock())
    service.configure(owners[1], env.settings, env.clock(), enabled=False)
    sql.execute("INSERT INTO jetstream_cursor (name, time_us, updated_at) VALUES ('sync:0', 500,"
                " 0), ('sync:1', 900, 0)")
    settings = type(env.settings)({**env.settings.as_dict(), "SYNC_SHARD_COUNT": 3})
    subs = subscriptions(settings)
    assert [s.name for s in subs] == ["sync:0", "sync:1", "sync:2", "global"]
    # Saved before the count they were saved under was remembered: any owner may have moved into
    # any shard, so every shard goes back to the oldest (tests/test_sync_shards.py: a known count).
    assert _q("SELECT name, time_us FROM jetstream_cursor ORDER BY name") == [
        ("sync:0", 500), ("sync:1", 500), ("sync:2", 500)]
    assert _q("SELECT key, value FROM app_state") == [("sync_shard_count", "3")]
    members = {s.name: list(s.dids()) for s in subs[:3]}
    expected = {f"sync:{n}": sorted(o for o in owners if o != owners[1] and shard_of(o, 3) == n) for n in range(3)}
    assert members == expected
    assert subs[0].collections == ["app.bsky.graph.follow", "id.sifa.graph.follow", "network.cosmik.follow",
                                   "sh.tangled.graph.follow", "social.grain.graph.follow"]
    assert subs[0].max_lookback_us == 24 * 3_600_000_000
    assert subs[3].collections == ["id.sifa.profile.self", "sh.tangled.actor.profile", "social.grain.actor.profile"]
    from feather import features

    assert [s.name for s in merge(features.subscriptions(env.settings)) if s.name == "global"] == ["global"]


def test_a_gap_beyond_the_lookback_makes_every_sweep_due(env):
    from feather.sync import _on_gap, service

    service.configure(ALICE, env.settings, env.clock(), apps=["bluesky", "tangled"], enabled=True)
    assert _q("SELECT next_sweep_at FROM sync_sets") == [(T0 + 86400,)]
    _on_gap("sync:0")(123)
    assert _q("SELECT next_sweep_at FROM sync_sets") == [(0,)]


def test_resuming_a_paused_set_needs_the_write_permissions_and_pausing_it_does_not(env):
    from feather.sync import service

    env.enable(ALICE, ["bluesky", "tangled"])
    scopes = ["repo:app.bsky.graph.follow?action=create&action=delete",
              "repo:sh.tangled.graph.follow?action=create&action=delete"]
    assert service.check_change(ALICE, env.settings, paused=True) == []
    service.configure(ALICE, env.settings, env.clock(), paused=True)
    assert service.check_change(ALICE, env.settings, paused=False) == scopes
    assert service.check_change(ALICE, env.settings, paused=True) == []
