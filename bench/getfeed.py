"""getFeed latency at 1M feed rows: in-process, and under concurrent load through gunicorn + gevent.

In-process: what the getFeed route runs once the request is parsed (hybrid.feed_source, then
query.run: the page query and the records formatted), 50 actors, limit 50, as a ratio to the bare
page query on a raw sqlite3 connection (the same SQL, rows fetched, nothing formatted).
Under load: as a ratio to a trivial endpoint (GET /health: one page read, a small JSON body).

    python bench/getfeed.py [--actors 5000] [--per-actor 200] [--requests 3000] [--concurrency 16]

Builds a SQLite database of actors × per-actor feed rows (default 5000 × 200 = 1M, the cap)
over 50 000 posts, starts `gunicorn -k gevent -w 1 app:app` on loopback, then drives both
endpoints from greenlets with keep-alive connections, alternating phases, and prints p50/p99.

In-process, beside Feather: Contrail's schema and statements (bench/contrail/shape.mjs on Node 22's
node:sqlite, WAL and synchronous=NORMAL like Feather) over a file holding the same posts and the
same (actor, uri) feed rows, for the same 50 actors and rounds: the listRecords page query joined
to feed_items, then the response shaped (each record JSON.parse'd, the cursor encoded), timed
inside node. Rounds alternate Feather, then Contrail; each Contrail page must be Feather's page
for that actor (here a feed row's time is its post's, so both orders agree), and any that is not
is reported. Without Node 22 (bench/contrail installs it from npm) that comparison is skipped
with one line saying why.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gevent
from gevent import monkey

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import contrail  # noqa: E402
from bench.contrail import build as contrail_build  # noqa: E402
from bench.report import figure  # noqa: E402

POST = "app.bsky.feed.post"


def build(workdir: Path, actors: int, per_actor: int, posts: int) -> Path:
    # Not at the top: bench/load.py and bench/service.py import this module without patching gevent.
    from feather import create_app  # noqa: PLC0415  after main()'s monkey.patch_all()
    from feather.db import db  # noqa: PLC0415  after main()'s monkey.patch_all()
    from feather.feeds.store import schema  # noqa: PLC0415  after main()'s monkey.patch_all()
    from feather.migrate import upgrade  # noqa: PLC0415  after main()'s monkey.patch_all()

    path = workdir / "getfeed.db"
    app = create_app({"DATABASE_URL": f"sqlite:///{path}", "FEATHERREADER_ENV": "test",
                      "FEATHERREADER_DATA_DIR": str(workdir), "FEATHERREADER_LOG_LEVEL": "WARNING",
                      "FEED_SERVE": "all"})
    upgrade(db.obj)
    with app.app_context(), db.connection_context():
        schema.ensure(app.extensions["feeds"])
    db.obj.close()
    rng = random.Random(7)
    base = 1_760_000_000_000_000
    raw = sqlite3.connect(path)
    post_rows = []
    for i in range(posts):
        did = f"did:plc:author{i % 2000:06d}"
        record = json.dumps({"$type": POST, "text": f"post {i} " + "x" * 80, "createdAt": "2025-10-09T00:00:00.000Z"})
        post_rows.append((f"at://{did}/{POST}/p{i:07d}", did, f"p{i:07d}", f"bafy{i}", record, base + i * 1000))
    raw.executemany("INSERT INTO feed_records_post (uri, did, rkey, cid, record, time_us, indexed_at, arrival)"
                    " VALUES (?, ?, ?, ?, ?, ?, 0, 0)", post_rows)

    def items():
        for a in range(actors):
            actor = f"did:plc:reader{a:07d}"
            for j in rng.sample(range(posts), per_actor):
                yield actor, post_rows[j][0], POST, post_rows[j][5]

    raw.executemany("INSERT INTO feed_items (actor, uri, collection, time_us) VALUES (?, ?, ?, ?)", items())
    raw.executemany("INSERT INTO feed_backfills (actor, feed, completed) VALUES (?, 'timeline', 1)",
                    ((f"did:plc:reader{a:07d}",) for a in range(actors)))
    raw.commit()
    total = raw.execute("SELECT count(*) FROM feed_items").fetchone()[0]
    raw.execute("ANALYZE")
    raw.close()
    print(f"database: {total} feed rows, {posts} posts, {actors} actors")
    return path


def contrail_setup(workdir: Path, path: Path):
    """A running Contrail-shaped reader over Feather's posts and feed rows, or None, having said why not."""
    node = contrail.node_or_skip()
    if node is None:
        return None
    raw = sqlite3.connect(path)
    contrail_build.getfeed_db(
        node, workdir / "contrail.db",
        raw.execute("SELECT uri, did, rkey, cid, record, time_us FROM feed_records_post"),
        raw.execute("SELECT actor, uri, collection, time_us FROM feed_items"))
    raw.close()
    return contrail.Rounds(node, workdir / "contrail.db", POST)


