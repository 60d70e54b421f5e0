"""Scale: what S served readers cost one small machine, for S = 1,000, 10,000 and 100,000.

    python bench/scale.py [--accounts 1000000] [--readers 1000,10000,100000] [--events 60000]
                          [--history 300000] [--read-rate 50] [--max-ingest-secs 300]
                          [--postgres URL] [--py-spy DIR]

A synthetic network (bench/scale_network.py: heavy-tailed follows; posts, reposts, follows and
profile writes in the live network's proportions) of --accounts accounts; S of them are served
readers (FEED_SERVE=readers), the first S of one seeded draw, so each S's readers include the
smaller S's. FEED_NARROW_MAX_DIDS=0: the feeds read the whole `global` stream, as an instance this
size does (its readers and whom they follow are far past the DID-filtered streams' limit;
bench/narrow.py measures those). For each S, on a SQLite file or (with --postgres, as
`make bench` runs it a second time when DATABASE_URL is PostgreSQL) a scratch database beside URL:

1. setup, not timed (bench/scale_store.py): the database an instance serving those readers holds
   when the log starts (their follows, --history posts and their reposts before it, what
   admission keeps of them, profiles, the timelines those make), written with bulk SQL;
2. timed, at once: Feather's engine applies the log (--events frames from a local fake
   Jetstream; at most --max-ingest-secs, so a rate too slow to finish still ends the run) with
   every feature's handler, while a second process reads served readers'
   timelines through getFeed (the Flask test client, the whole route) at --read-rate reads/s
   (bench/scale_children.py); the same reader process first makes --idle-reads reads with
   nothing else running: the baseline the reads under ingest are compared with;
3. reported: ingest events/s over the run, as a multiple of the live rate of the collections the
   global stream reads (bench/scale_network.LIVE_RATE; sources in docs/performance.md) and
   against a bare websocket-client loop over the same stream; feed_items rows and database bytes
   per served reader after the log; getFeed median and p99 under ingest against the idle ones;
   the ingest process's peak RSS; each against the issue's goals (100,000 readers at 10x the
   live rate on both databases; p99 at most 10 ms on SQLite; at most 1 MB per served reader).

--py-spy DIR records both processes' profiles (py-spy, raw collapsed stacks) per run.
"""
from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.ingest import bare_receive  # noqa: E402
from bench.report import figure  # noqa: E402
from bench.scale_network import LIVE_TOTAL, Network, step_us  # noqa: E402
from bench.scale_store import CAP, Setup, load, sizes  # noqa: E402
from tests.support.postgres import scratch_database  # noqa: E402

CHILDREN = str(REPO / "bench" / "scale_children.py")
INGEST_GOAL_X, P99_GOAL_MS, BYTES_GOAL = 10.0, 10.0, 1_000_000
GOAL_S = 100_000  # the ingest goal is for this many readers


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))] if s else float("nan")


