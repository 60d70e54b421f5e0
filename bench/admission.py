"""Admission bench: one firehose-shaped log applied in one run, admitted and admit-all.

The log: `--dids` accounts (default 100,000) posting, reposting, following, updating profiles
and writing other apps' records in a firehose-like mix (65 % posts, 5 % reposts, 24 % follows,
5 % profiles, `--other` of every event (default 1 %) spread over the nine collections of the
"Everything" feed). Ten served actors follow `--dids / 1000` accounts each, so about 1 % of the
DIDs matter to them. Every run applies the same decoded events through the global subscription's
batch transaction (500 events a batch, the cursor saved in each, as the engine does), on fresh
SQLite files:

- baseline: FEED_SERVE=all with the built-in feeds (everything stored, as before admission);
- admitted, Following only: FEED_SERVE=signed-in, the built-in feeds without "Everything" (the
  shape before it existed: Following and Following, posts only);
- admitted: FEED_SERVE=signed-in with the built-in feeds as shipped, "Everything" included.

Printed: events/s and database size each way, and the bytes per served actor (a database's size
after the log minus the same database empty, over ten) with Everything over without: the issue's
goal is at most 2×. Frames are decoded before timing starts.

    .venv/bin/python bench/admission.py               # 1,000,000 events (make bench)
    .venv/bin/python bench/admission.py --events 200000 --other 0.05
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
REPOST = "app.bsky.feed.repost"
EVERYTHING_MARK = "# The other apps graph sync knows"
FOLLOWING_ONLY_TOML = DEFAULT_TOML.split(EVERYTHING_MARK)[0]
# One record shape per "Everything" collection, about the size the apps write (docs/everything-lexicons.md).
OTHER = [
    ("sh.tangled.repo", lambda n: {"name": f"repo{n}", "knot": "knot.example", "owner": "did:plc:x",
                                   "description": "a repository", "createdAt": "2025-10-09T08:53:20.000Z"}),
    ("sh.tangled.feed.star", lambda n: {"subject": f"at://did:plc:{n:024d}/sh.tangled.repo/3l2aaaaaaaaa2",
                                        "createdAt": "2025-10-09T08:53:20.000Z"}),
    ("social.grain.gallery", lambda n: {"title": "a gallery", "description": "y" * 80,
                                        "createdAt": "2025-10-09T08:53:20.000Z"}),
    ("network.cosmik.card", lambda n: {"type": "URL", "url": f"https://example.com/{n}",
                                       "content": {"$type": "network.cosmik.card#urlContent",
                                                   "url": f"https://example.com/{n}",
                                                   "metadata": {"title": "an article", "description": "z" * 120}},
                                       "createdAt": "2025-10-09T08:53:20.000Z"}),
    ("network.cosmik.collection", lambda n: {"name": "reading", "accessType": "OPEN",
                                             "createdAt": "2025-10-09T08:53:20.000Z"}),
    ("pub.leaflet.document", lambda n: {"title": "a post", "description": "w" * 100, "author": "did:plc:x",
                                        "pages": [], "publishedAt": "2025-10-09T08:53:20.000Z"}),
    ("id.sifa.profile.position", lambda n: {"title": "engineer", "company": "acme", "startedAt": "2024-01",
                                            "createdAt": "2025-10-09T08:53:20.000Z"}),
    ("id.sifa.profile.project", lambda n: {"name": "a project", "description": "v" * 60,
                                           "createdAt": "2025-10-09T08:53:20.000Z"}),
    ("id.sifa.profile.publication", lambda n: {"title": "a paper", "createdAt": "2025-10-09T08:53:20.000Z"}),
]
ACTORS = [f"did:plc:served{i:02d}aaaaaaaaaaaaaaa" for i in range(10)]
BATCH = 500


def did(n: int) -> str:
    return f"did:plc:{n:024d}"


def make_log(events: int, dids: int, other: float = 0.01, seed: int = 7) -> list:
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
        if roll < other:
            nsid, make = OTHER[rng.randrange(len(OTHER))]
            out.append(CommitEvent(author, t, "create", nsid, rkey, {"$type": nsid, **make(len(out))},
                                   f"bafyo{len(out)}"))
            continue
        roll = (roll - other) / (1 - other)  # the Bluesky mix of the rest
        if roll < 0.05:
            subject = f"at://{did(rng.randrange(dids))}/{POST}/r{rng.randrange(max(1, len(out)))}"
            rec = {"$type": REPOST, "subject": {"uri": subject, "cid": "bafyx"}, "createdAt": "2025-10-09T08:53:20.000Z"}
            out.append(CommitEvent(author, t, "create", REPOST, rkey, rec, f"bafyq{len(out)}"))
        elif roll < 0.70:
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


def run(log: list, serve: str, workdir: str, toml: str = DEFAULT_TOML, name: str = "") -> tuple[float, int, int]:
    """(events/s, database bytes after the log, bytes of the same database empty)."""
    name = name or serve
    cfg = Path(workdir) / f"{name}.toml"
    cfg.write_text("actors = [" + ", ".join(f'"{a}"' for a in ACTORS) + "]\n" + toml)
    path = Path(workdir) / f"{name}.db"
    app = create_app({"DATABASE_URL": f"sqlite:///{path}", "FEATHERREADER_ENV": "test", "FEATHERREADER_DATA_DIR": workdir,
                      "FEATHERREADER_LOG_LEVEL": "WARNING", "FEATHERREADER_CONFIG": str(cfg), "FEED_SERVE": serve})
    upgrade(db.obj)
    # The stream that carries the feeds from every DID (`feeds` while narrow subscriptions may take turns).
    (sub,) = [s for s in merge(features.subscriptions(app.config["FEATHER"]))
              if s.dids is None and any(h.feature == "feeds" for h in s.handlers)]
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
    p.add_argument("--other", type=float, default=0.01, help="share of events in the other apps' collections")
    args = p.parse_args()
    assert EVERYTHING_MARK in DEFAULT_TOML, "the built-in config lost the line that starts Everything's collections"
    log = make_log(args.events, args.dids, args.other)
    with tempfile.TemporaryDirectory(prefix="feather-admission-") as workdir:
        all_rate, all_size, _ = run(log, "all", workdir)
        old_rate, old_size, old_empty = run(log, "signed-in", workdir, FOLLOWING_ONLY_TOML, "following-only")
        adm_rate, adm_size, empty = run(log, "signed-in", workdir)
    mb = 1024 * 1024
    before, after = (old_size - old_empty) / len(ACTORS), (adm_size - empty) / len(ACTORS)
    print(f"admission bench: {args.events:,} events ({args.other:.1%} other apps'), {args.dids:,} DIDs, "
          f"10 served actors following {args.dids // 1000:,} each (~1 % of DIDs)")
    print(f"  admit-all (baseline):       {all_rate:,.0f} events/s, database {all_size / mb:,.1f} MiB")
    print(f"  admitted, Following only:   {old_rate:,.0f} events/s, database {old_size / mb:,.1f} MiB")
    print(f"  admitted, with Everything:  {adm_rate:,.0f} events/s, database {adm_size / mb:,.1f} MiB")
    print(f"  ratio admitted/admit-all: {adm_rate / all_rate:.1f}× events/s, "
          f"{adm_size / all_size:.3f}× database size")
    print(f"  bytes per served actor after the log: {after:,.0f} with Everything, {before:,.0f} without: "
          f"{after / before:.2f}× (goal: at most 2×)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("FEATHERREADER_ENV", "test")
    sys.exit(main())
