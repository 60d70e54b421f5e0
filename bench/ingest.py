"""Ingest throughput: Feather's engine (socket → decode → queue → batch writer → database) replaying
a Jetstream log, as a ratio to a bare websocket-client receive loop over the same stream, same run.

    python bench/ingest.py [--events 100000] [--postgres URL]

The log is bench/firehose.py's (about 2,000 DIDs, Zipf follow fan-in; posts, follows,
profiles, deletes, updates). Two Feather figures: the engine with a minimal mirror handler (one
upsert per record: the engine's own cost), and with every built-in feature's handler on the
shared stream (FEED_SERVE=all: every event reaches the feeds store). With --postgres both run
on scratch databases made beside URL instead of SQLite files. Each runs in a child process,
whose steady RSS (median over the second half of the ingest) and peak RSS are reported against
the 128 MiB steady goal and the 512 MB VM budget.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def bare_receive(url: str, n: int) -> float:
    import websocket

    ws = websocket.create_connection(url + "?cursor=1", skip_utf8_validation=True, timeout=60)
    started = time.perf_counter()
    for _ in range(n):
        ws.recv_data()
    elapsed = time.perf_counter() - started
    ws.close()
    return n / elapsed


def child(url: str, n: int, first_us: int, last_us: int, workdir: str, all_features: bool, database: str) -> None:
    """Runs in its own process: drive the engine until the cursor reaches the last event."""
    from gevent import monkey

    monkey.patch_all()
    import gevent

    from feather import create_app, features
    from feather.db import db
    from feather.jetstream import store
    from feather.jetstream.engine import Engine
    from feather.migrate import upgrade
    from tests.support import mirror_feature

    # The mirror is a test fixture (one upsert per event), not a feature: it runs alone or not at
    # all. Among the built-in handlers it cost PostgreSQL two thirds of the batch time.
    app = create_app({"DATABASE_URL": database, "FEATHERREADER_ENV": "test",
                      "FEATHERREADER_DATA_DIR": workdir, "FEATHERREADER_JETSTREAM_HOSTS": url,
                      "FEATHERREADER_ALLOW_PRIVATE_NETWORK": True, "FEATHERREADER_LOG_LEVEL": "WARNING",
                      "FEATHERREADER_EXTRA_FEATURES": "" if all_features else "tests.support.mirror_feature",
                      "FEED_SERVE": "all"})  # the full index: every event reaches every handler
    upgrade(db.obj)
    settings = app.config["FEATHER"]
    subs = [s for s in features.subscriptions(settings) if s.name == "global"] if all_features \
        else mirror_feature.subscriptions(settings)
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
    # Steady: the median over the second half of the run, once caches and the queue have filled.
    tail = sorted(samples[len(samples) // 2:]) or [_status_kb("VmRSS")]
    print(json.dumps({"rate": n / elapsed, "peak_kb": _status_kb("VmHWM"), "steady_kb": tail[len(tail) // 2],
                      "stats": stats}))


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith(field + ":")))


def run_child(url, n, first_us, last_us, workdir, all_features, postgres=None) -> dict:
    with _database(postgres, workdir, all_features) as database:
        out = subprocess.run([sys.executable, __file__, "--child", url, str(n), str(first_us), str(last_us), workdir,
                              "1" if all_features else "0", database], check=False, cwd=REPO, capture_output=True,
                             text=True)
    if out.returncode != 0:
        raise SystemExit(f"bench child failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _database(postgres: str | None, workdir: str, all_features: bool):
    import contextlib

    if postgres:
        from tests.support.postgres import scratch_database

        return scratch_database(postgres, "feather_ingest")
    return contextlib.nullcontext(f"sqlite:///{workdir}/bench-{int(all_features)}.db")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        url, n, first, last, workdir, every, database = sys.argv[2:]
        child(url, int(n), int(first), int(last), workdir, every == "1", database)
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--postgres", metavar="URL", help="run on scratch databases made beside this one")
    args = parser.parse_args()
    from bench.firehose import realistic_log
    from tests.support.fake_jetstream import FakeJetstream

    # Spaced 200 µs apart: 5,000 events/s, the legacy per-IP cap, so the 5 s replay overlap is realistic.
    first_us = int(time.time() * 1_000_000) - 3_600_000_000
    frames = realistic_log(args.events, start_us=first_us)
    last_us = frames[-1]["time_us"]
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.jsonl"
        log.write_text("".join(json.dumps(f) + "\n" for f in frames))
        del frames
        with FakeJetstream(log=str(log), ttl_secs=0) as js:
            baseline = bare_receive(js.url, args.events)
            engine_only = run_child(js.url, args.events, first_us, last_us, tmp, False, args.postgres)
            everything = run_child(js.url, args.events, first_us, last_us, tmp, True, args.postgres)
    where = "PostgreSQL" if args.postgres else "SQLite"
    print(f"events streamed: {args.events:,} on {where}")
    print(f"bare websocket-client receive loop:         {baseline:10,.0f} events/s")
    print(f"feather engine + mirror handler ({where}): {engine_only['rate']:10,.0f} events/s   "
          f"ratio {engine_only['rate'] / baseline:.2f} (goal >= 0.5)   {_memory(engine_only)}")
    print(f"feather engine + every feature's handler:   {everything['rate']:10,.0f} events/s   "
          f"ratio {everything['rate'] / baseline:.2f} (goal >= 0.25)   {_memory(everything)}")
    print(f"queue-full drops: {engine_only['stats'].get('queue_full', 0)} / {everything['stats'].get('queue_full', 0)}")
    from bench.report import figure

    figure(f"ingest, every feature, {where}", everything["rate"], baseline, "events/s", ">= 0.25")
    figure(f"ingest, minimal mirror handler, {where}", engine_only["rate"], baseline, "events/s", ">= 0.5")
    figure(f"RSS steady, every feature, {where}", everything["steady_kb"] / 1024, None, "MiB", "<= 128")
    figure(f"RSS peak, every feature, {where}", everything["peak_kb"] / 1024, None, "MiB", "<= 512")


def _memory(result: dict) -> str:
    budget = 512 * 1024  # the network spec's VM budget, in KiB
    return (f"RSS steady {result['steady_kb'] / 1024:.0f} MiB (goal <= 128), peak {result['peak_kb'] / 1024:.0f} MiB "
            f"({result['peak_kb'] / budget:.2f} of the 512 MB budget)")


if __name__ == "__main__":
    main()