def run_one(net: Network, readers: list[int], history, frames, js_url: str, database: str, workdir: Path,
            read_rate: float, idle_reads: int = 200, max_ingest_secs: float = 3600, py_spy: Path | None = None) -> dict:
    """Set up the database for these readers, then ingest the log while reading; the figures."""
    from feather import create_app  # noqa: PLC0415  unpatched, like the children's imports: only here
    from feather.db import db  # noqa: PLC0415
    from feather.process.runtime import migrate  # noqa: PLC0415
    from bench.scale_children import overrides  # noqa: PLC0415

    s = len(readers)
    started = time.perf_counter()
    setup = Setup(net, readers, history)
    app = create_app(overrides(database, str(workdir), s))
    migrate(app)
    with app.app_context(), db.connection_context():
        empty = sizes()["total"]
        loaded = load(app, setup)
        before = sizes()
    db.close()
    with contextlib.suppress(AttributeError):
        db.obj.close_all()
    setup_secs = time.perf_counter() - started
    dids = workdir / "readers.json"
    dids.write_text(json.dumps([net.did(r) for r in readers]))
    first_us, last_us = frames[0]["time_us"], frames[-1]["time_us"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    tag = f"{database.split(':')[0]}-{s}"
    reader = subprocess.Popen(_profiled([sys.executable, CHILDREN, "reader", database, str(workdir), str(dids),
                                         str(read_rate), str(s), str(idle_reads)], py_spy, f"reader-{tag}"),
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    command = _profiled([sys.executable, CHILDREN, "ingest", js_url, database, str(workdir), str(s), str(first_us),
                         str(last_us), str(max_ingest_secs)], py_spy, f"ingest-{tag}")
    ingest = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    if ingest.returncode != 0:
        reader.kill()
        raise SystemExit(f"scale ingest child failed:\n{ingest.stderr[-4000:]}")
    out, err = reader.communicate(timeout=600)
    if reader.returncode != 0:
        raise SystemExit(f"scale reader child failed:\n{err[-4000:]}")
    got = json.loads(next(line for line in reversed(ingest.stdout.splitlines()) if line.startswith("{")))
    reads = json.loads(next(line for line in reversed(out.splitlines()) if line.startswith("{")))
    samples = got["samples"] or [(max_ingest_secs, first_us)]  # none: nothing applied in the time allowed
    (t0, c0), (t1, c1) = samples[0], samples[-1]
    times = [f["time_us"] for f in frames]
    applied = bisect.bisect_right(times, c1) - bisect.bisect_right(times, c0)
    return {"s": s, "applied": bisect.bisect_right(times, c1) if got["samples"] else 0, "events": len(frames),
            "rate": applied / (t1 - t0) if t1 > t0 else 0.0, "startup_secs": t0, "ingest_secs": t1,
            "size": got["size"], "empty": empty, "before": before, "peak_kb": got["peak_kb"],
            "reader_peak_kb": reads["peak_kb"], "stats": got["stats"], "idle": reads["idle"], "loaded": reads["loaded"],
            "setup_secs": setup_secs, "load": loaded, "followees": len(setup.followers)}


def _profiled(command: list[str], py_spy: Path | None, name: str) -> list[str]:
    if py_spy is None:
        return command
    return [str(REPO / ".venv/bin/py-spy"), "record", "--format", "raw", "--rate", "50", "--nonblocking",
            "-o", str(py_spy / f"{name}.txt"), "--", *command]


def goal(met: bool, text: str) -> str:
    return f"{text} ({'met' if met else 'NOT met'})"


def report(where: str, r: dict, bare: float) -> list[str]:
    """Print one S's figures; the goals it was held to, each marked met or not."""
    s, size = r["s"], r["size"]
    ms, idle_ms = [x * 1000 for x in r["loaded"]["latencies"]], [x * 1000 for x in r["idle"]["latencies"]]
    times_live, per_reader = r["rate"] / LIVE_TOTAL, (size["total"] - r["empty"]) / s
    p50, p99 = pct(ms, .5), pct(ms, .99)
    ok = r["loaded"]["statuses"].get("200", 0)
    pages = [n for n in r["loaded"]["pages"] if n >= 0]
    row_bytes = size["parts"]["feed_items"] / max(size["items"], 1)
    ingest_goal = goal(times_live >= INGEST_GOAL_X, f">= {INGEST_GOAL_X:.0f}x live") if s >= GOAL_S else ""
    bytes_goal = goal(per_reader <= BYTES_GOAL, "<= 1 MB")
    p99_goal = goal(p99 <= P99_GOAL_MS, f"<= {P99_GOAL_MS:.0f} ms") if where == "SQLite" else ""
    parts = ", ".join(f"{k} {v / s / 1e3:,.1f}" for k, v in size["parts"].items())
    print(f"S={s:,} on {where}: ingest {r['rate']:,.0f} events/s = {times_live:.1f}× live"
          f" ({r['rate'] / bare:.2f} of the bare socket; goal {ingest_goal or 'only at S=100,000'})", flush=True)
    print(f"  database {per_reader / 1e6:.3f} MB/reader after the log = {per_reader / BYTES_GOAL:.2f}× the 1 MB goal"
          f" ({bytes_goal}; {(r['before']['total'] - r['empty']) / s / 1e6:.3f} after setup); kB/reader by part: {parts};"
          f" feed_items {size['items'] / s:.1f} rows/reader, {row_bytes:.0f} bytes a row with its indexes (at the cap"
          f" of {2 * CAP} rows, {2 * CAP * row_bytes / 1e6:.3f} MB/reader); the log added"
          f" {size['items'] - r['before']['items']:,} rows")
    print(f"  getFeed under ingest p50 {p50:.2f} ms p99 {p99:.2f} ms = {p99 / pct(idle_ms, .99):.2f}× idle p99"
          f" ({p99_goal or 'no goal off SQLite'}) over {len(ms):,} reads ({ok:,} 200s, median page"
          f" {statistics.median(pages) if pages else 0:.0f} records); idle p50 {pct(idle_ms, .5):.2f} ms"
          f" p99 {pct(idle_ms, .99):.2f} ms over {len(idle_ms):,}")
    stopped = "" if r["applied"] == r["events"] else ", stopped at the time limit"
    print(f"  RSS peak: ingest {r['peak_kb'] / 1024:,.0f} MiB, reader {r['reader_peak_kb'] / 1024:,.0f} MiB;"
          f" {r['followees']:,} followees; setup {r['setup_secs']:.0f} s; ingest applied {r['applied']:,} of"
          f" {r['events']:,} events in {r['ingest_secs']:.0f} s{stopped} (the first after {r['startup_secs']:.1f} s),"
          f" {r['stats'].get('admission_rebuilds', 0)} admission rebuilds, queue-full drops"
          f" {r['stats'].get('queue_full', 0)}", flush=True)
    label = f"scale S={s:,} {where}"
    figure(f"{label}: ingest against the live rate", r["rate"], LIVE_TOTAL, "events/s", ingest_goal)
    figure(f"{label}: ingest against the bare socket", r["rate"], bare, "events/s")
    figure(f"{label}: database per served reader", per_reader / 1e6, None, "MB", bytes_goal)
    figure(f"{label}: feed_items rows per served reader", size["items"] / s, None, "rows")
    figure(f"{label}: getFeed under ingest, median, against idle", p50, pct(idle_ms, .5), "ms")
    figure(f"{label}: getFeed under ingest, p99, against idle", p99, pct(idle_ms, .99), "ms", p99_goal)
    figure(f"{label}: RSS peak, ingest process", r["peak_kb"] / 1024, None, "MiB")
    return [f"S={s:,} {where}: {g}" for g in (ingest_goal, bytes_goal, p99_goal) if g]


def main() -> int:
    args = parse_args()
    from tests.support.fake_jetstream import FakeJetstream  # noqa: PLC0415  ssl: the children patch first

    sizes_s = sorted(int(x) for x in args.readers.split(","))
    started = time.perf_counter()
    step = step_us(LIVE_TOTAL)
    start_us = int(time.time() * 1_000_000) - 3_600_000_000 - step * args.events  # the log ends an hour ago
    net = Network(args.accounts, start_us, seed=args.seed)
    history = net.history(args.history)
    frames = net.log(args.events, history)
    everyone = net.readers(sizes_s[-1])
    print(f"scale bench: {args.accounts:,} accounts (expected followers of the top three "
          f"{', '.join(f'{net.expected_followers(k):,.0f}' for k in range(3))}, median "
          f"{net.expected_followers(args.accounts // 2):,.0f}); follows per reader median "
          f"{statistics.median(len(net.follows(r)) for r in everyone):.0f}; history {len(history):,} posts and reposts"
          f" ({(frames[0]['time_us'] - history[0].time_us) / 3.6e9:.1f} h of the network), log {len(frames):,}"
          f" events ({len(frames) * step / 6e7:.1f} min at the live rate, {LIVE_TOTAL:.1f} events/s);"
          f" reads {args.read_rate:g}/s; generated in {time.perf_counter() - started:.0f} s", flush=True)
    databases = [("PostgreSQL", args.postgres)] if args.postgres else [("SQLite", None)]
    goals: list[str] = []
    py_spy = Path(args.py_spy).resolve() if args.py_spy else None
    if py_spy:
        py_spy.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="feather-scale-") as tmp:
        log_path = Path(tmp) / "log.jsonl"
        log_path.write_text("".join(json.dumps(f) + "\n" for f in frames))
        with FakeJetstream(log=str(log_path), ttl_secs=0) as js:
            bare = max(bare_receive(js.url, len(frames)) for _ in range(2))  # the faster: never flatters a ratio
            print(f"bare websocket-client receive loop: {bare:,.0f} events/s (the faster of two)", flush=True)
            for where, postgres in databases:
                for s in sizes_s:
                    workdir = Path(tmp) / f"{where}-{s}"
                    workdir.mkdir()
                    with _database(postgres, workdir) as database:
                        result = run_one(net, everyone[:s], history, frames, js.url, database, workdir,
                                         args.read_rate, args.idle_reads, args.max_ingest_secs, py_spy)
                    shutil.rmtree(workdir)
                    goals += report(where, result, bare)
    print("scale goals (S × database): " + "; ".join(goals))
    print(f"scale bench done in {time.perf_counter() - started:.0f} s")
    return 0


def _database(postgres: str | None, workdir: Path):
    if postgres:
        return scratch_database(postgres, "feather_scale")
    return contextlib.nullcontext(f"sqlite:///{workdir}/scale.db")


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--accounts", type=int, default=1_000_000)
    p.add_argument("--readers", default="1000,10000,100000", help="comma-separated S values")
    p.add_argument("--events", type=int, default=60_000, help="frames in the timed log")
    p.add_argument("--history", type=int, default=300_000, help="posts before the log (reposts come on top)")
    p.add_argument("--read-rate", type=float, default=50.0, help="getFeed reads a second")
    p.add_argument("--idle-reads", type=int, default=300, help="baseline reads before ingest starts")
    p.add_argument("--max-ingest-secs", type=float, default=300, help="stop an ingest that has not finished by then")
    p.add_argument("--seed", type=int, default=36)
    p.add_argument("--postgres", metavar="URL", help="run on scratch databases made beside this one instead")
    p.add_argument("--py-spy", metavar="DIR", help="record both processes' profiles into DIR")
    return p.parse_args()


if __name__ == "__main__":
    sys.exit(main())
