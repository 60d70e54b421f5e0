"""Ingest throughput: Feather's engine (socket → decode → queue → batch writer → database) replaying
a Jetstream log, as a ratio to a bare websocket-client receive loop over the same stream, same run.

    python bench/ingest.py [--events 100000] [--postgres URL]

The log is bench/firehose.py's (about 2,000 DIDs, Zipf follow fan-in; posts, follows, profiles,
deletes, updates). Three Feather figures: the engine with a minimal mirror handler (one multi-row
upsert and delete per batch: the engine's own cost); with every built-in feature's handler on the
shared stream and FEED_SERVE=all (a full index: every event reaches the feeds store, the heaviest
case); and with every feature at the default FEED_SERVE=signed-in, serving ten accounts drawn from
the log (a small instance's users: only what matters to them is stored, and the share of the log's
posts that was is printed beside the figure). With --postgres all three run on scratch databases
made beside URL instead of SQLite files. Each runs in a child process, whose steady RSS (median
over the second half of the ingest) and peak RSS are reported against the 128 MiB steady goal and
the 512 MB VM budget.

Beside the bare socket, a second baseline, "bare SQL" (bench/bare_sql.py): the full index's final
rows (the records tables, feed_items' fan-out, feed_tombstones) written by a minimal script, one
prepared executemany per table and kind, one transaction per batch of the engine's 500 events, on
the same database kind and schema. The full index's rate is shown as a ratio to both, measured in
the same run; tests/test_bench_ingest.py checks that the baseline's rows are the service's.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gevent
from gevent import monkey

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# Light (the standard library only): the --child process loads them before it patches gevent.
from bench import bare_sql  # noqa: E402
from bench.firehose import realistic_log  # noqa: E402
from bench.report import INGEST_GOAL, figure, full_index_goal  # noqa: E402
from tests.support.postgres import scratch_database  # noqa: E402


def bare_receive(url: str, n: int) -> float:
    import websocket  # noqa: PLC0415  ssl: the --child runs the top unpatched

    ws = websocket.create_connection(url + "?cursor=1", skip_utf8_validation=True, timeout=60)
    started = time.perf_counter()
    for _ in range(n):
        ws.recv_data()
    elapsed = time.perf_counter() - started
    ws.close()
    return n / elapsed


def child(url: str, n: int, first_us: int, last_us: int, workdir: str, mode: str, database: str) -> None:
    """Runs in its own process: drive the engine until the cursor reaches the last event."""
    monkey.patch_all()  # first: before Feather (Flask, peewee, ssl, websocket) is imported
    from feather import create_app, features  # noqa: PLC0415  the --child, after monkey.patch_all()
    from feather.db import db  # noqa: PLC0415  the --child, after monkey.patch_all()
    from feather.feeds.config import DEFAULT_TOML  # noqa: PLC0415  the --child, after monkey.patch_all()
    from feather.jetstream import store  # noqa: PLC0415  the --child, after monkey.patch_all()
    from feather.jetstream.engine import Engine  # noqa: PLC0415  the --child, after monkey.patch_all()
    from feather.process.runtime import migrate  # noqa: PLC0415  the --child, after monkey.patch_all()
    from tests.support import mirror_feature  # noqa: PLC0415  the --child, after monkey.patch_all()

    # The mirror is a test fixture, not a feature: it runs alone or not at all.
    overrides = {"DATABASE_URL": database, "FEATHERREADER_ENV": "test",
                 "FEATHERREADER_DATA_DIR": workdir, "FEATHERREADER_JETSTREAM_HOSTS": url,
                 "FEATHERREADER_ALLOW_PRIVATE_NETWORK": True, "FEATHERREADER_LOG_LEVEL": "WARNING",
                 "FEATHERREADER_EXTRA_FEATURES": "tests.support.mirror_feature" if mode == "mirror" else "",
                 "FEED_SERVE": "all"}  # the full index: every event reaches every handler
    if mode == "served":
        config = Path(workdir) / "served.toml"
        actors = ", ".join(f'"{a}"' for a in json.loads((Path(workdir) / "served.json").read_text()))
        config.write_text(f"actors = [{actors}]\n" + DEFAULT_TOML)
        # The whole stream, as an instance past FEED_NARROW_MAX_DIDS receives it (bench/narrow.py
        # measures the DID-filtered subscriptions of a small one).
        overrides.update(FEED_SERVE="signed-in", FEATHERREADER_CONFIG=str(config), FEED_NARROW_MAX_DIDS="0")
    app = create_app(overrides)
    migrate(app)  # as every process starts: the migrations, then each feature's ensure_schema
    settings = app.config["FEATHER"]
    subs = mirror_feature.subscriptions(settings) if mode == "mirror" \
        else [s for s in features.subscriptions(settings) if s.name == "global"]
    with db.connection_context(), db.atomic():
        store.save_cursor("global", store.Cursor(first_us))  # replay the whole log
    engine = Engine(app, subs)
    started = time.perf_counter()
    engine.start()
    stream = engine.streams["global"]
    samples: list[int] = []  # RSS every 0.1 s while ingesting
    while stream.cursor is None or stream.cursor.time_us < last_us:
        gevent.sleep(0.1)
        samples.append(_status_kb("VmRSS"))
    elapsed = time.perf_counter() - started
    stats = dict(stream.stats)
    engine.stop()
    posts = None
    if mode != "mirror":  # how much of the log this instance kept: its posts table
        with db.connection_context():
            table = app.extensions["feeds"].by_nsid(POST_NSID).table
            posts = db.execute_sql(f"SELECT count(*) FROM {table}").fetchone()[0]
    # Steady: the median over the second half of the run, once caches and the queue have filled.
    tail = sorted(samples[len(samples) // 2:]) or [_status_kb("VmRSS")]
    print(json.dumps({"rate": n / elapsed, "peak_kb": _status_kb("VmHWM"), "steady_kb": tail[len(tail) // 2],
                      "stats": stats, "posts": posts}))


def bare_sql_child(n: int, workdir: str, database: str) -> None:
    """Runs in its own process, unpatched (its connection is a plain driver's): the schema made by
    Feather's migrations and ensure_schema (not timed), the log planned into per-batch writes in
    Python (not timed), then the writes, timed."""
    from feather import create_app  # noqa: PLC0415  the child's, like the engine's
    from feather.db import SQLITE_PRAGMAS, db  # noqa: PLC0415
    from feather.process.runtime import migrate  # noqa: PLC0415

    app = create_app({"DATABASE_URL": database, "FEATHERREADER_ENV": "test", "FEATHERREADER_DATA_DIR": workdir,
                      "FEATHERREADER_LOG_LEVEL": "WARNING", "FEED_SERVE": "all"})
    migrate(app)
    db.close()
    frames = [json.loads(line) for line in (Path(workdir) / "log.jsonl").read_text().splitlines()]
    started = time.perf_counter()
    model, batches = bare_sql.plan(frames[:n])
    planned = time.perf_counter() - started
    if database.startswith("sqlite:///"):
        elapsed = bare_sql.write_sqlite(database.removeprefix("sqlite:///"), batches, SQLITE_PRAGMAS)
    else:
        elapsed = bare_sql.write_postgres(database, batches)
    print(json.dumps({"rate": n / elapsed, "plan_secs": planned, "items": len(model.items),
                      "batches": len(batches)}))


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith(field + ":")))


def run_child(url, n, first_us, last_us, workdir, mode, postgres=None) -> dict:
    with _database(postgres, workdir, mode) as database:
        return run_on(database, url, n, first_us, last_us, workdir, mode)


def run_on(database: str, url, n, first_us, last_us, workdir, mode) -> dict:
    """One child on the database named (mode "baresql": the bare-SQL baseline; url is then unused)."""
    out = subprocess.run([sys.executable, __file__, "--child", url, str(n), str(first_us), str(last_us), workdir,
                          mode, database], check=False, cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"bench child failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _database(postgres: str | None, workdir: str, mode: str):
    if postgres:
        return scratch_database(postgres, "feather_ingest")
    return contextlib.nullcontext(f"sqlite:///{workdir}/bench-{mode}.db")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        url, n, first, last, workdir, mode, database = sys.argv[2:]
        if mode == "baresql":
            bare_sql_child(int(n), workdir, database)
            return
        child(url, int(n), int(first), int(last), workdir, mode, database)
        return
    args = parse_args()
    from tests.support.fake_jetstream import FakeJetstream  # noqa: PLC0415  ssl: the --child runs the top unpatched

    with tempfile.TemporaryDirectory() as tmp:
        log, first_us, last_us, served_dids = write_log(Path(tmp), args.events)
        (Path(tmp) / "served.json").write_text(json.dumps(served_dids))
        with FakeJetstream(log=str(log), ttl_secs=0) as js:
            bare = [bare_receive(js.url, args.events)]
            engine_only = run_child(js.url, args.events, first_us, last_us, tmp, "mirror", args.postgres)
            everything = run_child(js.url, args.events, first_us, last_us, tmp, "all", args.postgres)
            served = run_child(js.url, args.events, first_us, last_us, tmp, "served", args.postgres)
            bare.append(bare_receive(js.url, args.events))
        # After the socket loops: its own child, on its own scratch database, the same log.
        baresql = run_child(js.url, args.events, first_us, last_us, tmp, "baresql", args.postgres)
    # The first loop of a run has measured up to a third slower than the last on this machine;
    # the faster of the two is the baseline, so drift never flatters a ratio.
    baseline = max(bare)
    where = "PostgreSQL" if args.postgres else "SQLite"
    full_goal = full_index_goal(everything["rate"])
    print(f"events streamed: {args.events:,} on {where}")
    print(f"bare websocket-client receive loop:         {baseline:10,.0f} events/s"
          f" (the faster of {' and '.join(f'{b:,.0f}' for b in bare)}, before and after)")
    print(f"feather engine + mirror handler ({where}): {engine_only['rate']:10,.0f} events/s   "
          f"ratio {engine_only['rate'] / baseline:.2f} (goal >= 0.5)   {_memory(engine_only)}")
    print(f"feather engine + every feature's handler, FEED_SERVE=all: {everything['rate']:10,.0f} events/s   "
          f"ratio {everything['rate'] / baseline:.2f} (goal {full_goal})   {_memory(everything)}")
    print(f"feather engine + every feature, default FEED_SERVE=signed-in ({SERVED} served accounts): "
          f"{served['rate']:10,.0f} events/s   ratio {served['rate'] / baseline:.2f} (goal {INGEST_GOAL})   {_memory(served)}"
          f"   stored {served['posts']:,} of the full index's {everything['posts']:,} posts "
          f"({served['posts'] / max(everything['posts'], 1):.0%})")
    print(f"bare SQL, the full index's final rows ({baresql['items']:,} timeline rows), prepared executemany,"
          f" one transaction per {bare_sql.BATCH_EVENTS}-event batch ({where}): {baresql['rate']:10,.0f} events/s"
          f"   ({baresql['rate'] / baseline:.2f} of the bare socket; planned in Python in {baresql['plan_secs']:.1f} s,"
          f" not timed)")
    print(f"feather engine + every feature's handler, FEED_SERVE=all, against bare SQL: "
          f"ratio {everything['rate'] / baresql['rate']:.2f}")
    drops = "/".join(str(r["stats"].get("queue_full", 0)) for r in (engine_only, everything, served))
    print(f"queue-full drops (mirror/all/served): {drops}")

    figure(f"ingest, every feature, full index (FEED_SERVE=all), {where}", everything["rate"], baseline,
           "events/s", full_goal)
    figure(f"ingest, every feature, default FEED_SERVE=signed-in ({SERVED} served), {where}", served["rate"],
           baseline, "events/s", INGEST_GOAL)
    figure(f"ingest, minimal mirror handler, {where}", engine_only["rate"], baseline, "events/s", ">= 0.5")
    figure(f"RSS steady, every feature, {where}", everything["steady_kb"] / 1024, None, "MiB", "<= 128")
    figure(f"RSS peak, every feature, {where}", everything["peak_kb"] / 1024, None, "MiB", "<= 512")
    figure(f"ingest, every feature, full index (FEED_SERVE=all), {where}, against bare SQL", everything["rate"],
           baresql["rate"], "events/s", full_goal)


SERVED = 10


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--postgres", metavar="URL", help="run on scratch databases made beside this one")
    return parser.parse_args()


def write_log(workdir: Path, events: int) -> tuple[Path, int, int, list[str]]:
    """bench/firehose.py's log as JSONL in workdir: (its path, first and last time_us, the SERVED
    accounts). Spaced 200 µs apart: 5,000 events/s, the legacy per-IP cap, so the 5 s replay
    overlap is realistic; it ends an hour ago, so the whole log is a replay."""
    first_us = int(time.time() * 1_000_000) - 3_600_000_000
    frames = realistic_log(events, start_us=first_us)
    path = workdir / "log.jsonl"
    path.write_text("".join(json.dumps(f) + "\n" for f in frames))
    return path, first_us, frames[-1]["time_us"], served_accounts(frames, SERVED)


FOLLOW_NSID, POST_NSID = "app.bsky.graph.follow", "app.bsky.feed.post"


def served_accounts(frames: list[dict], k: int, seed: int = 19) -> list[str]:
    """k accounts drawn (seeded) from those that follow someone in the log: a small instance's
    users. Not the busiest: in a 2,000-account log the ten busiest follow nearly everyone, which
    is the full index again; the stored share printed beside the figure shows what was chosen."""
    followers = sorted({f["did"] for f in frames if (f.get("commit") or {}).get("collection") == FOLLOW_NSID
                        and f["commit"].get("operation") == "create"})
    return random.Random(seed).sample(followers, k)


def _memory(result: dict) -> str:
    budget = 512 * 1024  # the VM's memory budget (docs/performance.md), in KiB
    return (f"RSS steady {result['steady_kb'] / 1024:.0f} MiB (goal <= 128), peak {result['peak_kb'] / 1024:.0f} MiB "
            f"({result['peak_kb'] / budget:.2f} of the 512 MB budget)")


if __name__ == "__main__":
    main()
