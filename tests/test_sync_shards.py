"""Shard cursors across a change of SYNC_SHARD_COUNT, and a sync shard resuming a v2 (sequence)
cursor older than SYNC_JETSTREAM_MAX_LOOKBACK_US.

The owners hash (crc32 % 2, crc32 % 3) as: alice (0, 1), bob (1, 2), carol (0, 2), dave (1, 0);
the first test pins that, so every expected row below can be read off it.
"""
from __future__ import annotations

import time
import zlib

from tests.test_sync_kit import ALICE, BOB, CAROL, DAVE, T0, env  # noqa: F401

from feather import sql

HOUR_US = 3_600_000_000


def _q(statement, *params):
    return sql.rows(statement, params)


def _settings(env, **values):
    return type(env.settings)({**env.settings.as_dict(), **values})


def _enable(env, *owners) -> None:
    from feather.sync import service

    for owner in owners:
        service.configure(owner, env.settings, env.clock(), apps=["bluesky", "tangled"], enabled=True)


def _shards(env, count: int) -> dict[str, list[str]]:
    """Build the subscriptions for `count` shards, as a starting worker does; their members."""
    from feather.sync import subscriptions

    return {s.name: list(s.dids()) for s in subscriptions(_settings(env, SYNC_SHARD_COUNT=count))
            if s.name.startswith("sync:")}


def _save(*cursors) -> None:
    for name, time_us, seq in cursors:
        sql.execute("INSERT INTO jetstream_cursor (name, time_us, seq, updated_at) VALUES (?, ?, ?, 0)"
                    " ON CONFLICT (name) DO UPDATE SET time_us = excluded.time_us, seq = excluded.seq",
                    (name, time_us, seq))


def _cursors() -> list[tuple]:
    return _q("SELECT name, time_us, seq FROM jetstream_cursor WHERE name LIKE 'sync:%' ORDER BY name")


def _basis() -> list[tuple]:
    return _q("SELECT value FROM app_state WHERE key = 'sync_shard_count'")


def test_the_owners_hash_as_the_expected_rows_below_assume():
    assert [(zlib.crc32(d.encode()) % 2, zlib.crc32(d.encode()) % 3) for d in (ALICE, BOB, CAROL, DAVE)] == [
        (0, 1), (1, 2), (0, 2), (1, 0)]


def test_raising_the_count_rewinds_the_existing_shard_an_owner_moved_into_to_the_owners_old_cursor(env):
    _enable(env, ALICE)
    assert _shards(env, 2) == {"sync:0": [ALICE], "sync:1": []}
    _save(("sync:0", 500, 40), ("sync:1", 9_000_000_000, 90))
    assert _shards(env, 3) == {"sync:0": [], "sync:1": [ALICE], "sync:2": []}
    # alice's events after 500 were never applied by sync:1; resuming it at 9e9 would skip them.
    assert _cursors() == [("sync:0", 500, 40), ("sync:1", 500, None), ("sync:2", 500, None)]
    assert _basis() == [("3",)]


def test_each_shard_goes_back_to_the_oldest_cursor_of_its_own_members_and_never_forward(env):
    _enable(env, ALICE, BOB, DAVE)
    _shards(env, 2)
    _save(("sync:0", 500, None), ("sync:1", 900, None))
    assert _shards(env, 3) == {"sync:0": [DAVE], "sync:1": [ALICE], "sync:2": [BOB]}
    # sync:0 keeps 500 although dave's old cursor is 900 (never forward); sync:1 takes alice's
    # 500; the new sync:2 takes bob's 900, not the oldest of all.
    assert _cursors() == [("sync:0", 500, None), ("sync:1", 500, None), ("sync:2", 900, None)]


def test_lowering_the_count_rewinds_a_shard_that_gained_an_owner_from_a_shard_behind_it(env):
    _enable(env, ALICE, BOB, CAROL, DAVE)
    _shards(env, 3)
    _save(("sync:0", 1000, 10), ("sync:1", 2000, 20), ("sync:2", 3000, 30))
    assert _shards(env, 2) == {"sync:0": sorted([ALICE, CAROL]), "sync:1": sorted([BOB, DAVE])}
    # sync:1 gains dave from sync:0 (1000); sync:0 gains only owners of shards ahead of it; the
    # row of the shard that is gone stays as it was.
    assert _cursors() == [("sync:0", 1000, 10), ("sync:1", 1000, None), ("sync:2", 3000, 30)]
    assert _basis() == [("2",)]