def in_process(path: Path, workdir: Path, actors: int, rounds: int, rng: random.Random,
               shape=None) -> tuple[list, list, list, int]:
    """(getFeed latencies, bare page-query latencies, Contrail-shaped latencies) in seconds, Feather
    and bare interleaved actor by actor, Contrail's round after Feather's; and how many Contrail
    pages differed from Feather's."""
    # Not at the top: bench/load.py and bench/service.py import this module without patching gevent.
    from feather import create_app  # noqa: PLC0415  after main()'s monkey.patch_all()
    from feather.db import db  # noqa: PLC0415  after main()'s monkey.patch_all()
    from feather.feeds.read import hybrid, query  # noqa: PLC0415  after main()'s monkey.patch_all()

    app = create_app({"DATABASE_URL": f"sqlite:///{path}", "FEATHERREADER_ENV": "test",
                      "FEATHERREADER_DATA_DIR": str(workdir), "FEATHERREADER_LOG_LEVEL": "WARNING",
                      "FEED_SERVE": "all"})
    picks = [f"did:plc:reader{rng.randrange(actors):07d}" for _ in range(50)]
    raw = sqlite3.connect(path)
    feed_lat, bare_lat, contrail_lat, mismatches = [], [], [], 0
    with app.app_context(), db.connection_context():
        config = app.extensions["feeds"]
        feed = config.feeds["timeline"]
        target = feed.targets[0]
        c = config.collections[target.short]
        bare_sql = (f"SELECT r.uri, r.cid, r.did, r.rkey, r.record, f.time_us, f.uri FROM feed_items f"
                    f" JOIN {c.table} r ON r.uri = f.uri WHERE f.actor = ? AND f.collection = ?"
                    f" ORDER BY f.time_us DESC, f.uri ASC LIMIT 50")
        for round_ in range(rounds + 1):  # the first round warms both caches and is not counted
            feather_pages = []
            for actor in picks:
                started = time.perf_counter()
                page = query.run(config, c, {"limit": "50"}, hybrid.feed_source(config, feed, target, actor))
                took = time.perf_counter() - started
                if len(page["records"]) != 50:
                    raise SystemExit(f"{actor}: {len(page['records'])} records, expected 50")
                started = time.perf_counter()
                rows = raw.execute(bare_sql, (actor, target.nsid)).fetchall()
                bare = time.perf_counter() - started
                if [r[0] for r in rows] != [r["uri"] for r in page["records"]]:
                    raise SystemExit(f"{actor}: the bare query read another page")
                feather_pages.append([r["uri"] for r in page["records"]])
                if round_:
                    feed_lat.append(took)
                    bare_lat.append(bare)
            if shape:
                out = shape.round(picks)
                mismatches += sum(theirs != ours for theirs, ours in zip(out["pages"], feather_pages))
                if round_:
                    contrail_lat += out["seconds"]
    raw.close()
    return feed_lat, bare_lat, contrail_lat, mismatches


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(path: Path, workdir: Path, port: int) -> subprocess.Popen:
    env = dict(os.environ, DATABASE_URL=f"sqlite:///{path}", FEATHERREADER_ENV="test",
               FEATHERREADER_DATA_DIR=str(workdir), FEATHERREADER_RUN_WORKERS="0",
               FEATHERREADER_DISABLE_SCHEDULER="1", FEATHERREADER_LOG_LEVEL="WARNING", FEED_SERVE="all")
    proc = subprocess.Popen([str(REPO / ".venv/bin/gunicorn"), "-k", "gevent", "-w", "1", "-b", f"127.0.0.1:{port}",
                             "--log-level", "warning", "--access-logfile", "/dev/null", "app:app"], cwd=REPO, env=env)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("gunicorn did not come up")


