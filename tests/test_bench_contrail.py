"""bench/contrail/shape.mjs, the Contrail side of bench/fanout.py and bench/getfeed.py: its fan-out
reaches exactly the author's followers once, even when the event comes again, and its getFeed pages
in Contrail's order (record time DESC, uri ASC) with a cursor that continues where a page ended.
A wrong Contrail side would make the benches' "Feather against Contrail" figures compare Feather
with something else."""
import base64
import json
import os
import sqlite3

import pytest

from bench import contrail
from bench.contrail import build

pytestmark = pytest.mark.once  # node:sqlite files of its own: the same answer on either database pass

AUTHOR = "did:plc:author0000000000000000"
OTHER = "did:plc:someoneelse00000000000000"
POST, FOLLOW = "app.bsky.feed.post", "app.bsky.graph.follow"


@pytest.fixture(scope="module")
def node():
    try:
        return contrail.node()
    except contrail.Unavailable as exc:
        if os.environ.get("FEATHER_REQUIRE_PDS") == "1":  # CI: the registry is reachable, so this must work
            pytest.fail(f"Node 22 for bench/contrail: {exc} (FEATHER_REQUIRE_PDS=1)", pytrace=False)
        pytest.skip(f"Node 22 for bench/contrail: {exc}")


def feed_rows(path):
    with sqlite3.connect(path) as raw:
        return raw.execute("SELECT actor, uri, collection, time_us FROM feed_items ORDER BY actor").fetchall()


def test_fanout_writes_one_row_per_follower_and_nothing_more_when_the_event_comes_again(node, tmp_path):
    path = build.fanout_db(node, tmp_path / "contrail.db", AUTHOR, 1000)
    with sqlite3.connect(path) as raw:  # follows of someone else: never this author's audience
        raw.executemany("INSERT INTO records_follow (uri, did, rkey, cid, record, time_us, indexed_at)"
                        " VALUES (?, ?, 'g', 'bafy', ?, 1, 1)",
                        ((f"at://did:plc:g{i}/{FOLLOW}/g", f"did:plc:g{i}", json.dumps({"subject": OTHER}))
                         for i in range(5)))
    uri = f"at://{AUTHOR}/{POST}/3kpost"

    first = contrail.run(node, "fanout", path, AUTHOR, uri, "bafyone", 1_760_000_000_000_000)
    assert first["inserted"] == 1000 and first["replay"] is False and first["seconds"] > 0
    rows = feed_rows(path)
    assert len(rows) == 1000
    assert rows == [(f"did:plc:f{i:012d}", uri, POST, 1_760_000_000_000_000) for i in range(1000)]

    replay = contrail.run(node, "fanout", path, AUTHOR, uri, "bafyone", 1_760_000_000_000_000)
    assert (replay["inserted"], replay["replay"]) == (0, True)
    assert len(feed_rows(path)) == 1000

    # Another CID for the same uri is not a replay: the fan-out runs again and must add nothing.
    edited = contrail.run(node, "fanout", path, AUTHOR, uri, "bafytwo", 1_760_000_000_000_000)
    assert (edited["inserted"], edited["replay"]) == (0, False)
    assert len(feed_rows(path)) == 1000
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT cid FROM records_post WHERE uri = ?", (uri,)).fetchall() == [("bafytwo",)]

    assert build.clear_fanout(path) == 1000 and feed_rows(path) == []


def test_getfeed_pages_by_record_time_then_uri_and_the_cursor_continues_without_overlap(node, tmp_path):
    reader, other = "did:plc:reader", "did:plc:other"
    # Three posts share a time so uri ASC decides among them; uris are not in time order on purpose.
    times = {"p1": 500, "p2": 900, "p3": 700, "p4": 700, "p5": 700, "p6": 100, "p7": 300, "p8": 800}
    posts = [(f"at://did:plc:a/{POST}/{rkey}", "did:plc:a", rkey, f"bafy{rkey}",
              json.dumps({"$type": POST, "text": rkey}), t) for rkey, t in times.items()]
    # feed_items' own time is deliberately wrong: Contrail sorts on the record's time.
    items = [(reader, p[0], POST, 1) for p in posts if p[2] != "p8"] + [(other, posts[7][0], POST, 1)]
    path = build.getfeed_db(node, tmp_path / "contrail.db", posts, items)
    expected = [f"at://did:plc:a/{POST}/{r}" for r in ("p2", "p3", "p4", "p5", "p1", "p7", "p6")]

    first = contrail.run(node, "getfeed", path, POST, reader, 3)
    assert [r["uri"] for r in first["records"]] == expected[:3]
    assert first["records"][0] == {"uri": expected[0], "cid": "bafyp2", "value": {"$type": POST, "text": "p2"},
                                   "did": "did:plc:a", "collection": POST, "rkey": "p2", "time_us": 900}
    cursor = first["cursor"]
    assert "=" not in cursor and "+" not in cursor and "/" not in cursor
    assert json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))) == {
        "t": 700, "u": expected[2], "k": "time"}

    second = contrail.run(node, "getfeed", path, POST, reader, 3, cursor)
    assert [r["uri"] for r in second["records"]] == expected[3:6]
    last = contrail.run(node, "getfeed", path, POST, reader, 3, second["cursor"])
    assert [r["uri"] for r in last["records"]] == expected[6:]
    assert "cursor" not in last  # a short page is the end

    whole = contrail.run(node, "getfeed", path, POST, reader, 50)
    assert [r["uri"] for r in whole["records"]] == expected and "cursor" not in whole

    rounds = contrail.Rounds(node, path, POST, limit=3)
    try:
        out = rounds.round([reader, other, "did:plc:nobody"])
    finally:
        rounds.close()
    assert out["pages"] == [expected[:3], [posts[7][0]], []]
    assert len(out["seconds"]) == 3 and all(s > 0 for s in out["seconds"])
