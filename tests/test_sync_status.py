"""What the owner is told (feather/sync/status.py): listing progress in records, when the next write
happens and why it waits, failures with their reason and next retry, activity in plain words.

The clock is fake: T0 is 2027-01-15 08:00:00 UTC, so every time below is exact.
"""
from __future__ import annotations

import pytest

from tests.test_sync_kit import ALICE, BOB, BSKY, CAROL, T0, Env

from feather import sql

INTERNAL_WORDS = ("backfill_done", "rate_limited", "sending", "did:plc:", "1 follows", " retry.")


@pytest.fixture
def make_env(make_app):
    from feather.db import db

    contexts = []

    def make(**settings) -> Env:
        app = make_app(**settings)
        ctx = app.app_context()
        ctx.push()
        db.connect(reuse_if_open=True)
        contexts.append(ctx)
        cfg = app.config["FEATHER"]
        return Env(app, hourly=cfg.sync_hourly_points, daily=cfg.sync_daily_points, cap=cfg.sync_app_daily_follow_cap)

    yield make
    for ctx in contexts:
        db.close()
        ctx.pop()


@pytest.fixture
def env(make_env):
    return make_env()


def overview(env: Env, owner=ALICE) -> dict:
    from feather.sync import status
    from feather.sync.store import get_set

    return status.overview(owner, get_set(owner), env.settings, env.clock())


def app_row(env: Env, key: str) -> dict:
    return next(a for a in overview(env)["per_app"] if a["app"] == key)


def name(did: str, handle: str, display: str | None = None, now: int = T0) -> None:
    """A filled people-cache row, as the sync-people job leaves it."""

    sql.execute("INSERT INTO sync_people (did, handle, display_name, wanted_at, fetched_at, next_fetch_at)"
                " VALUES (?, ?, ?, ?, ?, ?)", (did, handle, display, now, now, now + 86400))


def enable_with_one_follow_to_write(env: Env) -> None:
    """alice follows bob on Bluesky; bob has a Tangled profile: one follow to write on Tangled."""
    env.pds.user_follow(ALICE, BSKY, BOB)
    env.pds.add_profile(BOB, "sh.tangled.actor.profile")
    env.enable(ALICE, ["bluesky", "tangled"])
    name(BOB, "bob.test", "Bob")


# --- words
@pytest.mark.parametrize("at, expect", [
    (T0 + 300, "08:05 UTC (in 5 minutes)"),
    (T0 + 30, "08:00 UTC (in under a minute)"),
    (T0 + 60, "08:01 UTC (in 1 minute)"),
    (T0 - 7200, "06:00 UTC (2 hours ago)"),
    (T0 + 20 * 3600, "16 Jan, 04:00 UTC (in 20 hours)"),
    (T0 + 30 * 3600, "16 Jan, 14:00 UTC (in 30 hours)"),
    (T0 + 36 * 3600, "16 Jan, 20:00 UTC (in 2 days)"),
    (T0 + 3 * 86400, "18 Jan, 08:00 UTC (in 3 days)"),
    (T0 - 30 * 86400, "16 Dec 2026, 08:00 UTC (30 days ago)"),
    (T0, "08:00 UTC (just now)"),
])
def test_times_read_as_utc_clock_time_today_with_the_date_otherwise_and_relative(at, expect):
    from feather.sync.status import when

    assert when(at, T0) == expect


def test_counts_are_pluralised_and_grouped_by_thousands():
    from feather.sync.status import app_names, plural

    assert [plural(1, "follow"), plural(2, "follow"), plural(0, "follow"), plural(20000, "follow"),
            plural(1, "try", "tries"), plural(3, "try", "tries")] == [
        "1 follow", "2 follows", "0 follows", "20,000 follows", "1 try", "3 tries"]
    assert (app_names(["bluesky"]), app_names(["bluesky", "tangled"]), app_names(["bluesky", "sifa", "grain"])) == (
        "Bluesky", "Bluesky and Tangled", "Bluesky, Sifa and Grain")


