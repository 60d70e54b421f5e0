"""The Jetstream handler, branch by branch (database only; no runner involved)."""
from __future__ import annotations

from feather.jetstream.events import CommitEvent
from tests.test_sync_kit import ALICE, BOB, BSKY, CAROL, SEMBLE, SIFA, TANGLED, env  # noqa: F401


def test_follow_create_mirrors_it_and_queues_a_follow_on_every_other_app(env):
    env.enable(ALICE, ["bluesky", "tangled", "sifa"])
    env.follow(ALICE, BSKY, BOB, rkey="3kaaaaaaaaaa2")
    env.echo()
    assert env.mirror() == [("bluesky", "3kaaaaaaaaaa2", BOB, 0, "live")]
    assert env.queue() == [("tangled", "follow", BOB, None, "event", "pending"),
                           ("sifa", "follow", BOB, None, "event", "pending")]


def test_follow_create_skips_apps_that_already_follow_the_subject(env):
    env.enable(ALICE, ["bluesky", "tangled", "sifa"])
    env.follow(ALICE, TANGLED, BOB)
    env.echo()
    env.follow(ALICE, BSKY, BOB)
    env.echo()
    assert [(r[0], r[2]) for r in env.queue()] == [("bluesky", BOB), ("sifa", BOB)]


def test_replayed_create_changes_nothing(env):
    env.enable(ALICE, ["bluesky", "tangled"])
    event = env.follow(ALICE, BSKY, BOB)
    env.echo()
    env.deliver(event)
    assert len(env.queue()) == 1
    assert len(env.mirror()) == 1


def test_echo_of_sync_own_write_confirms_the_pending_mirror_row_and_propagates_nothing(env):
    from feather.sync import queue

    env.enable(ALICE, ["bluesky", "tangled", "sifa"])
    queue.upsert_mirror(ALICE, "tangled", "3kbbbbbbbbbb2", BOB, env.clock(), by_sync=True, state="pending")
    env.deliver(CommitEvent(ALICE, 1, "create", TANGLED, "3kbbbbbbbbbb2", {"subject": BOB}, "bafyx"))
    assert env.mirror() == [("tangled", "3kbbbbbbbbbb2", BOB, 1, "live")]
    assert env.queue() == []


def test_follow_of_an_app_outside_the_set_or_a_disabled_owner_is_ignored(env):
    env.enable(ALICE, ["bluesky", "tangled"])
    env.follow(ALICE, SIFA, BOB)
    env.follow(CAROL, BSKY, BOB)
    env.echo()
    assert env.mirror() == [] and env.mirror(CAROL) == []
    assert env.queue() == []


def test_semble_follow_of_a_collection_uri_is_not_synced(env):
    env.enable(ALICE, ["bluesky", "semble"])
    env.follow(ALICE, SEMBLE, "at://did:plc:bob/network.cosmik.collection/3kcoll")
    env.echo()
    assert env.mirror() == [] and env.queue() == []
    env.follow(ALICE, SEMBLE, BOB)
    env.echo()
    assert [(r[0], r[1], r[2]) for r in env.queue()] == [("bluesky", "follow", BOB)]


def test_delete_queues_an_unfollow_for_each_mirrored_record_on_other_apps_and_cancels_follows(env):
    env.enable(ALICE, ["bluesky", "tangled", "sifa"])
    env.follow(ALICE, TANGLED, BOB, rkey="3ktttttttttt2")
    env.follow(ALICE, BSKY, BOB, rkey="3kbbbbbbbbbb2")
    env.echo()  # sifa follow queued (twice deduplicated), tangled follow from the bluesky side skipped
    env.pds.user_unfollow(ALICE, BSKY, "3kbbbbbbbbbb2")
    env.echo()
    assert env.mirror() == [("tangled", "3ktttttttttt2", BOB, 0, "live")]
    assert env.queue() == [("bluesky", "follow", BOB, None, "event", "cancelled"),
                           ("sifa", "follow", BOB, None, "event", "cancelled"),
                           ("tangled", "unfollow", BOB, "3ktttttttttt2", "event", "pending")]


