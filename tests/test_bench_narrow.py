"""bench/narrow.py at a small size: the narrow run receives exactly its people's frames, and the
ten timelines equal the whole stream's."""
from __future__ import annotations

import pytest

from bench import narrow as bench
from bench.admission import ACTORS, FOLLOW, REPOST, make_log

pytestmark = pytest.mark.slow


def test_the_narrow_run_receives_only_its_peoples_frames_and_keeps_the_same_timelines(tmp_path):
    log = make_log(6_000, 5_000, other=0.01)
    whole = bench.serve(log, 0, str(tmp_path))
    narrow = bench.serve(log, 30_000, str(tmp_path))
    assert whole["frames"] == len(log) and whole["streams"] == ["global"]
    assert narrow["streams"] == ["feeds", "feeds:0", "feeds:1", "feeds:2", "feeds:3"]
    followees = {e.record["subject"] for e in log if e.collection == FOLLOW and e.did in ACTORS}
    people = set(ACTORS) | followees
    # Theirs for certain; a stranger's only once someone they follow reposted one of theirs.
    theirs = sum(1 for e in log if e.did in people)
    reposted = {e.record["subject"]["uri"].split("/")[2] for e in log if e.collection == REPOST and e.did in people}
    strangers = sum(1 for e in log if e.did in reposted - people)
    # A stranger joins their shard's filter by a reconnect from the repost: what it sends again is counted.
    assert theirs <= narrow["frames"] and narrow["frames"] - narrow["replayed"] <= theirs + strangers
    assert 0 < narrow["replayed"] < narrow["frames"]
    assert narrow["bytes"] < whole["bytes"] / 10
    assert narrow["timelines"] == whole["timelines"] and len(whole["timelines"]) == 38