# --- listing progress, in records
def test_listing_progress_counts_records_against_the_previews_figure(env):
    from feather.sync import backfill, service, status

    status.remember_following(ALICE, {"complete": True, "apps": [
        {"app": "bluesky", "following": 20000}, {"app": "tangled", "following": 0}]}, T0 - 60)
    service.configure(ALICE, env.settings, T0, apps=["bluesky", "tangled"], enabled=True)
    sql.execute("UPDATE sync_backfill_tasks SET listed = 3200 WHERE app = 'bluesky'")
    assert app_row(env, "bluesky")["listing"] == {
        "status": "listing", "records": 3200, "expected": 20000, "expected_complete": True, "measured_at": T0 - 60,
        "attempts": 0, "error": None, "retry_at": None, "summary": "3,200 of about 20,000 follows listed"}
    assert app_row(env, "tangled")["listing"]["summary"] == "0 follows listed so far"  # 0 expected: nothing to say
    # A preview that stopped listing early only knows a lower bound.
    status.remember_following(ALICE, {"complete": False, "apps": [{"app": "bluesky", "following": 5000}]}, T0)
    assert app_row(env, "bluesky")["listing"]["summary"] == "3,200 of more than 5,000 follows listed"
    # No preview figure (a script enabled without one): records so far.
    sql.execute("DELETE FROM sync_app_counts")
    assert app_row(env, "bluesky")["listing"]["summary"] == "3,200 follows listed so far"
    env.pds.user_follow(ALICE, BSKY, BOB)
    sql.execute("UPDATE sync_backfill_tasks SET listed = 0")
    backfill.burst(env.pds, env.clock)
    assert [a["listing"]["summary"] for a in overview(env)["per_app"]] == ["1 follow listed", "0 follows listed"]


def test_a_listing_that_fails_is_shown_with_its_reason_and_next_try(env):
    from feather.sync import backfill, service
    from feather.sync.follow_writer import ServerError

    class Failing:
        def list_follows(self, owner, collection, cursor):
            raise ServerError("HTTP 502 Bad Gateway", status=502)

    service.configure(ALICE, env.settings, T0, apps=["bluesky", "tangled"], enabled=True)
    backfill.burst(Failing(), env.clock)
    env.clock.advance(30)
    state = overview(env)
    assert state["problems"][0] == {
        "kind": "listing", "app": "bluesky", "subject": None, "attempts": 1, "error": "HTTP 502 Bad Gateway",
        "retry_at": T0 + 60,
        "message": "Could not list your Bluesky follows (tried 1 time): HTTP 502 Bad Gateway. Trying again at"
                   " 08:01 UTC (in under a minute)."}
    assert [p["app"] for p in state["problems"]] == ["bluesky", "tangled"]
    assert app_row(env, "bluesky")["listing"]["error"] == "HTTP 502 Bad Gateway"


# --- the next write and why it waits
def test_a_follow_ready_to_go_is_written_within_seconds(env):
    enable_with_one_follow_to_write(env)
    state = overview(env)
    assert state["next_write"] == {"at": T0, "reason": "ready", "message": "Next write within a few seconds.",
                                   "subject": BOB, "subject_name": "Bob (@bob.test)", "app": "tangled",
                                   "name": "Tangled"}
    assert app_row(env, "tangled")["queue"] | {"next": None} == {
        "pending": 1, "follows": 1, "unfollows": 0, "failed": 0, "next": None, "summary": "1 follow to write."}
    assert app_row(env, "bluesky")["queue"]["summary"] == "Nothing waiting to be written."


def test_an_exhausted_hourly_budget_names_when_enough_points_age_out(make_env):
    from feather.sync.store import record_activity

    env = make_env(SYNC_HOURLY_POINTS="9")
    enable_with_one_follow_to_write(env)
    for ago in (3000, 1000, 10):  # 9 points spent inside the hour; the oldest 3 leave at T0 + 600
        record_activity(ALICE, T0 - ago, "sifa", "follow", CAROL, 3, None)
    nxt = overview(env)["next_write"]
    assert (nxt["at"], nxt["reason"], nxt["message"]) == (
        T0 + 600, "budget",
        "Feather's hourly write budget for your account (9 points) is used up until 08:10 UTC (in 10 minutes).")
    env.clock.advance(600)  # the runner agrees: at that second the follow goes
    assert env.run() == 1 and overview(env)["next_write"] is None


