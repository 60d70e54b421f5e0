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

The whole request (issue 36), beside the whole request of the Contrail shape, each ratio against
that baseline from the same run and the goal (median and p99 at most the baseline's) marked met
or not:
- in process: GET /xrpc/com.featherreader.getFeed through the Flask test client (routing, the
  reader's gate, the backfill check, the page, JSON), against shape.mjs's fetch-style handler
  (a Request built and routed, the page, the JSON Response read back, as Hono's app.request runs);
- over HTTP under load: the same URL against the gunicorn process (`make run`'s shape), and against
  shape.mjs's `serve` (the handler behind node:http, one process too), same connections, same
  concurrency, phases alternating.
Then N more reads through the test client with every statement traced (each connection
traced by
sqlite3's trace callback): the statements that write (and of them, claims) a served reader's getFeed runs when
nothing is due are printed, expected 0; over HTTP, whether the database changed at all
(PRAGMA data_version) while gunicorn answered the reads.

The posts are realistic in size and shape (a seeded mix of short and long texts, links with
facets, replies, images with alt text, link cards and quotes; about 0.5 KiB of JSON each).
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


WORDS = ("the", "a", "feed", "reader", "today", "new", "post", "about", "this", "that", "with", "from", "what",
         "network", "people", "timeline", "week", "really", "think", "good", "open", "source", "small", "server")


def realistic_post(rng: random.Random, i: int, created: str, earlier: list[tuple[str, str]]) -> dict:
    """A Bluesky post as apps write them: text of 10-300 characters, langs, and by chance a link
    facet, a reply to an earlier post, and an embed (images with alt text, a link card, a quote)."""
    length = rng.choice((rng.randint(10, 80), rng.randint(80, 200), rng.randint(200, 300)))
    text = ""
    while len(text) < length:
        text += rng.choice(WORDS) + " "
    text = f"{i} {text.strip()}"[:300]
    record: dict = {"$type": POST, "text": text, "createdAt": created, "langs": ["en"]}
    blob = {"$type": "blob", "ref": {"$link": f"bafkreig{i:052d}"}, "mimeType": "image/jpeg", "size": 100_000 + i}
    if rng.random() < 0.25:
        link = f"https://example.com/articles/{i}"
        record["text"] = f"{text} {link}"
        start = len(text.encode()) + 1
        record["facets"] = [{"index": {"byteStart": start, "byteEnd": start + len(link)},
                             "features": [{"$type": "app.bsky.richtext.facet#link", "uri": link}]}]
    if earlier and rng.random() < 0.3:
        parent = {"uri": earlier[rng.randrange(len(earlier))][0], "cid": earlier[rng.randrange(len(earlier))][1]}
        record["reply"] = {"root": parent, "parent": parent}
    roll = rng.random()
    if roll < 0.2:
        record["embed"] = {"$type": "app.bsky.embed.images", "images": [
            {"alt": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 25))), "image": blob,
             "aspectRatio": {"width": 1200, "height": 800}} for _ in range(rng.randint(1, 4))]}
    elif roll < 0.3:
        record["embed"] = {"$type": "app.bsky.embed.external", "external": {
            "uri": f"https://example.com/{i}", "title": f"An article {i}", "thumb": blob,
            "description": " ".join(rng.choice(WORDS) for _ in range(20))}}
    elif roll < 0.35 and earlier:
        uri, cid = earlier[rng.randrange(len(earlier))]
        record["embed"] = {"$type": "app.bsky.embed.record", "record": {"uri": uri, "cid": cid}}
    return record


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
    earlier: list[tuple[str, str]] = []
    for i in range(posts):
        did = f"did:plc:author{i % 2000:06d}"
        uri, cid = f"at://{did}/{POST}/p{i:07d}", f"bafyrei{i:020d}"
        record = json.dumps(realistic_post(rng, i, "2025-10-09T00:00:00.000Z", earlier[-1000:]), separators=(",", ":"))
        post_rows.append((uri, did, f"p{i:07d}", cid, record, base + i * 1000))
        earlier.append((uri, cid))
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
    size = raw.execute("SELECT avg(length(record)) FROM feed_records_post").fetchone()[0]
    raw.close()
    print(f"database: {total} feed rows, {posts} posts (record JSON {size:.0f} bytes on average), {actors} actors")
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


FEED_URL = "/xrpc/com.featherreader.getFeed?feed=timeline&actor={actor}&limit=50"


def in_process(path: Path, workdir: Path, actors: int, rounds: int, rng: random.Random,
               shape=None) -> dict:
    """Latencies in seconds: "run" (route's page: feed_source + query.run), "bare" (the page query
    on raw sqlite3), "request" (the whole GET through the Flask test client), "contrail" and
    "contrail_request" (shape.mjs, its page and its whole request); Feather's three interleaved
    actor by actor, Contrail's round after Feather's; "mismatches": Contrail pages (of either
    kind) that differed from Feather's."""
    # Not at the top: bench/load.py and bench/service.py import this module without patching gevent.
    from feather import create_app  # noqa: PLC0415  after main()'s monkey.patch_all()
    from feather.db import db  # noqa: PLC0415  after main()'s monkey.patch_all()
    from feather.feeds.read import hybrid, query  # noqa: PLC0415  after main()'s monkey.patch_all()

    app = create_app({"DATABASE_URL": f"sqlite:///{path}", "FEATHERREADER_ENV": "test",
                      "FEATHERREADER_DATA_DIR": str(workdir), "FEATHERREADER_LOG_LEVEL": "WARNING",
                      "FEED_SERVE": "all"})
    picks = [f"did:plc:reader{rng.randrange(actors):07d}" for _ in range(50)]
    raw = sqlite3.connect(path)
    # No cookie jar: a feed client sends no cookies, and the jar is the client's work (werkzeug
    # rebuilds the request's URL twice a request to match cookies to it), as Contrail's fetch-style
    # handler has none.
    client = app.test_client(use_cookies=False)
    out = {"run": [], "bare": [], "request": [], "contrail": [], "contrail_request": [], "mismatches": 0}
    feed_lat, bare_lat = out["run"], out["bare"]
    with app.app_context():
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
            # The page in a context of its own, closed before the request: the request then
            # pushes its own, and checks its connection out of the pool and back in, as a
            # served request does (no greenlet of its own to spawn, no state shared with this loop).
            with app.app_context(), db.connection_context():
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
            started = time.perf_counter()
            response = client.get(FEED_URL.format(actor=actor))
            body = response.get_data()
            whole = time.perf_counter() - started
            if response.status_code != 200 or [r["uri"] for r in json.loads(body)["records"]] != feather_pages[-1]:
                raise SystemExit(f"{actor}: the test client's getFeed answered {response.status_code}"
                                 f" {body[:200]!r}, not the page")
            if round_:
                feed_lat.append(took)
                bare_lat.append(bare)
                out["request"].append(whole)
        if shape:
            theirs = shape.round(picks)
            out["mismatches"] += sum(t != ours for t, ours in zip(theirs["pages"], feather_pages))
            out["mismatches"] += sum(t != ours for t, ours in zip(theirs["request_pages"], feather_pages))
            if round_:
                out["contrail"] += theirs["seconds"]
                out["contrail_request"] += theirs["request_seconds"]
    raw.close()
    return out


WRITE_VERBS = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER")


def traced_reads(path: Path, workdir: Path, actors: int, n: int, rng: random.Random) -> dict:
    """n getFeed reads of served readers with nothing due (their backfill done), every statement
    peewee runs counted: how many there were, how many write, how many of those are claims (a
    write of feed_backfills, or an advisory lock), how many transactions were opened."""
    from feather import create_app  # noqa: PLC0415  after main()'s monkey.patch_all()
    from feather.db import db  # noqa: PLC0415  after main()'s monkey.patch_all()

    app = create_app({"DATABASE_URL": f"sqlite:///{path}", "FEATHERREADER_ENV": "test",
                      "FEATHERREADER_DATA_DIR": str(workdir), "FEATHERREADER_LOG_LEVEL": "WARNING",
                      "FEED_SERVE": "all"})
    client = app.test_client()
    counts = {"reads": n, "statements": 0, "writes": 0, "claims": 0, "transactions": 0, "written": set()}

    def trace(sql: str) -> None:  # every statement SQLite runs, BEGIN and COMMIT included
        words = sql.lstrip().split(None, 1)
        verb = words[0].upper() if words else ""
        counts["statements"] += 1
        if verb == "BEGIN":
            counts["transactions"] += 1
        elif verb in WRITE_VERBS or (verb == "WITH" and any(w in sql.upper() for w in WRITE_VERBS)):
            counts["writes"] += 1
            counts["written"].add(sql[:80])
            counts["claims"] += "feed_backfills" in sql
        elif "advisory" in sql:
            counts["claims"] += 1

    database = db.obj
    connect = database._connect

    def traced_connect(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(trace)
        return conn

    database.close()  # every connection the reads use is made, and traced, from here on
    if hasattr(database, "close_idle"):
        database.close_idle()  # a pool would hand the reads a connection opened before the trace
    database._connect = traced_connect
    try:
        for _ in range(n):
            response = client.get(FEED_URL.format(actor=f"did:plc:reader{rng.randrange(actors):07d}"))
            if response.status_code != 200:
                raise SystemExit(f"traced getFeed: HTTP {response.status_code} {response.get_data()[:200]!r}")
    finally:
        database._connect = connect
    counts["written"] = sorted(counts["written"])
    return counts


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
    parser.add_argument("--traced-reads", type=int, default=500, help="reads with every statement counted")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="only build, then cProfile N whole requests through the test client and print the top")
    args = parser.parse_args()
    rng = random.Random(11)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        path = build(workdir, args.actors, args.per_actor, args.posts)
        if args.profile:
            profile(path, workdir, args.actors, args.profile, rng)
            return
        shape = contrail_setup(workdir, path)
        try:
            measured = in_process(path, workdir, args.actors, args.rounds, rng, shape)
        finally:
            if shape:
                shape.close()
        traced = traced_reads(path, workdir, args.actors, args.traced_reads, rng)
        inproc, bare, theirs, mismatches = (measured["run"], measured["bare"], measured["contrail"],
                                            measured["mismatches"])
        port = free_port()
        server = start_server(path, workdir, port)
        node_server = None
        if shape:
            node_server = contrail.Server(shape.node_path, workdir / "contrail.db", POST, free_port())
        try:
            feed = lambda: FEED_URL.format(actor=f"did:plc:reader{rng.randrange(args.actors):07d}")
            health = lambda: "/health"
            load(port, feed, 200, args.concurrency)  # warm-up
            load(port, health, 200, args.concurrency)
            if node_server:
                load(node_server.port, feed, 200, args.concurrency)
            version = sqlite3.connect(path)
            before = version.execute("PRAGMA data_version").fetchone()[0]
            feed_lat, health_lat, node_lat = [], [], []
            for _ in range(2):  # alternate phases so drift hits all alike
                health_lat += load(port, health, args.requests // 2, args.concurrency)
                feed_lat += load(port, feed, args.requests // 2, args.concurrency)
                if node_server:
                    node_lat += load(node_server.port, feed, args.requests // 2, args.concurrency)
            http_changed = version.execute("PRAGMA data_version").fetchone()[0] != before
            version.close()
        finally:
            server.terminate()
            server.wait(timeout=15)
            if node_server:
                node_server.close()
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
        compared = (args.rounds + 1) * 50 * 2  # its page, and its whole request's body
        print(f"Contrail-shaped pages (its page query's and its whole request's) equal to Feather's:"
              f" {compared - mismatches} of {compared}"
              + ("" if not mismatches else f"  ({mismatches} DIFFER: the figures compare different pages)"))
        against = "Feather against Contrail's statements (node:sqlite)"
        figure(f"getFeed in-process median, limit 50, {against}", pct(inproc, .5), pct(theirs, .5), "ms", "<= 1.0")
        figure(f"getFeed in-process p99, limit 50, {against}", pct(inproc, .99), pct(theirs, .99), "ms")
    print(f"trivial GET /health: p50 {pct(health_lat, .5):.1f} ms  p99 {pct(health_lat, .99):.1f} ms")
    print(f"getFeed limit=50:    p50 {pct(feed_lat, .5):.1f} ms  p99 {pct(feed_lat, .99):.1f} ms")
    print(f"ratio getFeed / trivial: p50 {pct(feed_lat, .5) / pct(health_lat, .5):.2f}x  "
          f"p99 {pct(feed_lat, .99) / pct(health_lat, .99):.2f}x  "
          f"({args.requests} requests each, concurrency {args.concurrency})")
    whole = measured["request"]
    print(f"whole getFeed request in process (Flask test client), limit=50: median {pct(whole, .5):.2f} ms"
          f"  p99 {pct(whole, .99):.2f} ms ({len(whole)} reads)")
    if shape:
        _against("in process", "Flask test client", whole, "fetch-style handler on node:sqlite",
                 measured["contrail_request"])
        _against(f"over HTTP, concurrency {args.concurrency}", "gunicorn -k gevent -w 1", feed_lat,
                 "node:http, one process", node_lat)
    else:
        print("issue 36 getFeed goal (whole request's median and p99 at most Contrail's): not measured,"
              " the Contrail comparison was skipped")
    print(f"writes during {traced['reads']} served reads with nothing due (in process, every statement traced):"
          f" {traced['writes']} statements that write, {traced['claims']} claims;"
          f" {traced['transactions']} transactions opened, {traced['statements']} statements in all"
          + (f"; written: {traced['written']}" if traced["written"] else ""))
    print(f"database changed while gunicorn answered {args.requests} getFeed reads (PRAGMA data_version):"
          f" {'yes' if http_changed else 'no'}")
    figure(f"getFeed statements that write, per {traced['reads']} served reads with nothing due",
           traced["writes"], None, "writes", "0")


def profile(path: Path, workdir: Path, actors: int, n: int, rng: random.Random) -> None:
    """cProfile over n whole getFeed requests through the Flask test client (after 50 unprofiled)."""
    import cProfile  # noqa: PLC0415
    import pstats  # noqa: PLC0415

    from feather import create_app  # noqa: PLC0415  after main()'s monkey.patch_all()

    app = create_app({"DATABASE_URL": f"sqlite:///{path}", "FEATHERREADER_ENV": "test",
                      "FEATHERREADER_DATA_DIR": str(workdir), "FEATHERREADER_LOG_LEVEL": "WARNING",
                      "FEED_SERVE": "all"})
    client = app.test_client(use_cookies=False)  # as in_process's
    urls = [FEED_URL.format(actor=f"did:plc:reader{rng.randrange(actors):07d}") for _ in range(n + 50)]
    for url in urls[:50]:
        client.get(url)
    profiler = cProfile.Profile()
    profiler.enable()
    for url in urls[50:]:
        client.get(url)
    profiler.disable()
    stats = pstats.Stats(profiler)
    print(f"cProfile of {n} getFeed requests (Flask test client): {stats.total_tt * 1000 / n:.2f} ms a request")
    stats.sort_stats("cumulative").print_stats(40)


def _against(where: str, ours: str, feather: list[float], theirs: str, baseline: list[float]) -> None:
    """One whole-request comparison: both figures, the ratios, the goal marked, two FIGURE lines."""
    med, p99 = pct(feather, .5), pct(feather, .99)
    bmed, bp99 = pct(baseline, .5), pct(baseline, .99)
    met = med <= bmed and p99 <= bp99
    print(f"whole getFeed request {where}: Feather ({ours}) median {med:.2f} ms  p99 {p99:.2f} ms;"
          f" Contrail shape ({theirs}) median {bmed:.2f} ms  p99 {bp99:.2f} ms;"
          f" ratio {med / bmed:.2f}x median, {p99 / bp99:.2f}x p99;"
          f" issue 36 goal (median and p99 at most the baseline's): {'met' if met else 'NOT met'}"
          f" ({len(feather)} and {len(baseline)} reads)")
    figure(f"getFeed whole request {where} median, against Contrail's whole request", med, bmed, "ms", "<= 1.0")
    figure(f"getFeed whole request {where} p99, against Contrail's whole request", p99, bp99, "ms", "<= 1.0")


if __name__ == "__main__":
    main()
