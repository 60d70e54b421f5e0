"""Load under ingest: getFeed and /network from concurrent clients on loopback while a Jetstream
replay is ingested at full rate. Reports 5xx count (must be 0), p50/p99 per endpoint, and each as
a ratio to a trivial static file served by the same web process in the same run. Bounded in
requests and time; sends traffic to 127.0.0.1 only.

Two deployment shapes: by default one gunicorn process serves and ingests (the `make run` shape);
with --split the web processes run no workers and separate `flask worker` processes ingest (the
scale-out Procfile in docs/operating.md), on SQLite or, with --postgres, on a scratch PostgreSQL database.

    python bench/load.py [--events 100000] [--requests 2000] [--concurrency 16]
                         [--split [--web-procs N] [--worker-procs N]] [--postgres URL]
"""
from __future__ import annotations

import argparse
import contextlib
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

from bench.getfeed import free_port, pct  # noqa: E402
from tests.support.eventlog import mixed_log  # noqa: E402
from tests.support.jetstream_wire import make_commit  # noqa: E402
from tests.support.postgres import scratch_database  # noqa: E402

RSS = "community.lexicon.rss.subscription"
DEADLINE_SECS = 300


def make_log(n: int, first_us: int) -> list[dict]:
    rng = random.Random(3)
    frames = mixed_log(n, seed=8, dids=2000)
    for i in range(0, n, 50):  # rss subscriptions sprinkled in, a few feeds with many subscribers
        did = f"did:plc:user{rng.randrange(2000):04d}"
        frames.insert(i, make_commit(did, RSS, f"s{i:08d}", "create",
                                     record={"$type": RSS, "url": f"https://blog{rng.randrange(8)}.example.org/feed.xml",
                                             "createdAt": "2026-11-01T00:00:00Z"}))
    for i, frame in enumerate(frames):
        frame["time_us"] = first_us + 200 * i
    return frames


