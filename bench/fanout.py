"""Fan-out cost: one post by an author with 1M followers, through Feather's ingest path, as a
ratio to a bare sqlite3 `INSERT … SELECT` of the same rows into the same table, same run.

    python bench/fanout.py [--followers 1000000] [--rounds 3]

Feather's figure is the whole batch transaction (replay check, record write, fan-out statement,
prune flag, stream cursor) via feather.jetstream.store.apply_batch. The baseline is the
statement alone on a plain sqlite3 connection to the same file. Rounds alternate and each is
followed by deleting the inserted rows, so both always insert into the same empty feed table.
The last line is the same post with hybrid fan-out on (fanoutMaxFollowers = 1000).

Beside them, the same post fanned out by Contrail's schema and statements (bench/contrail/shape.mjs
on Node 22's node:sqlite, WAL and synchronous=NORMAL like Feather) to the same followers in a file
of its own: one transaction of replay check, record upsert and `INSERT OR IGNORE … SELECT` over
the follows' json_extract(record, '$.subject') index, timed inside node. Each round runs bare,
Feather, then Contrail, so drift hits all three. Without Node 22 (bench/contrail installs it from
npm) that comparison is skipped with one line saying why.
"""
from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # first: before Feather (Flask, peewee, ssl) is imported; the WAL checkpoint thread is a greenlet

import argparse  # noqa: E402
import json  # noqa: E402
import sqlite3  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import contrail  # noqa: E402
from bench.contrail import build as contrail_build  # noqa: E402
from bench.contrail.build import clear_fanout  # noqa: E402
from bench.report import figure  # noqa: E402
from feather import create_app, features  # noqa: E402
from feather.db import db, wait_for_checkpoint  # noqa: E402
from feather.feeds.store import schema  # noqa: E402
from feather.jetstream import store  # noqa: E402
from feather.jetstream.events import CommitEvent  # noqa: E402
from feather.jetstream.subscriptions import merge  # noqa: E402
from feather.migrate import upgrade  # noqa: E402

AUTHOR = "did:plc:author0000000000000000"
FOLLOW, POST = "app.bsky.graph.follow", "app.bsky.feed.post"
TOML = """
[collections.follow]
collection = "app.bsky.graph.follow"
[collections.post]
collection = "app.bsky.feed.post"
[feeds.timeline]
targets = ["post"]
{extra}
"""


def build(workdir: Path, followers: int, hybrid: bool):
    cfg = workdir / ("hybrid.toml" if hybrid else "plain.toml")
    cfg.write_text(TOML.format(extra="fanoutMaxFollowers = 1000" if hybrid else ""))
    path = workdir / "fanout.db"
    app = create_app({"DATABASE_URL": f"sqlite:///{path}", "FEATHERREADER_ENV": "test",
                      "FEATHERREADER_DATA_DIR": str(workdir), "FEATHERREADER_LOG_LEVEL": "WARNING",
                      "FEATHERREADER_CONFIG": str(cfg), "FEED_SERVE": "all"})
    upgrade(db.obj)
    with app.app_context(), db.connection_context():
        schema.ensure(app.extensions["feeds"])
    if not hybrid:
        raw = sqlite3.connect(path)
        follow = json.dumps({"$type": FOLLOW, "subject": AUTHOR, "createdAt": "2025-01-01T00:00:00.000Z"})
        raw.executemany(
            "INSERT INTO feed_records_follow (uri, did, rkey, cid, record, time_us, indexed_at, arrival)"
            " VALUES (?, ?, 'f', 'bafy', ?, 1, 1, ?)",
            ((f"at://did:plc:f{i:012d}/{FOLLOW}/f", f"did:plc:f{i:012d}", follow, i) for i in range(followers)))
        raw.commit()
        raw.close()
    return app, path


def feather_round(app, n: int) -> float:
    (sub,) = [s for s in merge(features.subscriptions(app.config["FEATHER"])) if s.name == "global"]
    now = int(time.time() * 1_000_000)
    record = {"$type": POST, "text": "hello", "createdAt": "2025-01-01T00:00:00.000Z"}
    event = CommitEvent(AUTHOR, now, "create", POST, f"feather{n}", record, f"bafyfeather{n}")
    with app.app_context(), db.connection_context():
        started = time.perf_counter()
        store.apply_batch(sub, [event], store.Cursor(now))
        elapsed = time.perf_counter() - started
        # Untimed: let the WAL checkpoint the batch started in a thread (feather/db.py) finish
        # before this connection closes, or the two race and the thread prints "database is locked".
        wait_for_checkpoint()
    return elapsed


