"""Pruning (spec "Pruning", notes §6): cutoff delete, sliced sweeps, the gates and the tick."""
from __future__ import annotations

import pytest

from feather import sql
from feather.db import db
from feather.feeds.tasks import prune
from tests.fixtures.feeds import oracle
from tests.fixtures.feeds.feedkit import BASE_US, FakeSources, feeds_app, follow, ingest, post, rows, toml

POST = "app.bsky.feed.post"
HOUR_MS = 3_600_000


@pytest.fixture
def app(make_app, tmp_path):
    return feeds_app(make_app, tmp_path, toml(max_items=3), sources=FakeSources(),
                     FEED_PRUNE_SWEEP_ACTORS=2)


def put(app, actor, times, collection=POST, tag=""):
    with app.app_context(), db.connection_context(), db.atomic():
        for i, t in enumerate(times):
            sql.execute("INSERT INTO feed_items (actor, uri, collection, time_us) VALUES (?, ?, ?, ?)",
                        (actor, f"at://did:plc:x/{collection}/{actor[-4:]}{tag}{i:03d}", collection, t))


def times_of(app, actor):
    return [r[0] for r in rows(app, "SELECT time_us FROM feed_items WHERE actor = ? ORDER BY time_us DESC", (actor,))]


def call(app, fn, *args):
    with app.app_context(), db.connection_context():
        return fn(*args)


def config_settings(app):
    return app.extensions["feeds"], app.config["FEATHER"]


def test_cutoff_keeps_exactly_the_newest_cap_rows_and_returns_the_count_deleted(app):
    put(app, "did:plc:a001", [10, 20, 30, 40, 50, 60, 70])
    assert call(app, prune.prune_actor, "did:plc:a001", {POST: 3}) == 4
    assert times_of(app, "did:plc:a001") == [70, 60, 50]


def test_cutoff_keeps_rows_tied_with_the_cutoff(app):
    put(app, "did:plc:a001", [10, 20, 50, 50, 50, 60])
    assert call(app, prune.prune_actor, "did:plc:a001", {POST: 3}) == 2
    assert times_of(app, "did:plc:a001") == [60, 50, 50, 50]  # 4 rows: ties with the 3rd newest stay


@pytest.mark.parametrize("count", [0, 2, 3])
def test_an_actor_at_or_under_cap_loses_nothing(app, count):
    put(app, "did:plc:a001", list(range(count)))
    assert call(app, prune.prune_actor, "did:plc:a001", {POST: 3}) == 0
    assert len(times_of(app, "did:plc:a001")) == count


def test_cutoff_is_per_collection(app):
    put(app, "did:plc:a001", [1, 2, 3, 4, 5])
    put(app, "did:plc:a001", [1, 2, 3, 4, 5], collection="app.bsky.feed.repost")
    assert call(app, prune.prune_actor, "did:plc:a001", {POST: 2, "app.bsky.feed.repost": 4}) == 4
    assert rows(app, "SELECT collection, count(*) FROM feed_items GROUP BY collection ORDER BY collection") == [
        ("app.bsky.feed.post", 2), ("app.bsky.feed.repost", 4)]


def test_sweeps_page_by_actor_and_resume_from_the_cursor(app):
    actors = [f"did:plc:a00{i}" for i in range(1, 6)]
    for a in actors:
        put(app, a, [1, 2, 3, 4, 5])
    caps = {POST: 3}
    first = call(app, prune.sweep, caps, None, 2)
    assert first == prune.SweepResult(4, "did:plc:a002", False)
    assert [len(times_of(app, a)) for a in actors] == [3, 3, 5, 5, 5]
    second = call(app, prune.sweep, caps, first.next_cursor, 2)
    assert second == prune.SweepResult(4, "did:plc:a004", False)
    third = call(app, prune.sweep, caps, second.next_cursor, 2)
    assert third == prune.SweepResult(2, None, True)
    assert [len(times_of(app, a)) for a in actors] == [3, 3, 3, 3, 3]


def test_a_page_of_exactly_budget_actors_is_not_done_and_the_next_is(app):
    for a in ("did:plc:a001", "did:plc:a002"):
        put(app, a, [1])
    first = call(app, prune.sweep, {POST: 3}, None, 2)
    assert first == prune.SweepResult(0, "did:plc:a002", False)
    assert call(app, prune.sweep, {POST: 3}, first.next_cursor, 2) == prune.SweepResult(0, None, True)