def run(events: int, requests: int, concurrency: int, split: bool = False, postgres: str | None = None,
        web_procs: int = 1, worker_procs: int = 1, drain_secs: float = 0) -> dict:
    """postgres: a PostgreSQL URL whose role may CREATE DATABASE; a scratch database is made
    beside it and dropped afterwards. web_procs/worker_procs only matter with split. drain_secs:
    after the load, how long to let ingest finish the log before stopping (tests check it does)."""
    monkey.patch_all()
    # These import ssl (urllib.request, requests) and threading: after the patch, not at the top.
    from tests.support.fake_jetstream import FakeJetstream  # noqa: PLC0415  after the patch (ssl)
    from tests.support.service_process import error_records  # noqa: PLC0415  after the patch (requests)

    first_us = int(time.time() * 1_000_000) - 3_600_000_000
    frames = make_log(events, first_us)
    last_us = frames[-1]["time_us"]
    with tempfile.TemporaryDirectory() as tmp, scratch_db(postgres, Path(tmp)) as url:
        workdir = Path(tmp)
        log = workdir / "log.jsonl"
        log.write_text("".join(json.dumps(f) + "\n" for f in frames))
        del frames
        with FakeJetstream(log=str(log), ttl_secs=0) as js:
            env = dict(os.environ, DATABASE_URL=url, FEATHERREADER_ENV="test",
                       FEATHERREADER_DATA_DIR=str(workdir), FEATHERREADER_JETSTREAM_HOSTS=js.url,
                       FEATHERREADER_ALLOW_PRIVATE_NETWORK="1", FEATHERREADER_NETWORK_INDEX="1",
                       FEATHERREADER_NETWORK_PAGE="1", FEATHERREADER_LOG_LEVEL="WARNING",
                       FEATHERREADER_RELAY_HOSTS="http://127.0.0.1:9/", FEATHERREADER_PLC_URL="http://127.0.0.1:9",
                       FEATHERREADER_ADOPTION_INTERVAL_SECS="0", FEED_SERVE="all")
            subprocess.run([sys.executable, "-m", "flask", "--app", "app", "db", "upgrade"], cwd=REPO, env=env,
                           check=True, capture_output=True)
            seed(url, first_us, [f"did:plc:user{i:04d}" for i in range(200)])
            port = free_port()
            procs = []
            # Every process logs into one file: a failed batch is rolled back and replayed, so it
            # shows in no status code and no count; only its ERROR line says it happened.
            log_path = workdir / "service.log"
            out = open(log_path, "a")
            if split:
                procs += [subprocess.Popen([sys.executable, "-m", "flask", "--app", "app", "worker"], cwd=REPO, env=env,
                                           stdout=out, stderr=subprocess.STDOUT)
                          for _ in range(worker_procs)]
                env = dict(env, FEATHERREADER_RUN_WORKERS="0")
            procs.append(subprocess.Popen([str(REPO / ".venv/bin/gunicorn"), "-k", "gevent",
                                           "-w", str(web_procs if split else 1), "-b", f"127.0.0.1:{port}",
                                           "--log-level", "warning", "--access-logfile", "/dev/null", "app:app"],
                                          cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT))
            try:
                wait_port(port)
                started = time.monotonic()
                rng = random.Random(5)
                paths = {
                    "static": lambda: "/static/css/feather.css",
                    "getFeed": lambda: ("/xrpc/com.featherreader.getFeed?feed=timeline&limit=50"
                                        f"&actor=did:plc:user{rng.randrange(200):04d}"),
                    "network": lambda: "/network",
                }
                for fn in paths.values():  # warm-up: first imports, schema checks, connection pools
                    _load(port, fn, 50, concurrency)
                results: dict = {}
                for _ in range(2):  # alternate phases so drift (and ingest bursts) hit all alike
                    for name, fn in paths.items():
                        _merge(results, name, _load(port, fn, requests // 2, concurrency))
                results = {name: _summary(r) for name, r in results.items()}
                ingest_progress = stream_cursor(url) - first_us
                load_secs = time.monotonic() - started
                drain_until = time.monotonic() + drain_secs
                while stream_cursor(url) < last_us and time.monotonic() < drain_until:
                    time.sleep(0.5)
                catch_up_secs = round(time.monotonic() - started, 1) if stream_cursor(url) >= last_us else None
            finally:
                for proc in procs:
                    proc.terminate()
                for proc in procs:
                    proc.wait(30)
                out.close()
            caught_up = stream_cursor(url) >= last_us
            errors = error_records(log_path.read_text())
    return {"results": results, "ingested_us": ingest_progress, "caught_up": caught_up, "load_secs": load_secs,
            "catch_up_secs": catch_up_secs, "errors": errors}


@contextlib.contextmanager
def scratch_db(postgres: str | None, workdir: Path):
    if not postgres:
        yield f"sqlite:///{workdir / 'load.db'}"
        return
    with scratch_database(postgres, "feather_load") as url:
        yield url


@contextlib.contextmanager
def connect(url: str):
    """A plain DB-API connection and its placeholder, outside Feather (the bench only seeds and peeks)."""
    if url.startswith("sqlite:///"):
        conn, mark = sqlite3.connect(url.removeprefix("sqlite:///")), "?"
    else:
        import psycopg2  # noqa: PLC0415  heavy optional: only with --postgres

        conn, mark = psycopg2.connect(url), "%s"
    try:
        yield conn, mark
        conn.commit()
    finally:
        conn.close()


def seed(url: str, first_us: int, readers: list[str]) -> None:
    """Both streams replay the log from its first event; the readers' backfills count as done."""
    with connect(url) as (conn, m):
        cur = conn.cursor()
        for name in ("global", "network"):
            cur.execute(f"INSERT INTO jetstream_cursor (name, time_us, updated_at) VALUES ({m}, {m}, 0)",
                        (name, first_us))
        # The readers' first-read PDS backfill cannot run offline; their follows arrive on the stream.
        cur.executemany(f"INSERT INTO feed_backfills (actor, feed, completed) VALUES ({m}, 'timeline', 1)",
                        [(actor,) for actor in readers])


def stream_cursor(url: str) -> int:
    with connect(url) as (conn, m):
        cur = conn.cursor()
        cur.execute(f"SELECT time_us FROM jetstream_cursor WHERE name = {m}", ("global",))
        row = cur.fetchone()
        return row[0] if row else 0


def wait_port(port: int) -> None:
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("gunicorn did not come up")


def _load(port: int, path_fn, n: int, concurrency: int) -> dict:
    from http.client import HTTPConnection  # noqa: PLC0415  imports ssl: after run()'s monkey.patch_all()

    latencies: list[float] = []
    statuses: dict[int, int] = {}
    remaining = [n]
    deadline = time.monotonic() + DEADLINE_SECS

    def worker():
        conn = HTTPConnection("127.0.0.1", port, timeout=30)
        while remaining[0] > 0 and time.monotonic() < deadline:
            remaining[0] -= 1
            started = time.perf_counter()
            conn.request("GET", path_fn())
            response = conn.getresponse()
            response.read()
            latencies.append(time.perf_counter() - started)
            statuses[response.status] = statuses.get(response.status, 0) + 1
        conn.close()

    gevent.joinall([gevent.spawn(worker) for _ in range(concurrency)], raise_error=True)
    return {"latencies": latencies, "statuses": statuses}


def _merge(into: dict, name: str, part: dict) -> None:
    have = into.setdefault(name, {"latencies": [], "statuses": {}})
    have["latencies"] += part["latencies"]
    for code, n in part["statuses"].items():
        have["statuses"][code] = have["statuses"].get(code, 0) + n


def _summary(r: dict) -> dict:
    return {"p50_ms": pct(r["latencies"], .5), "p99_ms": pct(r["latencies"], .99), "statuses": r["statuses"],
            "count": len(r["latencies"])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--split", action="store_true", help="web without workers, plus `flask worker` processes")
    parser.add_argument("--postgres", metavar="URL", help="run on a scratch database made beside this one")
    parser.add_argument("--web-procs", type=int, default=1, help="gunicorn -w, with --split")
    parser.add_argument("--worker-procs", type=int, default=1, help="flask worker processes, with --split")
    args = parser.parse_args()
    out = run(args.events, args.requests, args.concurrency, args.split, args.postgres, args.web_procs,
              args.worker_procs)
    shape = (f"gunicorn -w {args.web_procs} (web only) + {args.worker_procs} flask worker(s)" if args.split
             else "one gunicorn process, web + workers")
    print(f"shape: {shape} on {'PostgreSQL' if args.postgres else 'SQLite'}")
    base = out["results"]["static"]
    for name, r in out["results"].items():
        fivexx = sum(n for code, n in r["statuses"].items() if code >= 500)
        print(f"{name:8s} p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms  "
              f"ratio p50 {r['p50_ms'] / base['p50_ms']:5.2f}x p99 {r['p99_ms'] / base['p99_ms']:5.2f}x  "
              f"5xx {fivexx}  statuses {r['statuses']}")
    applied = out["ingested_us"] / 200  # the log is spaced 200 µs apart
    print(f"errors in the services' log: {len(out['errors'])}")
    for line in out["errors"][:5]:
        print(f"    {line[:400]}")
    print(f"ingest during the load: {applied:,.0f} events applied in {out['load_secs']:.0f} s "
          f"({applied / out['load_secs']:,.0f} events/s); caught up: {out['caught_up']}"
          + (f" after {out['catch_up_secs']} s" if out["catch_up_secs"] is not None else ""))


if __name__ == "__main__":
    main()