def test_deleting_one_of_two_duplicate_records_propagates_nothing(env):
    env.enable(ALICE, ["bluesky", "tangled"])
    env.follow(ALICE, BSKY, BOB, rkey="3kaaaaaaaaaa2")
    env.follow(ALICE, BSKY, BOB, rkey="3kaaaaaaaaab2")
    env.follow(ALICE, TANGLED, BOB, rkey="3ktttttttttt2")
    env.echo()
    env.pds.user_unfollow(ALICE, BSKY, "3kaaaaaaaaaa2")
    env.echo()
    assert [r for r in env.queue() if r[1] == "unfollow"] == []
    assert [r[1] for r in env.mirror()] == ["3kaaaaaaaaab2", "3ktttttttttt2"]


def test_delete_purges_the_subjects_waits(env):
    from feather.sync import queue

    env.enable(ALICE, ["bluesky", "tangled"])
    env.follow(ALICE, BSKY, BOB, rkey="3kaaaaaaaaaa2")
    env.echo()
    queue.add_waiting(ALICE, "tangled", BOB, env.clock(), env.clock() + 99)
    env.pds.user_unfollow(ALICE, BSKY, "3kaaaaaaaaaa2")
    env.echo()
    assert queue.waiting_count(ALICE) == 0


def test_delete_of_an_unknown_rkey_and_the_echo_of_sync_own_delete_propagate_nothing(env):
    from feather.sync import queue

    env.enable(ALICE, ["bluesky", "tangled"])
    env.deliver(CommitEvent(ALICE, 1, "delete", BSKY, "3knotmirrored", None, None))
    queue.upsert_mirror(ALICE, "tangled", "3ktttttttttt2", BOB, env.clock(), by_sync=True, state="deleting")
    queue.upsert_mirror(ALICE, "bluesky", "3kbbbbbbbbbb2", BOB, env.clock())
    env.deliver(CommitEvent(ALICE, 2, "delete", TANGLED, "3ktttttttttt2", None, None))
    assert env.queue() == []
    assert env.mirror() == [("bluesky", "3kbbbbbbbbbb2", BOB, 0, "live")]


def test_late_create_echo_of_a_record_sync_already_deleted_is_not_a_new_follow(env):
    from feather.sync import queue

    env.enable(ALICE, ["bluesky", "tangled"])
    queue.upsert_mirror(ALICE, "tangled", "3ktttttttttt2", BOB, env.clock(), by_sync=True, state="gone")
    env.deliver(CommitEvent(ALICE, 1, "create", TANGLED, "3ktttttttttt2", {"subject": BOB}, "bafyx"))
    assert env.queue() == []
    assert env.mirror() == [("tangled", "3ktttttttttt2", BOB, 1, "gone")]


def test_profile_create_queues_a_follow_for_every_enabled_owner_waiting_on_that_subject(env):
    from feather.sync import queue, service

    env.enable(ALICE, ["bluesky", "tangled"])
    env.enable(CAROL, ["bluesky", "tangled"])
    service.configure("did:plc:off", env.settings, env.clock(), apps=["bluesky", "tangled"])
    for owner in (ALICE, CAROL, "did:plc:off"):
        queue.add_waiting(owner, "tangled", BOB, env.clock(), env.clock() + 99)
    env.pds.add_profile(BOB, "sh.tangled.actor.profile")
    env.echo()
    assert env.queue(ALICE) == [("tangled", "follow", BOB, None, "waitlist", "pending")]
    assert env.queue(CAROL) == [("tangled", "follow", BOB, None, "waitlist", "pending")]
    assert (queue.waiting_count(ALICE), queue.waiting_count("did:plc:off")) == (0, 1)


def test_profile_update_or_other_rkey_releases_nobody(env):
    from feather.sync import queue

    env.enable(ALICE, ["bluesky", "tangled"])
    queue.add_waiting(ALICE, "tangled", BOB, env.clock(), env.clock() + 99)
    env.deliver(CommitEvent(BOB, 1, "update", "sh.tangled.actor.profile", "self", {}, "bafy"),
                CommitEvent(BOB, 2, "create", "sh.tangled.actor.profile", "other", {}, "bafy"))
    assert queue.waiting_count(ALICE) == 1
