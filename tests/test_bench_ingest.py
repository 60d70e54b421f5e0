"""bench/ingest.py's three figures: the default-serving run really is a small instance's store, not
the full index again under another name."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.firehose import realistic_log
from bench.ingest import served_accounts

REPO = Path(__file__).resolve().parent.parent


def test_served_accounts_are_distinct_followers_from_the_log_and_the_same_for_a_seed():
    frames = realistic_log(3000)
    followers = {f["did"] for f in frames if f.get("commit", {}).get("collection") == "app.bsky.graph.follow"
                 and f["commit"]["operation"] == "create"}
    chosen = served_accounts(frames, 10)
    assert len(set(chosen)) == 10
    assert set(chosen) <= followers
    assert served_accounts(frames, 10) == chosen
    assert served_accounts(frames, 10, seed=20) != chosen


@pytest.mark.slow
def test_ingest_bench_prints_the_default_serving_figure_beside_the_full_index(tmp_path):
    out = subprocess.run([sys.executable, "bench/ingest.py", "--events", "4000"], cwd=REPO, capture_output=True,
                         text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    figures = [json.loads(line[len("FIGURE "):]) for line in out.stdout.splitlines() if line.startswith("FIGURE ")]
    assert [f["measure"] for f in figures] == [
        "ingest, every feature, full index (FEED_SERVE=all), SQLite",
        "ingest, every feature, default FEED_SERVE=signed-in (10 served), SQLite",
        "ingest, minimal mirror handler, SQLite",
        "RSS steady, every feature, SQLite",
        "RSS peak, every feature, SQLite",
    ]
    # The goal is the shipped service's; the opt-in full index is measured beside it with none.
    assert [f["goal"] for f in figures[:3]] == ["none (opt-in)", ">= 0.25", ">= 0.5"]
    bare = figures[0]["bare"]
    assert bare > 0 and all(f["bare"] == bare for f in figures[:3])
    assert all(f["feather"] > 0 for f in figures)
    stored, full = (int(n.replace(",", "")) for n in
                    re.search(r"stored ([\d,]+) of the full index's ([\d,]+) posts", out.stdout).groups())
    # The served run kept some of the log's posts (its accounts' followees'), far from all of them.
    assert 0 < stored < full / 2, (stored, full)
    print(f"bench/ingest.py --events 4000: {out.stdout.splitlines()[1:5]}")