def baseline_round(path: Path, n: int) -> float:
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA journal_mode=wal")
    raw.execute("PRAGMA synchronous=normal")
    started = time.perf_counter()
    raw.execute("INSERT INTO feed_items (actor, uri, collection, time_us)"
                " SELECT did, ?, ?, ? FROM feed_records_follow WHERE json_extract(record, '$.subject') = ?",
                (f"at://{AUTHOR}/{POST}/bare{n}", POST, n, AUTHOR))
    raw.commit()
    elapsed = time.perf_counter() - started
    raw.close()
    return elapsed


def clear(path: Path) -> int:
    return clear_fanout(path, "feed_records_post")


def contrail_setup(workdir: Path, followers: int):
    """(node, Contrail-shaped file) or None, having said why the comparison is skipped."""
    node = contrail.node_or_skip()
    if node is None:
        return None
    t0 = time.perf_counter()
    path = contrail_build.fanout_db(node, workdir / "contrail.db", AUTHOR, followers)
    print(f"setup: {followers} follow records in Contrail's schema in {time.perf_counter() - t0:.1f}s")
    return node, path


def contrail_round(node: str, path: Path, n: int, followers: int) -> float:
    now = int(time.time() * 1_000_000)
    out = contrail.run(node, "fanout", path, AUTHOR, f"at://{AUTHOR}/{POST}/contrail{n}", f"bafycontrail{n}", now)
    assert out["inserted"] == followers and not out["replay"], out
    assert contrail_build.clear_fanout(path) == followers, "Contrail's fan-out did not reach every follower"
    return out["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--followers", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        t0 = time.perf_counter()
        app, path = build(workdir, args.followers, hybrid=False)
        print(f"setup: {args.followers} follow records in {time.perf_counter() - t0:.1f}s")
        shape = contrail_setup(workdir, args.followers)
        feather_times, bare_times, contrail_times = [], [], []
        for n in range(args.rounds):
            bare_times.append(baseline_round(path, n))
            assert clear(path) == args.followers
            feather_times.append(feather_round(app, n))
            assert clear(path) == args.followers, "Feather's fan-out did not reach every follower"
            if shape:
                contrail_times.append(contrail_round(*shape, n, args.followers))
        feather_s, bare_s = statistics.median(feather_times), statistics.median(bare_times)
        print(f"bare sqlite3 INSERT … SELECT: {bare_s * 1000:.0f} ms (median of {args.rounds})")
        print(f"feather fan-out (whole batch): {feather_s * 1000:.0f} ms")
        print(f"ratio feather / bare: {feather_s / bare_s:.2f}x  (goal <= 1.1x)")
        figure(f"one post fanned out to {args.followers:,} followers", feather_s, bare_s, "s", "<= 1.1")
        if shape:
            contrail_s = statistics.median(contrail_times)
            print(f"Contrail's statements on node:sqlite (whole transaction): {contrail_s * 1000:.0f} ms")
            print(f"ratio feather / Contrail's statements: {feather_s / contrail_s:.2f}x  (goal <= 1.0x)")
            figure(f"fan-out to {args.followers:,} followers, Feather against Contrail's statements (node:sqlite)",
                   feather_s, contrail_s, "s", "<= 1.0")
        app, _ = build(workdir, args.followers, hybrid=True)
        hybrid_times = [feather_round(app, 100 + n) for n in range(args.rounds)]
        hybrid_s = statistics.median(hybrid_times)
        rows = sqlite3.connect(path).execute("SELECT count(*) FROM feed_items").fetchone()[0]
        print(f"hybrid fan-out (fanoutMaxFollowers=1000): {hybrid_s * 1000:.2f} ms, {rows} feed rows written; "
              f"ratio to bare: {hybrid_s / bare_s:.4f}x")


if __name__ == "__main__":
    main()