def test_the_daily_budget_decides_when_it_frees_later(make_env):
    from feather.sync.store import record_activity

    env = make_env(SYNC_DAILY_POINTS="6")
    enable_with_one_follow_to_write(env)
    record_activity(ALICE, T0 - 80000, "sifa", "follow", CAROL, 3, None)
    record_activity(ALICE, T0 - 100, "sifa", "follow", CAROL, 3, None)
    nxt = overview(env)["next_write"]
    assert (nxt["at"], nxt["reason"]) == (T0 - 80000 + 86400, "budget")
    assert nxt["message"] == ("Feather's daily write budget for your account (6 points) is used up until"
                              " 09:46 UTC (in 2 hours).")


def test_a_429_park_says_until_when_the_pds_asked_to_wait(env):
    enable_with_one_follow_to_write(env)
    env.pds.faults.append("429")  # MemoryPds asks for 120 s
    env.run()
    nxt = overview(env)["next_write"]
    assert (nxt["at"], nxt["reason"], nxt["message"]) == (
        T0 + 121, "rate_limited", "Your PDS asked Feather to wait until 08:02 UTC (in 2 minutes).")


def test_a_failed_write_shows_its_reason_its_try_and_the_next_retry(env):
    enable_with_one_follow_to_write(env)
    env.pds.faults.append("500")
    env.run()
    state = overview(env)
    message = ("Could not follow Bob (@bob.test) on Tangled (try 1 of 5): internal error. Trying again at"
               " 08:01 UTC (in 1 minute).")
    assert (state["next_write"]["reason"], state["next_write"]["message"]) == ("backoff", message)
    assert state["problems"] == [{"kind": "write", "app": "tangled", "subject": BOB, "subject_name": "Bob (@bob.test)",
                                  "attempts": 1, "error": "internal error", "retry_at": T0 + 60, "message": message}]


def test_a_follow_that_failed_for_good_stays_listed_with_its_reason(env):
    enable_with_one_follow_to_write(env)
    for _ in range(5):
        env.pds.faults.append("500")
        env.run()
        env.clock.advance(3600)
    state = overview(env)
    assert state["next_write"] is None
    assert state["problems"][0]["message"] == ("Could not follow Bob (@bob.test) on Tangled: internal error."
                                               " Feather gave up after 5 tries.")
    assert app_row(env, "tangled")["queue"]["failed"] == 1


def test_a_follow_waits_for_the_listing_of_its_app(env):
    from feather.sync import service

    enable_with_one_follow_to_write(env)
    service.configure(ALICE, env.settings, T0, apps=["bluesky", "tangled", "sifa"])  # sifa: a new listing
    sql.execute("INSERT INTO sync_queue (owner_did, app, kind, subject, origin, status, created_at, updated_at)"
                " VALUES (?, 'sifa', 'follow', ?, 'event', 'pending', ?, ?)", (ALICE, BOB, T0, T0))
    nxt = app_row(env, "sifa")["queue"]["next"]
    assert (nxt["at"], nxt["reason"], nxt["message"]) == (
        None, "listing", "Waits until your Sifa follows are listed, so nobody is followed twice.")
    assert overview(env)["next_write"]["app"] == "tangled"  # the soonest write comes first


def test_a_paused_set_says_why_and_a_leased_lane_is_writing_now(env):
    from feather.sync import service

    enable_with_one_follow_to_write(env)
    sql.execute("INSERT INTO sync_lanes (owner_did, app, leased_by, lease_until) VALUES (?, 'tangled', 'w1', ?)",
                (ALICE, T0 + 30))
    assert overview(env)["next_write"]["message"] == "Writing now: follow Bob (@bob.test) on Tangled."
    service.configure(ALICE, env.settings, T0, paused=True)
    nxt = overview(env)["next_write"]
    assert (nxt["at"], nxt["reason"], nxt["message"]) == (None, "paused", "You paused sync.")


def test_follows_waiting_for_a_profile_are_counted_with_the_next_check(env):
    env.pds.user_follow(ALICE, BSKY, BOB)
    env.pds.user_follow(ALICE, BSKY, CAROL)
    env.enable(ALICE, ["bluesky", "tangled", "sifa"])
    env.run()
    assert app_row(env, "tangled")["waiting"] == {
        "count": 2, "next_check_at": T0 + 7 * 86400,
        "message": "2 people have no Tangled profile yet: Feather follows them there as soon as they create one"
                   " (next check 22 Jan, 08:00 UTC (in 7 days))."}


