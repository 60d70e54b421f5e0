"""The scale bench's two timed processes (bench/scale.py starts them side by side):

- ingest: Feather's engine (every feature's handler on the `global` stream, FEED_SERVE=readers)
  replaying the log from the fake Jetstream until its cursor reaches the last event (or a time
  limit), the cursor sampled every 0.1 s;
- reader: getFeed through the Flask test client (the whole route: the reader's gate, the
  backfill check, the reposts' fill, the page, JSON) for served readers drawn at random, at a
  fixed rate: first `idle` reads with nothing else running (the baseline), then reads until the
  ingest is done.

They meet through files in the work directory, so the baseline and the measured reads each see
one phase only: `armed` (the ingest process is started and migrated), `ready` (the baseline
reads are done: the engine may start), `ingesting` (the first batch is applied), `done` (the
last is). Each process patches gevent before Feather is imported, as app.py does, and prints
one JSON line.
"""
from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import gevent
from gevent import monkey

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FEED_URL = "/xrpc/com.featherreader.getFeed?feed=timeline&actor={actor}&limit=50"
WARM_UP = 50  # reads before anything is timed: imports, caches, the first connections


def overrides(database: str, workdir: str, served: int, jetstream: str | None = None) -> dict:
    """The settings both processes (and the setup) run with. FEED_NARROW_MAX_DIDS=0: at these
    sizes the served readers and whom they follow are 40,000+ DIDs (at S = 1,000), past what the
    DID-filtered streams are for, so the feeds read the whole `global` stream, as above the
    limit they would; bench/narrow.py measures the narrow mode."""
    out = {"DATABASE_URL": database, "FEATHERREADER_ENV": "test", "FEATHERREADER_DATA_DIR": workdir,
           "FEATHERREADER_LOG_LEVEL": "WARNING", "FEED_SERVE": "readers", "FEED_SERVE_MAX_ACTORS": max(served, 1),
           "FEED_NARROW_MAX_DIDS": 0, "FEATHERREADER_ALLOW_PRIVATE_NETWORK": True}
    if jetstream:
        out["FEATHERREADER_JETSTREAM_HOSTS"] = jetstream
    return out


def status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith(field + ":")))


def wait_for(path: Path) -> None:
    while not path.exists():
        gevent.sleep(0.02)


def ingest(url: str, database: str, workdir: str, served: int, first_us: int, last_us: int, max_secs: float) -> None:
    monkey.patch_all()  # first: before Feather (Flask, peewee, ssl, websocket) is imported
    from bench.scale_store import sizes  # noqa: PLC0415  after monkey.patch_all()
    from feather import create_app, features  # noqa: PLC0415  after monkey.patch_all()
    from feather.db import db  # noqa: PLC0415  after monkey.patch_all()
    from feather.jetstream import store  # noqa: PLC0415  after monkey.patch_all()
    from feather.jetstream.engine import Engine  # noqa: PLC0415  after monkey.patch_all()
    from feather.process.runtime import freeze_startup_objects, migrate  # noqa: PLC0415  after monkey.patch_all()

    app = create_app(overrides(database, workdir, served, url))
    migrate(app)
    freeze_startup_objects()  # as `flask worker` does
    subs = [s for s in features.subscriptions(app.config["FEATHER"]) if s.name == "global"]
    with db.connection_context(), db.atomic():
        store.save_cursor("global", store.Cursor(first_us))  # replay the whole log
    work = Path(workdir)
    (work / "armed").write_text("")
    wait_for(work / "ready")
    engine = Engine(app, subs)
    started = time.perf_counter()
    engine.start()
    stream = engine.streams["global"]
    samples: list[tuple[float, int]] = []  # (seconds since start, applied cursor)
    # Until the last event, or max_secs: a rate too slow to finish is still measured, and the run ends.
    while (stream.cursor is None or stream.cursor.time_us < last_us) and time.perf_counter() - started < max_secs:
        gevent.sleep(0.1)
        cursor = stream.cursor.time_us if stream.cursor is not None else first_us
        if cursor > first_us:
            if not samples:
                (work / "ingesting").write_text("")
            samples.append((time.perf_counter() - started, cursor))
    if not samples:  # nothing applied before the limit: the reader must not wait for it
        (work / "ingesting").write_text("")
    (work / "done").write_text("")
    stats = dict(stream.stats)
    admissions = [getattr(h.apply_batch, "admission", None) for sub in subs for h in sub.handlers]
    stats["admission_rebuilds"] = sum(a.rebuilds for a in admissions if a is not None)
    engine.stop()
    with app.app_context(), db.connection_context():
        size = sizes()
    print(json.dumps({"samples": samples, "peak_kb": status_kb("VmHWM"), "stats": stats, "size": size}))