def load(port: int, paths, n: int, concurrency: int) -> list[float]:
    from http.client import HTTPConnection  # noqa: PLC0415  imports ssl: after main()'s monkey.patch_all()

    latencies: list[float] = []
    remaining = [n]

    def worker():
        conn = HTTPConnection("127.0.0.1", port, timeout=30)
        while remaining[0] > 0:
            remaining[0] -= 1
            path = paths()
            started = time.perf_counter()
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read()
            latencies.append(time.perf_counter() - started)
            if response.status != 200:
                raise SystemExit(f"{path}: HTTP {response.status} {body[:200]!r}")
        conn.close()

    gevent.joinall([gevent.spawn(worker) for _ in range(concurrency)], raise_error=True)
    return latencies


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def main() -> None:
    monkey.patch_all()  # first: before Feather (Flask, peewee, ssl) and http.client are imported
    parser = argparse.ArgumentParser()
    parser.add_argument("--actors", type=int, default=5000)
    parser.add_argument("--per-actor", type=int, default=200)
    parser.add_argument("--posts", type=int, default=50_000)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=40, help="in-process: rounds over the same 50 actors")
    args = parser.parse_args()
    rng = random.Random(11)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        path = build(workdir, args.actors, args.per_actor, args.posts)
        shape = contrail_setup(workdir, path)
        try:
            inproc, bare, theirs, mismatches = in_process(path, workdir, args.actors, args.rounds, rng, shape)
        finally:
            if shape:
                shape.close()
        port = free_port()
        server = start_server(path, workdir, port)
        try:
            feed = lambda: f"/xrpc/com.featherreader.getFeed?feed=timeline&actor=did:plc:reader{rng.randrange(args.actors):07d}&limit=50"
            health = lambda: "/health"
            load(port, feed, 200, args.concurrency)  # warm-up
            load(port, health, 200, args.concurrency)
            feed_lat, health_lat = [], []
            for _ in range(2):  # alternate phases so drift hits both alike
                health_lat += load(port, health, args.requests // 2, args.concurrency)
                feed_lat += load(port, feed, args.requests // 2, args.concurrency)
        finally:
            server.terminate()
            server.wait(timeout=15)
    print(f"in-process getFeed limit=50, 50 actors: median {pct(inproc, .5):.2f} ms  p99 {pct(inproc, .99):.2f} ms;"
          f" bare page query: median {pct(bare, .5):.2f} ms  p99 {pct(bare, .99):.2f} ms;"
          f" ratio {pct(inproc, .5) / pct(bare, .5):.2f}x median, {pct(inproc, .99) / pct(bare, .99):.2f}x p99"
          f" ({len(inproc)} reads each)")
    figure("getFeed in-process median, limit 50", pct(inproc, .5), pct(bare, .5), "ms")
    figure("getFeed in-process p99, limit 50", pct(inproc, .99), pct(bare, .99), "ms")
    if shape:
        print(f"Contrail's statements on node:sqlite, same actors: median {pct(theirs, .5):.2f} ms"
              f"  p99 {pct(theirs, .99):.2f} ms; ratio feather / Contrail's statements:"
              f" {pct(inproc, .5) / pct(theirs, .5):.2f}x median (goal <= 1.0x),"
              f" {pct(inproc, .99) / pct(theirs, .99):.2f}x p99 ({len(theirs)} reads each)")
        compared = (args.rounds + 1) * 50
        print(f"Contrail-shaped pages equal to Feather's: {compared - mismatches} of {compared}"
              + ("" if not mismatches else f"  ({mismatches} DIFFER: the figures compare different pages)"))
        against = "Feather against Contrail's statements (node:sqlite)"
        figure(f"getFeed in-process median, limit 50, {against}", pct(inproc, .5), pct(theirs, .5), "ms", "<= 1.0")
        figure(f"getFeed in-process p99, limit 50, {against}", pct(inproc, .99), pct(theirs, .99), "ms")
    print(f"trivial GET /health: p50 {pct(health_lat, .5):.1f} ms  p99 {pct(health_lat, .99):.1f} ms")
    print(f"getFeed limit=50:    p50 {pct(feed_lat, .5):.1f} ms  p99 {pct(feed_lat, .99):.1f} ms")
    print(f"ratio getFeed / trivial: p50 {pct(feed_lat, .5) / pct(health_lat, .5):.2f}x  "
          f"p99 {pct(feed_lat, .99) / pct(health_lat, .99):.2f}x  "
          f"({args.requests} requests each, concurrency {args.concurrency})")


if __name__ == "__main__":
    main()
