"""Admission bench: one firehose-shaped log applied twice in one run, admitted and admit-all.

The log: `--dids` accounts (default 100,000) posting, following and updating profiles in a
firehose-like mix (70 % posts, 25 % follows, 5 % profiles). Ten served actors follow
`--dids / 1000` accounts each, so about 1 % of the DIDs matter to them. Both runs apply the same
decoded events through the global subscription's batch transaction (500 events a batch, the
cursor saved in each, as the engine does), on fresh SQLite files:

- baseline: FEED_SERVE=all (everything stored, as before admission);
- admitted: FEED_SERVE=signed-in with the ten actors in the feeds config.

Printed: events/s both ways and their ratio, the database size after the log both ways, and the
bytes per served actor (admitted size minus an empty database, over ten). Frames are decoded
before timing starts, so the figures compare what the store does with them.

    .venv/bin/python bench/admission.py               # 1,000,000 events (make bench)
    .venv/bin/python bench/admission.py --events 200000
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from feather import create_app, features  # noqa: E402
from feather.db import db  # noqa: E402
from feather.feeds.config import DEFAULT_TOML  # noqa: E402
from feather.feeds.store import schema  # noqa: E402
from feather.jetstream import store  # noqa: E402
from feather.jetstream.events import CommitEvent  # noqa: E402
from feather.jetstream.subscriptions import merge  # noqa: E402
from feather.migrate import upgrade  # noqa: E402

FOLLOW, POST, PROFILE = "app.bsky.graph.follow", "app.bsky.feed.post", "app.bsky.actor.profile"
ACTORS = [f"did:plc:served{i:02d}aaaaaaaaaaaaaaa" for i in range(10)]
BATCH = 500


def did(n: int) -> str:
    return f"did:plc:{n:024d}"


def make_log(events: int, dids: int, seed: int = 7) -> list:
    rng = random.Random(seed)
    t = 1_760_000_000_000_000
    out = []
    per_actor = max(1, dids // 1000)
    for a, actor in enumerate(ACTORS):  # the served actors' follows come first, like a sign-in
        for k in range(per_actor):
            t += 1
            subject = did((a * per_actor + k) * 7 % dids)
            out.append(CommitEvent(actor, t, "create", FOLLOW, f"f{a}x{k}",
                                   {"$type": FOLLOW, "subject": subject, "createdAt": "2025-10-09T08:53:20.000Z"},
                                   f"bafyf{a}x{k}"))
    while len(out) < events:
        t += rng.randint(1, 400)
        author = did(rng.randrange(dids))
        roll = rng.random()
        rkey = f"r{len(out)}"
        if roll < 0.70:
            rec = {"$type": POST, "text": "x" * rng.randint(10, 200), "createdAt": "2025-10-09T08:53:20.000Z",
                   "langs": ["en"]}
            out.append(CommitEvent(author, t, "create", POST, rkey, rec, f"bafyp{len(out)}"))
        elif roll < 0.95:
            rec = {"$type": FOLLOW, "subject": did(rng.randrange(dids)), "createdAt": "2025-10-09T08:53:20.000Z"}
            out.append(CommitEvent(author, t, "create", FOLLOW, rkey, rec, f"bafyf{len(out)}"))
        else:
            rec = {"$type": PROFILE, "displayName": "someone", "description": "y" * rng.randint(0, 120)}
            out.append(CommitEvent(author, t, "update", PROFILE, "self", rec, f"bafyr{len(out)}"))
    return out[:events]


def run(log: list, serve: str, workdir: str) -> tuple[float, int, int]:
    """(events/s, database bytes after the log, bytes of the same database empty)."""
    cfg = Path(workdir) / f"{serve}.toml"
    cfg.write_text("actors = [" + ", ".join(f'"{a}"' for a in ACTORS) + "]\n" + DEFAULT_TOML)
    path = Path(workdir) / f"{serve}.db"
    app = create_app({"DATABASE_URL": f"sqlite:///{path}", "FEATHERREADER_ENV": "test", "FEATHERREADER_DATA_DIR": workdir,
                      "FEATHERREADER_LOG_LEVEL": "WARNING", "FEATHERREADER_CONFIG": str(cfg), "FEED_SERVE": serve})
    upgrade(db.obj)
    (sub,) = [s for s in merge(features.subscriptions(app.config["FEATHER"])) if s.name == "global"]
    with app.app_context(), db.connection_context():
        schema.ensure(app.extensions["feeds"])
        empty = store.db_size_bytes()
        started = time.perf_counter()
        for i in range(0, len(log), BATCH):
            batch = log[i:i + BATCH]
            store.apply_batch(sub, batch, store.Cursor(batch[-1].time_us))
        took = time.perf_counter() - started
        db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        size = store.db_size_bytes()
    db.obj.close()
    return len(log) / took, size, empty


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--dids", type=int, default=100_000)
    args = p.parse_args()
    log = make_log(args.events, args.dids)
    with tempfile.TemporaryDirectory(prefix="feather-admission-") as workdir:
        all_rate, all_size, _ = run(log, "all", workdir)
        adm_rate, adm_size, empty = run(log, "signed-in", workdir)
    mb = 1024 * 1024
    print(f"admission bench: {args.events:,} events, {args.dids:,} DIDs, 10 served actors following "
          f"{args.dids // 1000:,} each (~1 % of DIDs)")
    print(f"  admit-all (baseline): {all_rate:,.0f} events/s, database {all_size / mb:,.1f} MiB")
    print(f"  admitted:             {adm_rate:,.0f} events/s, database {adm_size / mb:,.1f} MiB")
    print(f"  ratio admitted/admit-all: {adm_rate / all_rate:.1f}× events/s, "
          f"{adm_size / all_size:.3f}× database size")
    print(f"  bytes per served actor after the log: {(adm_size - empty) / len(ACTORS):,.0f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("FEATHERREADER_ENV", "test")
    sys.exit(main())
