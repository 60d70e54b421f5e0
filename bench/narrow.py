"""Narrow subscriptions: what a small instance receives, DID-filtered against the whole stream.

    python bench/narrow.py [--events 200000] [--dids 100000]

One log (bench/admission.py's: `--dids` accounts, ten served actors following `--dids / 1000`
each, about 1 % of the DIDs) served twice by the real engine over the fake Jetstream (its
`wantedDids` filter and `options_update` are Jetstream's), on fresh SQLite files, both at
FEED_SERVE=signed-in:

- whole stream: FEED_NARROW_MAX_DIDS=0, the feeds' collections from every DID (`global`);
- narrow: the default FEED_NARROW_MAX_DIDS, the DID-filtered shards `feeds:0` … `feeds:3`.

The served actors' follows go first, like their sign-ins' backfill, and the rest of the log once
the narrow filter holds whom they follow (a follow made mid-stream is the author fetch's to cover:
tests/test_timelines_process.py proves that through the whole process). Printed: frames and bytes
the feeds' streams received each way, the narrow share (goal: at most 2 %), and whether the ten
timelines (every feed_items row of theirs) are equal.
"""
from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # first: before Feather (Flask, peewee, websocket-client) is imported

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.admission import ACTORS, FOLLOW, make_log  # noqa: E402
from bench.report import figure  # noqa: E402
from feather import create_app, feeds  # noqa: E402
from feather.db import db  # noqa: E402
from feather.feeds.config import DEFAULT_TOML  # noqa: E402
from feather.jetstream.engine import Engine  # noqa: E402
from feather.process.runtime import migrate  # noqa: E402
from tests.support.fake_jetstream import FakeJetstream, make_commit  # noqa: E402

GOAL = 0.02
CHUNK = 20_000  # frames a control call appends


def frames_of(events) -> list[dict]:
    return [make_commit(e.did, e.collection, e.rkey, e.operation, e.record, e.cid, time_us=e.time_us)
            for e in events]


def wait(predicate, what: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            print(f"timed out waiting for {what}", file=sys.stderr, flush=True)
            raise SystemExit(f"timed out waiting for {what}")
        gevent.sleep(0.05)


def serve(log, limit: int, workdir: str) -> dict:
    """Run the log through the engine; {frames, bytes, timelines, seconds}."""
    cfg = Path(workdir) / f"narrow-{limit}.toml"
    cfg.write_text("actors = [" + ", ".join(f'"{a}"' for a in ACTORS) + "]\n" + DEFAULT_TOML)
    first = [e for e in log if e.collection == FOLLOW and e.did in set(ACTORS)]
    rest = [e for e in log if not (e.collection == FOLLOW and e.did in set(ACTORS))]
    followees = {e.record["subject"] for e in first}
    with FakeJetstream(ttl_secs=10**9) as js:  # keeps the log (its times are in the past)
        app = create_app({"DATABASE_URL": f"sqlite:///{workdir}/narrow-{limit}.db", "FEATHERREADER_ENV": "test",
                          "FEATHERREADER_DATA_DIR": workdir, "FEATHERREADER_LOG_LEVEL": "WARNING",
                          "FEATHERREADER_CONFIG": str(cfg), "FEED_SERVE": "signed-in",
                          "FEED_NARROW_MAX_DIDS": str(limit), "FEATHERREADER_JETSTREAM_HOSTS": js.url,
                          "FEATHERREADER_ALLOW_PRIVATE_NETWORK": True})
        migrate(app)
        engine = Engine(app, feeds.subscriptions(app.config["FEATHER"]))
        engine.start()
        try:
            def filtered() -> int:
                return sum(len(f.get("wantedDids") or []) for f in js.stats()["last_filter"].values())
            wait(lambda: js.stats()["connections"] > 0, "a connection")
            started = time.perf_counter()
            js.append(frames_of(first))
            wanted = len(ACTORS) + len(followees)
            if limit:  # the filter has them once every follow is stored and the shards have updated
                wait(lambda: filtered() == wanted, f"the filter to hold {wanted} DIDs (has {filtered()})", 60)
            for i in range(0, len(rest), CHUNK):
                js.append(frames_of(rest[i:i + CHUNK]))

            def received() -> int:
                return sum(s.stats["frames"] for s in engine.streams.values())

            def settled() -> bool:
                streams = list(engine.streams.values())
                return received() == js.stats()["sent_total"] and not any(s.state.backlog() for s in streams)
            wait(lambda: js.stats()["events"] >= len(log), "the fake to hold the log")
            wait(settled, "every frame sent to be applied")
            gevent.sleep(1.0)
            wait(settled, "every frame sent to be applied")
            seconds = time.perf_counter() - started
            out = {"frames": received(), "bytes": sum(s.stats["bytes"] for s in engine.streams.values()),
                   "replayed": sum(s.stats["replayed"] for s in engine.streams.values()),
                   "seconds": seconds, "streams": sorted(engine.streams)}
        finally:
            engine.stop(timeout=10)
        marks = ", ".join("?" * len(ACTORS))
        with app.app_context(), db.connection_context():
            out["timelines"] = sorted(db.execute_sql(
                f"SELECT actor, uri, time_us FROM feed_items WHERE actor IN ({marks})", ACTORS).fetchall())
    db.obj.close()
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--dids", type=int, default=100_000)
    args = p.parse_args()
    from feather.config import SETTINGS  # noqa: PLC0415
    default = int(next(s.default for s in SETTINGS if s.name == "FEED_NARROW_MAX_DIDS"))
    log = make_log(args.events, args.dids, other=0.01)
    with tempfile.TemporaryDirectory(prefix="feather-narrow-") as workdir:
        whole = serve(log, 0, workdir)
        narrow = serve(log, default, workdir)
    share_frames, share_bytes = narrow["frames"] / whole["frames"], narrow["bytes"] / whole["bytes"]
    equal = narrow["timelines"] == whole["timelines"]
    print(f"narrow bench: {args.events:,} events, {args.dids:,} DIDs, ten served actors following "
          f"{args.dids // 1000:,} each; the whole stream on {whole['streams']}, narrow on {narrow['streams']}")
    print(f"  whole stream: {whole['frames']:,} frames, {whole['bytes']:,} bytes in {whole['seconds']:.1f} s")
    print(f"  narrow:       {narrow['frames']:,} frames ({narrow['replayed']:,} of them replayed after a"
          f" reposted stranger joined), {narrow['bytes']:,} bytes in {narrow['seconds']:.1f} s")
    print(f"  narrow/whole: {share_frames:.2%} of the frames, {share_bytes:.2%} of the bytes "
          f"(goal: at most {GOAL:.0%}: {'met' if max(share_frames, share_bytes) <= GOAL else 'NOT met'})")
    print(f"  timelines: {len(whole['timelines']):,} rows whole, {len(narrow['timelines']):,} narrow: "
          f"{'equal' if equal else 'DIFFER'}")
    figure("narrow ingest, ten served actors: bytes received against the whole stream", narrow["bytes"],
           whole["bytes"], "bytes", f"<= {GOAL} ({'met' if share_bytes <= GOAL else 'not met'})")
    return 0 if equal else 1


if __name__ == "__main__":
    os.environ.setdefault("FEATHERREADER_ENV", "test")
    sys.exit(main())