# --- activity
def test_activity_is_plain_sentences_with_names_and_hides_no_attempt(env):
    from feather.sync import service
    from feather.sync.store import record_activity

    enable_with_one_follow_to_write(env)
    env.pds.faults.append("500")
    env.run()  # try 1 fails
    env.clock.advance(60)
    env.run()  # try 2 succeeds
    record_activity(ALICE, env.clock(), "tangled", "sending", CAROL, 3, None)
    record_activity(ALICE, env.clock(), "sifa", "error", CAROL, 0, "follow: RuntimeError: no app context")
    record_activity(ALICE, env.clock(), "sifa", "failed", CAROL, 0, "unfollow: HTTP 400 InvalidRequest")
    record_activity(ALICE, env.clock(), "grain", "waiting", CAROL, 0, None)
    service.configure(ALICE, env.settings, env.clock(), paused=True)
    words = [a["message"] for a in service.activity(ALICE, 50, now=env.clock())]
    assert words == [
        "You paused sync.",
        "Someone (name not looked up yet) has no Grain profile yet; Feather follows them there when they join.",
        "Could not unfollow someone (name not looked up yet) on Sifa: HTTP 400 InvalidRequest. Feather gave up.",
        "Could not follow someone (name not looked up yet) on Sifa: something went wrong inside Feather"
        " (RuntimeError: no app context); nothing reached your PDS.",
        "Sending to your PDS: follow someone (name not looked up yet) on Tangled.",
        "Followed Bob (@bob.test) on Tangled.",
        "Could not follow Bob (@bob.test) on Tangled (try 1 of 5): internal error.",
        "Finished listing your follows: 1 follow to write.",
        "Sync turned on for Bluesky and Tangled.",
    ]
    assert not [w for w in words for bad in INTERNAL_WORDS if bad in w]


def test_the_newest_retry_names_its_reason_and_when_it_tries_again(env):
    from feather.sync import service

    enable_with_one_follow_to_write(env)
    for _ in range(2):
        env.pds.faults.append("500")
        env.run()
        env.clock.advance(61)
    env.clock.advance(-61)
    retries = [a["message"] for a in service.activity(ALICE, 50, now=env.clock()) if a["kind"] == "retry"]
    assert retries == [
        "Could not follow Bob (@bob.test) on Tangled (try 2 of 5): internal error. Trying again at 08:03 UTC"
        " (in 2 minutes).",
        "Could not follow Bob (@bob.test) on Tangled (try 1 of 5): internal error.",
    ]


def test_a_rate_limit_row_says_until_when(env):
    from feather.sync import service

    enable_with_one_follow_to_write(env)
    env.pds.faults.append("429")
    env.run()
    assert service.activity(ALICE, 1, now=env.clock())[0]["message"] == \
        "Your PDS asked Feather to slow down until 08:02 UTC."


def test_a_lane_whose_lease_ends_this_second_is_still_writing_now(env):
    enable_with_one_follow_to_write(env)
    sql.execute("INSERT INTO sync_lanes (owner_did, app, leased_by, lease_until) VALUES (?, 'tangled', 'w1', ?)",
                (ALICE, T0))
    assert overview(env)["next_write"]["reason"] == "writing"
    env.clock.advance(1)
    assert overview(env)["next_write"]["reason"] == "ready"


def test_spending_exactly_up_to_the_hourly_budget_is_allowed_now(make_env):
    from feather.sync.store import record_activity

    env = make_env(SYNC_HOURLY_POINTS="9")
    enable_with_one_follow_to_write(env)
    record_activity(ALICE, T0 - 3000, "sifa", "follow", CAROL, 3, None)
    record_activity(ALICE, T0 - 10, "sifa", "follow", CAROL, 3, None)  # 6 spent, the follow costs 3: 9
    nxt = overview(env)["next_write"]
    assert (nxt["at"], nxt["reason"]) == (T0, "ready")


def test_the_daily_follow_cap_frees_when_the_cap_th_newest_follow_is_a_day_old(make_env):
    from feather.sync.store import record_activity

    env = make_env(SYNC_APP_DAILY_FOLLOW_CAP="2")
    enable_with_one_follow_to_write(env)
    for ago in (3000, 2000, 1000):  # three follows on Tangled today; a cap of 2
        record_activity(ALICE, T0 - ago, "tangled", "follow", CAROL, 0, None)
    nxt = overview(env)["next_write"]
    assert (nxt["at"], nxt["reason"]) == (T0 - 2000 + 86400, "daily_cap")