def test_no_caps_or_no_budget_is_done_at_once(app):
    put(app, "did:plc:a001", [1, 2, 3, 4])
    assert call(app, prune.sweep, {}, None, 5) == prune.SweepResult(0, None, True)
    assert call(app, prune.sweep, {POST: 1}, None, 0) == prune.SweepResult(0, None, True)


def test_prune_all_loops_slices_to_the_end(app):
    for i in range(1, 8):
        put(app, f"did:plc:a00{i}", [1, 2, 3, 4, 5, 6])
    assert call(app, oracle.prune_all, {POST: 2}) == 28


def test_run_slice_persists_the_rolling_cursor_and_clears_it_on_wrap(app):
    for i in range(1, 4):
        put(app, f"did:plc:a00{i}", [1, 2, 3, 4])
    assert call(app, prune.run_slice, {POST: 3}, 2).next_cursor == "did:plc:a002"
    assert rows(app, "SELECT actor FROM feed_prune_state") == [("did:plc:a002",)]
    assert call(app, prune.run_slice, {POST: 3}, 2) == prune.SweepResult(1, None, True)
    assert rows(app, "SELECT actor FROM feed_prune_state") == [(None,)]


def set_state(app, **values):
    sets = ", ".join(f"{k} = ?" for k in values)
    with app.app_context(), db.connection_context():
        sql.execute(f"UPDATE feed_prune_state SET {sets} WHERE id = 1", tuple(values.values()))


def test_recovery_gate_runs_when_due_and_not_otherwise(app):
    config, settings = config_settings(app)
    put(app, "did:plc:a001", [1, 2, 3, 4, 5])
    t0 = 10 * 24 * HOUR_MS
    set_state(app, last_full_pass_ms=t0)
    assert call(app, prune.prune_tick, config, settings, t0 + 6 * HOUR_MS - 1) is None
    assert len(times_of(app, "did:plc:a001")) == 5
    result = call(app, prune.prune_tick, config, settings, t0 + 6 * HOUR_MS)
    assert result == prune.SweepResult(2, None, True)
    assert rows(app, "SELECT last_full_pass_ms FROM feed_prune_state") == [(t0 + 6 * HOUR_MS,)]


def test_a_feed_touching_tick_runs_a_slice_even_when_recovery_is_not_due(app):
    config, settings = config_settings(app)
    put(app, "did:plc:a001", [1, 2, 3, 4, 5])
    set_state(app, last_full_pass_ms=1_000_000, last_slice_ms=0, dirty=1)
    assert call(app, prune.prune_tick, config, settings, 1_000_001) == prune.SweepResult(2, None, True)


def test_idle_stream_recovery_trims_rows_that_went_over_cap_without_ingest(app):
    """A lowered cap or a bulk import: nothing is ingested, the tick still cleans up when due."""
    config, settings = config_settings(app)
    put(app, "did:plc:a001", [1, 2, 3, 4, 5, 6])
    now = 50 * HOUR_MS
    set_state(app, last_full_pass_ms=now - 6 * HOUR_MS + 1)
    assert call(app, prune.prune_tick, config, settings, now) is None  # not dirty, not due
    assert call(app, prune.prune_tick, config, settings, now + 1) == prune.SweepResult(3, None, True)
    assert times_of(app, "did:plc:a001") == [6, 5, 4]


def test_ingest_dirties_the_flag_and_the_tick_slices_at_most_once_per_10_seconds(app):
    config, settings = config_settings(app)
    now = 100 * HOUR_MS
    set_state(app, last_full_pass_ms=now, last_slice_ms=now - 10_000)
    ingest(app, [follow("did:plc:a001", "f1", "did:plc:c001")])
    ingest(app, [post("did:plc:c001", f"p{i}", BASE_US + i) for i in range(5)])
    assert rows(app, "SELECT dirty FROM feed_prune_state") == [(1,)]
    assert call(app, prune.prune_tick, config, settings, now) == prune.SweepResult(2, None, True)
    assert rows(app, "SELECT dirty, last_slice_ms FROM feed_prune_state") == [(0, now)]
    assert len(times_of(app, "did:plc:a001")) == 3
    ingest(app, [post("did:plc:c001", f"q{i}", BASE_US + 100 + i) for i in range(2)])
    assert call(app, prune.prune_tick, config, settings, now + 9_999) is None  # dirty, but < 10 s
    assert rows(app, "SELECT dirty FROM feed_prune_state") == [(1,)]  # kept for the next tick
    assert call(app, prune.prune_tick, config, settings, now + 10_000) == prune.SweepResult(2, None, True)


