"""Writes demo/events.jsonl: the bundled event log `make demo` replays (deterministic; rerun after edits).

    .venv/bin/python demo/make_events.py            # rewrites demo/events.jsonl

Twenty made-up accounts with Bluesky profiles, follows and posts; public RSS subscription records
(`community.lexicon.rss.subscription`) of which four feeds have at least six subscribers, so /network
shows them above the k-floor of 5 and hides the rest; and Tangled and Sifa follows and profiles for the
account the demo signs in as (ada), so graph sync has something to mirror. Frames carry no time_us: the
fake Jetstream stamps them in order when it loads the log, so a replay always looks recent.
"""
from __future__ import annotations

import base64
import hashlib
import json
import random
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "events.jsonl"
DOMAIN = "demo.feather.test"
OWNER = "ada"  # the account `make demo` signs in as
NAMES = ["ada", "bruno", "chiara", "dmitri", "elif", "femi", "grete", "hiro", "ines", "jonas", "kemal", "lucia",
         "mateo", "noor", "oskar", "priya", "quinn", "rosa", "sven", "tamar"]
FEEDS = [  # (feed URL, site, title, how many accounts subscribe)
    ("https://blog.example.org/feed.xml", "https://blog.example.org/", "Example Engineering", 12),
    ("https://news.example.net/rss", "https://news.example.net/", "Example News", 9),
    ("https://atproto.example.com/atom.xml", "https://atproto.example.com/", "Protocol Notes", 7),
    ("https://cooking.example.com/index.rss", "https://cooking.example.com/", "Weeknight Cooking", 6),
    ("https://tiny.example.com/feed", "https://tiny.example.com/", "A Tiny Blog", 3),  # below k: never shown
    ("https://solo.example.com/rss.xml", "https://solo.example.com/", "Just Me", 1),
]
TOPICS = ["Shipped a small fix to the feed reader today.", "Anyone else reading the new protocol notes?",
          "Weeknight pasta, twenty minutes, no regrets.", "Rain all day; good for writing.",
          "Trying out a self-hosted timeline.", "The train was late, the book was good.",
          "Finally moved my blog to a static site.", "Reading about k-anonymity before coffee.",
          "Garden update: the tomatoes survived.", "Three tabs of RSS feeds and one of tea."]
START = datetime(2026, 11, 20, 9, 0, tzinfo=timezone.utc)
B32 = "234567abcdefghijklmnopqrstuvwxyz"


def did_for(name: str) -> str:
    digest = hashlib.sha256(f"feather-demo:{name}".encode()).digest()
    return "did:plc:" + base64.b32encode(digest[:15]).decode().lower()


def handle_for(name: str) -> str:
    return f"{name}.{DOMAIN}"


class Clock:
    """Deterministic record times and TIDs (rkeys and revs must be TIDs)."""

    def __init__(self):
        self.t = START

    def tick(self, minutes: int = 7) -> datetime:
        self.t += timedelta(minutes=minutes)
        return self.t

    def iso(self) -> str:
        return self.t.strftime("%Y-%m-%dT%H:%M:%S.000Z")

    def tid(self, clock_id: int = 0) -> str:
        n = (int(self.t.timestamp() * 1_000_000) << 10) | clock_id
        return "".join(B32[(n >> (5 * i)) & 31] for i in range(12, -1, -1))


def commit(did: str, collection: str, rkey: str, record: dict, rev: str) -> dict:
    record = {"$type": collection, **record}
    cid = "bafyrei" + base64.b32encode(hashlib.sha256(json.dumps(record, sort_keys=True).encode()).digest())\
        .decode().lower().rstrip("=")[:52]
    return {"did": did, "kind": "commit", "commit": {"rev": rev, "operation": "create", "collection": collection,
                                                     "rkey": rkey, "record": record, "cid": cid}}


def build() -> list[dict]:
    rng = random.Random(20261130)
    clock = Clock()
    dids = {name: did_for(name) for name in NAMES}
    frames: list[dict] = []

    def add(name: str, collection: str, record: dict, rkey: str | None = None, minutes: int = 7) -> None:
        clock.tick(minutes)
        record = {**record, "createdAt": clock.iso()} if "createdAt" not in record else record
        frames.append(commit(dids[name], collection, rkey or clock.tid(), record, clock.tid(1)))

    for name in NAMES:  # Bluesky profiles
        add(name, "app.bsky.actor.profile", {"displayName": name.capitalize(),
                                             "description": f"Demo account {handle_for(name)}"}, rkey="self", minutes=1)
    for name in NAMES:  # follows: everyone follows 5-9 others; ada follows most people
        others = [n for n in NAMES if n != name]
        picks = others if name == OWNER else rng.sample(others, rng.randint(5, 9))
        for other in sorted(picks, key=NAMES.index)[: 14 if name == OWNER else None]:
            add(name, "app.bsky.graph.follow", {"subject": dids[other]}, minutes=1)
    for _round in range(4):  # posts, interleaved over a few days
        for name in NAMES:
            if rng.random() < 0.8:
                add(name, "app.bsky.feed.post", {"text": rng.choice(TOPICS), "langs": ["en"]}, minutes=23)
    subscribers = NAMES[:]
    for url, site, title, count in FEEDS:  # public RSS subscription records
        rng.shuffle(subscribers)
        for name in sorted(subscribers[:count], key=NAMES.index):
            add(name, "community.lexicon.rss.subscription", {"url": url, "siteUrl": site, "title": title,
                                                             "fetchHint": "daily"}, minutes=3)
    # Graph sync: some accounts are on Tangled and Sifa; ada follows a few people there.
    tangled, sifa = NAMES[:12:2], NAMES[1:10:3]
    for name in tangled:
        add(name, "sh.tangled.actor.profile", {"bluesky": True}, rkey="self", minutes=1)
    for name in sifa:
        add(name, "id.sifa.profile.self", {}, rkey="self", minutes=1)
    for other in ("chiara", "elif", "grete", "rosa"):
        add(OWNER, "sh.tangled.graph.follow", {"subject": dids[other]}, minutes=2)
    for other in ("bruno", "femi", "jonas"):
        add(OWNER, "id.sifa.graph.follow", {"subject": dids[other]}, minutes=2)
    return frames


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else OUT
    frames = build()
    out.write_text("".join(json.dumps(f, sort_keys=True, separators=(",", ":")) + "\n" for f in frames))
    print(f"wrote {len(frames)} events to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