def reader(database: str, workdir: str, dids_file: str, rate: float, seed: int, idle: int) -> None:
    monkey.patch_all()  # first: before Feather (Flask, peewee, ssl) is imported
    from feather import create_app  # noqa: PLC0415  after monkey.patch_all()
    from feather.db import db  # noqa: PLC0415  after monkey.patch_all()
    from feather.process.runtime import freeze_startup_objects  # noqa: PLC0415  after monkey.patch_all()

    dids = json.loads(Path(dids_file).read_text())
    app = create_app(overrides(database, workdir, len(dids)))
    app.extensions["feeds_sources"] = offline_sources(app)
    freeze_startup_objects()  # as a web process does before it answers (runtime.start_web_process)
    client = app.test_client(use_cookies=False)  # a feed client sends no cookies (as bench/getfeed.py)
    rng = random.Random(seed)
    work = Path(workdir)

    def get() -> tuple[str, float, int, list[str] | None]:
        actor = dids[rng.randrange(len(dids))]
        started = time.perf_counter()
        # In a greenlet of its own, as a served request runs (peewee's connection is per greenlet).
        response = gevent.spawn(client.get, FEED_URL.format(actor=actor)).get()
        body = response.get_data()
        took = time.perf_counter() - started
        uris = [r["uri"] for r in json.loads(body)["records"]] if response.status_code == 200 else None
        return actor, took, response.status_code, uris

    def phase(until) -> dict:
        """Reads at `rate` (open loop: a late read does not make the next ones burst) until until()."""
        out: dict = {"latencies": [], "statuses": {}, "pages": []}
        step, due = 1.0 / rate, time.perf_counter()
        while not until(len(out["latencies"])):
            due = max(due + step, time.perf_counter() - step)
            gevent.sleep(max(0.0, due - time.perf_counter()))
            actor, took, status, uris = get()
            out["latencies"].append(took)
            out["statuses"][status] = out["statuses"].get(status, 0) + 1
            out["pages"].append((actor, uris))
        return out

    for _ in range(WARM_UP):
        get()
    wait_for(work / "armed")
    baseline = phase(lambda n: n >= idle)  # nothing else runs: what the same reads cost without ingest
    (work / "ready").write_text("")
    wait_for(work / "ingesting")
    loaded = phase(lambda n: (work / "done").exists())
    db.close()
    loaded["pages"] = [len(uris) if uris is not None else -1 for _, uris in loaded["pages"]]
    print(json.dumps({"idle": baseline, "loaded": loaded, "peak_kb": status_kb("VmHWM")}))


def offline_sources(app):
    """The production sources with every network call failing at once (the bench has no network):
    a DID resolves to itself; a reposted record the store lacks stays missing, as when its PDS is down."""
    from feather.atproto.syntax import is_valid_did  # noqa: PLC0415  after the caller's patch
    from feather.feeds.read.sources import AtprotoSources, SourceError  # noqa: PLC0415

    class Offline(AtprotoSources):
        def resolve_actor(self, identifier):
            return identifier if is_valid_did(identifier) else None

        def would_fetch(self, identifier):
            return False

        def _down(self, *args, **kwargs):
            raise SourceError("offline (bench)")

        list_follows = list_recent = get_record = collections = verified_handle = signing_key = _down

    return Offline(app)


if __name__ == "__main__":
    kind, args = sys.argv[1], sys.argv[2:]
    if kind == "ingest":
        ingest(args[0], args[1], args[2], int(args[3]), int(args[4]), int(args[5]), float(args[6]))
    else:
        reader(args[0], args[1], args[2], float(args[3]), int(args[4]), int(args[5]))