# --- the recovery clock through prune_tick, the scheduled job's own entry point -----------------

FIVE = [f"did:plc:a00{i}" for i in range(1, 6)]  # over cap, two per slice: a pass is three slices


def clock(app):
    return rows(app, "SELECT last_full_pass_ms, last_slice_ms, actor FROM feed_prune_state")[0]


def test_the_tick_measures_recovery_six_hours_from_the_last_completed_pass(app):
    """Not from a slice (the second and third slices of a pass are still due), and not from the
    pass's start (the next pass waits six hours from the third slice, not the first)."""
    config, settings = config_settings(app)
    for a in FIVE:
        put(app, a, [1, 2, 3, 4])
    set_state(app, last_full_pass_ms=0, last_slice_ms=0)
    t0 = 6 * HOUR_MS

    def tick(now):
        return call(app, prune.prune_tick, config, settings, now)

    assert tick(t0 - 1) is None
    assert tick(t0) == prune.SweepResult(2, "did:plc:a002", False)
    assert clock(app) == (0, t0, "did:plc:a002")
    assert tick(t0 + 1) == prune.SweepResult(2, "did:plc:a004", False)
    assert tick(t0 + 2) == prune.SweepResult(1, None, True)
    assert clock(app) == (t0 + 2, t0 + 2, None)
    for a in FIVE:
        put(app, a, [5, 6], tag="n")  # over cap again, with nothing ingested
    assert tick(t0 + 2 + 6 * HOUR_MS - 1) is None
    assert [len(times_of(app, a)) for a in FIVE] == [5] * 5
    assert tick(t0 + 2 + 6 * HOUR_MS) == prune.SweepResult(4, "did:plc:a002", False)


def test_a_dirty_streams_slices_restart_the_recovery_clock_only_by_completing_a_pass(app):
    config, settings = config_settings(app)
    for a in FIVE:
        put(app, a, [1, 2, 3, 4])
    t = 100 * HOUR_MS
    passed = t - 6 * HOUR_MS + 20_000  # the last completed pass: recovery is due at t + 20 s

    def tick(now):
        return call(app, prune.prune_tick, config, settings, now)

    set_state(app, last_full_pass_ms=passed, last_slice_ms=0, dirty=1)
    assert tick(t) == prune.SweepResult(2, "did:plc:a002", False)  # for the dirty flag
    assert tick(t + 10_000) is None  # clean, and recovery is 10 s away
    assert tick(t + 20_000) == prune.SweepResult(2, "did:plc:a004", False)  # recovery, on a clean stream
    assert clock(app) == (passed, t + 20_000, "did:plc:a004")
    set_state(app, dirty=1)
    assert tick(t + 30_000) == prune.SweepResult(1, None, True)
    assert clock(app) == (t + 30_000, t + 30_000, None)
    assert tick(t + 30_000 + 6 * HOUR_MS - 1) is None
    assert tick(t + 30_000 + 6 * HOUR_MS) == prune.SweepResult(0, "did:plc:a002", False)


def test_a_quiet_tick_does_nothing(app):
    config, settings = config_settings(app)
    put(app, "did:plc:a001", [1, 2, 3, 4, 5])
    set_state(app, last_full_pass_ms=HOUR_MS)
    assert call(app, prune.prune_tick, config, settings, HOUR_MS + 60_000) is None
    assert len(times_of(app, "did:plc:a001")) == 5


def test_the_global_cap_per_target_is_the_largest_across_feeds(make_app, tmp_path):
    extra = '[feeds.wide]\nfollow = "follow"\ntargets = [{ collection = "post", maxItems = 7 }]\n'
    app = feeds_app(make_app, tmp_path, toml(max_items=3, extra=extra), sources=FakeSources())
    assert app.extensions["feeds"].target_caps() == {POST: 7}


def test_the_prune_job_is_registered_every_10_seconds(app):
    from feather.feeds import jobs

    by_id = {job.id: job for job in jobs(app.config["FEATHER"])}
    assert sorted(by_id) == ["feeds-prune", "feeds-tombstones"]
    job = by_id["feeds-prune"]
    assert job.seconds == 10.0
    put(app, "did:plc:a001", [1, 2, 3, 4, 5])
    from feather.process.scheduler import guarded

    guarded(app, job)()  # as the scheduler runs it: first tick ever, so a recovery pass is due
    assert times_of(app, "did:plc:a001") == [5, 4, 3]
