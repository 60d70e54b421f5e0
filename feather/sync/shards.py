"""Shard cursors across a change of SYNC_SHARD_COUNT.

A shard's cursor covers the owners it held when the cursor was saved, nobody else. Changing the
count re-hashes owners (crc32 % n), into new shards and into existing ones alike: an owner moved
into a shard whose cursor is ahead of its old shard's would never see its own events in between,
and an unfollow among them would be lost for good. So the count the cursors were saved under is
remembered (one app_state row), and on any change, raise or lower, every shard resumes from the
oldest cursor any of its members had. Replay is idempotent (handler.py), so resuming early costs
only time; a cursor is only ever moved back here, never forward.
"""
from __future__ import annotations

import logging

from feather import sql
from feather.db import db
from feather.jetstream import store as jstore
from feather.sync.store import shard_of

log = logging.getLogger(__name__)

BASIS_KEY = "sync_shard_count"  # app_state: the SYNC_SHARD_COUNT the shard cursors were saved under


def plan(count: int, previous: int | None, cursors: dict[int, int], owners: list[str]) -> dict[int, int]:
    """{shard: time_us it must resume from} for the shards whose cursor must go back or be made.

    `cursors` are the saved time_us (> 0) by shard number, `owners` the enabled owners and
    `previous` the count the cursors were saved under (None: not known)."""
    if not cursors:
        return {}  # nothing was ever applied: every shard starts live, as it always did
    # The oldest position of the shards in use; a row a lowered count left behind is no one's.
    in_use = [t for shard, t in cursors.items() if previous is None or shard < previous]
    oldest = min(in_use or cursors.values())
    out = {}
    for shard in range(count):
        have = cursors.get(shard)
        if previous == count:
            want = None  # the same owners as when the cursors were saved
        elif previous is None:
            # Saved before the count was remembered: whoever is here may come from any shard.
            want = oldest
        else:
            members = [o for o in owners if shard_of(o, count) == shard]
            # An old shard that never saved a cursor never applied anything: the oldest covers it.
            had = [cursors.get(shard_of(o, previous), oldest) for o in members]
            want = min(had, default=None)
        if want is None and have is None:
            want = oldest  # a shard without a cursor (new, or never written): the oldest one
        if want is not None and (have is None or want < have):
            out[shard] = want
    return out


def previous_count() -> int | None:
    found = sql.rows("SELECT value FROM app_state WHERE key = ?", (BASIS_KEY,))
    try:
        return int(found[0][0]) if found else None
    except ValueError:  # not ours to trust: treat as unknown, which only replays more
        return None


def reshard_cursors(count: int) -> dict[str, int]:
    """Rewind or make the shard cursors for `count` shards and remember the count. One transaction;
    {cursor name: time_us it now resumes from} for the ones changed."""
    with db.atomic():
        previous = previous_count()
        cursors = {}
        for saved in jstore.cursor_rows("sync:"):
            number = saved.name[len("sync:"):]
            if number.isdigit() and saved.time_us and saved.time_us > 0:
                cursors[int(number)] = saved.time_us
        owners = [r[0] for r in sql.rows("SELECT owner_did FROM sync_sets WHERE enabled = 1")]
        targets = plan(count, previous, cursors, owners)
        now = sql.now_s()
        for shard, time_us in targets.items():
            jstore.rewind_cursor(f"sync:{shard}", time_us)
        if previous != count:
            sql.execute("INSERT INTO app_state (key, value, updated_at) VALUES (?, ?, ?)"
                        " ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                        (BASIS_KEY, str(count), now))
    if previous is not None and previous != count:
        log.info("sync: SYNC_SHARD_COUNT changed from %d to %d", previous, count)
    return {f"sync:{shard}": time_us for shard, time_us in sorted(targets.items())}
