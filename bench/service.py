"""Ingest through the whole service: the `make run` shape (one gunicorn process, gevent, web and
workers, every feature on) replaying a Jetstream log over a real socket, as a ratio to a bare
websocket-client receive loop over the same stream in the same run.

    python bench/service.py [--events 100000] [--postgres URL]

bench/ingest.py drives the engine alone in a child process; this starts what an operator starts:
`gunicorn -k gevent -w 1 app:app` (gunicorn.conf.py migrates and starts the workers), with the
catalogue on (FEATHERREADER_NETWORK_INDEX=1), the sync runner, the scheduler and its jobs, and
timelines at the default FEED_SERVE=signed-in serving ten accounts drawn from the log; then the
same with FEED_SERVE=all (a full index). The log is bench/firehose.py's.

The rate is read from the stream cursor the service saves (at most once a second) in its
database: a poller notes the moment each new cursor value appears, and the rate is the events
between the first and the last value seen over the time between them, so process start-up and
migration are not counted and the one-second save cadence costs no precision. The worker's RSS is
read from /proc while it ingests. Also printed: the posts stored at the end (under signed-in the
records sweep gives back what stopped mattering while the log plays, so a longer run keeps fewer)
and the ERROR lines of the service's log (a failed batch is rolled back and replayed: it costs
rate, not data, so only the log shows it).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.firehose import STEP_US  # noqa: E402
from bench.ingest import SERVED, bare_receive, parse_args, write_log  # noqa: E402
from bench.load import connect, scratch_db, seed, stream_cursor, wait_port  # noqa: E402
from bench.getfeed import free_port  # noqa: E402
from bench.report import INGEST_GOAL, figure, full_index_goal  # noqa: E402
from feather.feeds.config import DEFAULT_TOML  # noqa: E402
from tests.support.fake_jetstream import FakeJetstream  # noqa: E402
from tests.support.service_process import error_records  # noqa: E402

DEADLINE_SECS = 600


def run_service(js_url: str, workdir: Path, first_us: int, last_us: int, mode: str, postgres: str | None,
                served: list[str]) -> dict:
    """Start the service on a fresh database, wait until it has applied the whole log, stop it."""
    config = workdir / f"{mode}.toml"
    config.write_text((f"actors = [{', '.join(json.dumps(a) for a in served)}]\n" if mode == "signed-in" else "")
                      + DEFAULT_TOML)
    with scratch_db(postgres, workdir / mode) as url:
        env = dict(os.environ, DATABASE_URL=url, FEATHERREADER_ENV="test",
                   FEATHERREADER_DATA_DIR=str(workdir), FEATHERREADER_JETSTREAM_HOSTS=js_url,
                   FEATHERREADER_ALLOW_PRIVATE_NETWORK="1", FEATHERREADER_NETWORK_INDEX="1",
                   FEATHERREADER_NETWORK_PAGE="1", FEATHERREADER_LOG_LEVEL="WARNING",
                   FEATHERREADER_CONFIG=str(config), FEED_SERVE=mode,
                   # The whole stream (an instance past the narrow limit; bench/narrow.py measures below it).
                   FEED_NARROW_MAX_DIDS="0",
                   # Offline: the probe and identity lookups would only wait on the network.
                   FEATHERREADER_RELAY_HOSTS="http://127.0.0.1:9/", FEATHERREADER_PLC_URL="http://127.0.0.1:9",
                   FEATHERREADER_ADOPTION_INTERVAL_SECS="0")
        subprocess.run([sys.executable, "-m", "flask", "--app", "app", "db", "upgrade"], cwd=REPO, env=env,
                       check=True, capture_output=True)
        seed(url, first_us, served)
        port = free_port()
        log = workdir / f"{mode}.log"  # the offline relay's warnings; shown only if the run fails
        with open(log, "w") as out:
            proc = subprocess.Popen([str(REPO / ".venv/bin/gunicorn"), "-k", "gevent", "-w", "1",
                                     "-b", f"127.0.0.1:{port}", "--log-level", "warning",
                                     "--access-logfile", "/dev/null", "app:app"], cwd=REPO, env=env,
                                    stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_port(port)
            seen = _watch(url, first_us, last_us, _worker_pid(proc.pid))
        except BaseException:
            print(log.read_text()[-4000:], file=sys.stderr)
            raise
        finally:
            proc.terminate()
            proc.wait(30)
        posts = _count(url, "SELECT count(*) FROM feed_records_post")
    (t0, c0), (t1, c1) = seen["changes"][0], seen["changes"][-1]
    # A failed batch is rolled back and replayed, so it costs rate without losing data: count them.
    errors = error_records(log.read_text())
    return {"rate": (c1 - c0) / STEP_US / (t1 - t0), "events": (c1 - c0) // STEP_US, "secs": t1 - t0,
            "steady_kb": seen["steady_kb"], "peak_kb": seen["peak_kb"], "posts": posts, "errors": errors}


def _count(url: str, sql: str) -> int:
    with connect(url) as (conn, _):
        cur = conn.cursor()
        cur.execute(sql)
        return cur.fetchone()[0]


def _worker_pid(master: int) -> int:
    """gunicorn forks one worker; that process ingests."""
    deadline = time.time() + 30
    while time.time() < deadline:
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.1)
    raise SystemExit("gunicorn started no worker")


def _watch(url: str, first_us: int, last_us: int, pid: int) -> dict:
    """Poll the saved cursor every 20 ms until it reaches the log's end: (moment, value) of each change."""
    changes: list[tuple[float, int]] = []
    rss: list[int] = []
    last, deadline = first_us, time.monotonic() + DEADLINE_SECS
    while last < last_us:
        if time.monotonic() > deadline:
            raise SystemExit(f"the service applied only {(last - first_us) // STEP_US} events in {DEADLINE_SECS} s")
        value = stream_cursor(url)
        if value != last:
            changes.append((time.monotonic(), value))
            last = value
            rss.append(_status_kb(pid, "VmRSS"))
        time.sleep(0.02)
    if len(changes) < 2:
        raise SystemExit("the cursor moved fewer than twice: use more events")
    tail = sorted(rss[len(rss) // 2:])
    return {"changes": changes, "steady_kb": tail[len(tail) // 2], "peak_kb": _status_kb(pid, "VmHWM")}


def _status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith(field + ":")))


def main() -> None:
    args = parse_args()
    where = "PostgreSQL" if args.postgres else "SQLite"
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        log, first_us, last_us, served = write_log(workdir, args.events)
        with FakeJetstream(log=str(log), ttl_secs=0) as js:
            bare = [bare_receive(js.url, args.events)]
            default = run_service(js.url, workdir, first_us, last_us, "signed-in", args.postgres, served)
            bare.append(bare_receive(js.url, args.events))
            full = run_service(js.url, workdir, first_us, last_us, "all", args.postgres, served)
    baseline = max(bare)  # the faster of the two: drift never flatters the ratio
    print(f"events streamed: {args.events:,} on {where}; bare websocket-client receive loop: "
          f"{' and '.join(f'{b:,.0f}' for b in bare)} events/s (the faster, {baseline:,.0f}, is the baseline)")
    full_goal = full_index_goal(full["rate"])
    for name, r, goal in (("default FEED_SERVE=signed-in", default, INGEST_GOAL),
                          ("full index FEED_SERVE=all", full, full_goal)):
        print(f"whole service (gunicorn, every feature on), {name}: {r['rate']:10,.0f} events/s over the last "
              f"{r['events']:,} events in {r['secs']:.1f} s   ratio {r['rate'] / baseline:.2f} (goal {goal})   "
              f"worker RSS steady {r['steady_kb'] / 1024:.0f} MiB, peak {r['peak_kb'] / 1024:.0f} MiB   "
              f"stored {r['posts']:,} posts at the end   errors in its log: {len(r['errors'])}")
        for line in r["errors"][:5]:
            print(f"    {line[:400]}")
    figure(f"ingest, whole service (gunicorn), every feature, default FEED_SERVE=signed-in ({SERVED} served),"
           f" {where}", default["rate"], baseline, "events/s", INGEST_GOAL)
    figure(f"ingest, whole service (gunicorn), every feature, full index (FEED_SERVE=all), {where}",
           full["rate"], baseline, "events/s", full_goal)
    figure(f"RSS steady, whole service worker, every feature, default serving, {where}",
           default["steady_kb"] / 1024, None, "MiB", "<= 128")


if __name__ == "__main__":
    main()
