"""Contrail-shaped SQLite files for the benches, holding the same rows as Feather's.

The tables and indexes are created by shape.mjs (`schema` mode), so the DDL has one source; the
rows are then bulk-loaded with Python's sqlite3, which is only a loader here and never timed.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from bench import contrail

FOLLOW = "app.bsky.graph.follow"


def fanout_db(node_path: str, path: Path, author: str, followers: int) -> Path:
    """records_follow with `followers` follows of `author` (the uris and dids of bench/fanout.py's)."""
    contrail.run(node_path, "schema", path, "follow", "post")
    follow = json.dumps({"$type": FOLLOW, "subject": author, "createdAt": "2025-01-01T00:00:00.000Z"})
    raw = sqlite3.connect(path)
    raw.executemany("INSERT INTO records_follow (uri, did, rkey, cid, record, time_us, indexed_at)"
                    " VALUES (?, ?, 'f', 'bafy', ?, 1, 1)",
                    ((f"at://did:plc:f{i:012d}/{FOLLOW}/f", f"did:plc:f{i:012d}", follow) for i in range(followers)))
    raw.commit()
    raw.close()
    return path


def clear_fanout(path: Path, posts_table: str = "records_post") -> int:
    """Rows the last fan-out wrote; then the feed and the post are gone, as before the round.
    Both files' feed table is feed_items; their posts tables are named apart."""
    raw = sqlite3.connect(path)
    count = raw.execute("SELECT count(*) FROM feed_items").fetchone()[0]
    raw.execute("DELETE FROM feed_items")
    raw.execute(f"DELETE FROM {posts_table}")
    raw.commit()
    raw.close()
    return count


def getfeed_db(node_path: str, path: Path, posts, items, analyze: bool = True) -> Path:
    """records_post from `posts` (uri, did, rkey, cid, record, time_us) and feed_items from `items`
    (actor, uri, collection, time_us). ANALYZE because Feather's bench database gets it too: the
    planner works from the same kind of statistics on both sides."""
    contrail.run(node_path, "schema", path, "follow", "post")
    raw = sqlite3.connect(path)
    raw.executemany("INSERT INTO records_post (uri, did, rkey, cid, record, time_us, indexed_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, 0)", posts)
    raw.executemany("INSERT INTO feed_items (actor, uri, collection, time_us) VALUES (?, ?, ?, ?)", items)
    raw.commit()
    if analyze:
        raw.execute("ANALYZE")
    raw.close()
    return path