def test_an_unchanged_count_moves_no_cursor_and_only_makes_a_missing_one_from_the_oldest(env):
    from feather.jetstream.store import set_paused

    _enable(env, ALICE, BOB, DAVE)
    _shards(env, 3)
    _save(("sync:0", 500, 5), ("sync:1", 900, 9))
    set_paused("sync:2", "disk watermark")  # a row at time_us 0: no cursor yet
    _shards(env, 3)
    assert _cursors() == [("sync:0", 500, 5), ("sync:1", 900, 9), ("sync:2", 500, None)]


def test_a_first_start_remembers_the_count_before_any_cursor_exists_so_a_later_raise_knows_it(env):
    _enable(env, ALICE, DAVE)
    assert _shards(env, 2) == {"sync:0": [ALICE], "sync:1": [DAVE]}
    assert (_cursors(), _basis()) == ([], [("2",)])  # nothing applied yet: every shard starts live
    _save(("sync:0", 500, None), ("sync:1", 900, None))
    _shards(env, 3)
    assert _cursors() == [("sync:0", 500, None), ("sync:1", 500, None), ("sync:2", 500, None)]


def test_a_row_left_by_a_lowered_count_is_never_moved_forward_when_the_count_goes_up_again(env):
    _enable(env, BOB)
    _shards(env, 2)
    _save(("sync:0", 700, None), ("sync:1", 900, None), ("sync:2", 100, None))  # sync:2 from a count of 3
    assert _shards(env, 3) == {"sync:0": [], "sync:1": [], "sync:2": [BOB]}
    assert _cursors() == [("sync:0", 700, None), ("sync:1", 900, None), ("sync:2", 100, None)]


def test_a_new_shard_without_owners_starts_from_the_oldest_shard_in_use_not_a_row_left_behind(env):
    _enable(env, BOB)
    _shards(env, 2)
    _save(("sync:0", 700, None), ("sync:1", 900, None), ("sync:2", 100, None))  # sync:2 from a count of 3
    assert _shards(env, 4) == {"sync:0": [], "sync:1": [BOB], "sync:2": [], "sync:3": []}
    assert _cursors() == [("sync:0", 700, None), ("sync:1", 900, None), ("sync:2", 100, None),
                          ("sync:3", 700, None)]


def test_a_failed_check_is_logged_as_an_error_and_the_shards_still_start(env, monkeypatch, caplog):
    from feather.sync import shards, subscriptions

    def broken(count):
        raise RuntimeError("database went away")
    monkeypatch.setattr(shards, "reshard_cursors", broken)
    subs = subscriptions(_settings(env, SYNC_SHARD_COUNT=2))
    assert [s.name for s in subs] == ["sync:0", "sync:1", "global"]
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "feather.sync"] == [
        ("ERROR", "sync: could not check the shard cursors against SYNC_SHARD_COUNT")]


def _stream(env, lookback_us: int, saved_time_us: int, seq: int):
    from feather.jetstream.consumer import Stream
    from feather.jetstream.store import Cursor
    from feather.sync import subscriptions

    sub = subscriptions(_settings(env, SYNC_JETSTREAM_MAX_LOOKBACK_US=lookback_us))[0]
    assert sub.name == "sync:0"
    stream = Stream(sub, ["ws://127.0.0.1:9/subscribe"], app=env.app, allow_private=True)
    stream.cursor = Cursor(saved_time_us, seq=seq)  # what start() loads from jetstream_cursor
    return stream


def test_a_v2_cursor_older_than_the_lookback_resumes_at_the_window_reports_the_gap_and_makes_sweeps_due(env):
    _enable(env, ALICE, BOB)
    assert _q("SELECT owner_did, next_sweep_at FROM sync_sets ORDER BY owner_did") == [
        (ALICE, T0 + 86400), (BOB, T0 + 86400)]
    saved = int(time.time() * 1_000_000) - HOUR_US - 60_000_000
    stream = _stream(env, HOUR_US, saved, seq=4242)
    before = int(time.time() * 1_000_000)
    start = stream._connect_cursor()
    after = int(time.time() * 1_000_000)
    assert before - HOUR_US <= start <= after - HOUR_US  # the window's start, a time, not seq 4242
    assert stream.stats["gaps"] == 1
    assert _q("SELECT owner_did, next_sweep_at FROM sync_sets ORDER BY owner_did") == [(ALICE, 0), (BOB, 0)]


def test_a_v2_cursor_inside_the_lookback_resumes_at_its_sequence_and_makes_nothing_due(env):
    _enable(env, ALICE)
    stream = _stream(env, HOUR_US, int(time.time() * 1_000_000) - HOUR_US + 60_000_000, seq=4242)
    assert stream._connect_cursor() == 4242
    assert stream.stats["gaps"] == 0
    assert _q("SELECT next_sweep_at FROM sync_sets") == [(T0 + 86400,)]
