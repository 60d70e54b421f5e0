"""The budget docs/settings.md promises: by default sync spends at most 1,500 points an hour and 15,000 a
day per account; a create costs 3 points, a delete 1. Each number is pinned as the setting's
default and as what the runner, under the instance's own settings, spends and refuses at the edge
(one point more or less anywhere turns an edge the other way)."""
from __future__ import annotations

import pytest

from tests.test_sync_kit import ALICE, BOB, BSKY, env  # noqa: F401

from feather import sql

TANGLED_PROFILE = "sh.tangled.actor.profile"


def _spent_before(env, secs_ago: int, points: int) -> None:
    """Points alice spent earlier (one earlier write's worth, as the runner records it)."""
    from feather.sync.store import record_activity

    record_activity(ALICE, env.clock() - secs_ago, "tangled", "follow", "did:plc:earlier", points, None)


def _one_follow_to_copy(env) -> None:
    env.enable(ALICE, ["bluesky", "tangled"])
    env.pds.add_profile(BOB, TANGLED_PROFILE)
    env.follow(ALICE, BSKY, BOB)
    env.echo()


def _one_unfollow_to_copy(env) -> None:
    """Bob is followed on both apps (sync wrote the Tangled one), then unfollowed on Bluesky."""
    _one_follow_to_copy(env)
    assert env.run() == 1
    env.echo()
    env.clock.advance(86400)  # the follow's 3 points leave both windows
    env.pds.user_unfollow(ALICE, BSKY, next(iter(env.pds.records(ALICE, BSKY))))
    env.echo()


def test_the_default_budget_is_1500_points_an_hour_and_15000_a_day(tmp_path):
    from feather.config import load_settings
    from feather.sync.pacer import Budget

    settings = load_settings({"FEATHERREADER_ENV": "test", "FEATHERREADER_DATA_DIR": str(tmp_path)})
    assert (settings.sync_hourly_points, settings.sync_daily_points) == (1500, 15000)
    assert Budget.from_settings(settings) == Budget(1500, 15000, None)


def test_the_kit_runs_under_the_instances_default_budget(env):
    from feather.sync.pacer import Budget

    assert env.runner.budget == Budget(1500, 15000, None)


def test_a_follow_costs_3_points_and_an_unfollow_1(env):
    _one_unfollow_to_copy(env)
    assert env.run() == 1
    assert sql.rows("SELECT kind, points FROM sync_activity WHERE app = 'tangled' ORDER BY id") == [
        ("follow", 3), ("unfollow", 1)]


@pytest.mark.parametrize("spent, written", [(1497, 1), (1498, 0)])
def test_a_follow_may_bring_the_hour_to_1500_points_and_not_past_it(env, spent, written):
    _one_follow_to_copy(env)
    _spent_before(env, 60, spent)
    assert env.run() == written


@pytest.mark.parametrize("spent, written", [(1499, 1), (1500, 0)])
def test_an_unfollow_may_bring_the_hour_to_1500_points_and_not_past_it(env, spent, written):
    _one_unfollow_to_copy(env)
    _spent_before(env, 60, spent)
    assert env.run() == written


@pytest.mark.parametrize("spent, written", [(14997, 1), (14998, 0)])
def test_a_follow_may_bring_the_day_to_15000_points_and_not_past_it(env, spent, written):
    _one_follow_to_copy(env)
    _spent_before(env, 7200, spent)  # two hours ago: inside the day, outside the hour
    assert env.run() == written


@pytest.mark.parametrize("spent, written", [(14999, 1), (15000, 0)])
def test_an_unfollow_may_bring_the_day_to_15000_points_and_not_past_it(env, spent, written):
    _one_unfollow_to_copy(env)
    _spent_before(env, 7200, spent)
    assert env.run() == written
