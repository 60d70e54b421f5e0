"""The ingest benches' Jetstream log: firehose-shaped, with a realistic follow fan-in.

    python bench/firehose.py --events 100000 --out log.jsonl   # write one to look at

About `dids` accounts (default 2,000). Popularity follows a Zipf law (weight 1/rank): a few
accounts are followed by a large share of everyone and a long tail by a handful, which is what
makes fan-out cost uneven on the real network. The busiest posters are not the most followed
(activity is an independent Zipf draw over a shuffled order). The mix, by frame: 55 % post
creates, 20 % follow creates, 5 % profile writes (create, then updates), 8 % deletes of a live
post or follow, 7 % post edits (updates; a third move createdAt), 5 % identity events. Frames
carry explicit time_us 200 µs apart (5,000 events/s, the legacy per-IP cap) from `start_us`.
An account follows another at most once at a time (apps do not write duplicate follows).

Deterministic for a seed, so a before/after comparison replays the same log.
"""
from __future__ import annotations

import argparse
import bisect
import itertools
import json
import random
import sys
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.jetstream_wire import make_commit, make_identity  # noqa: E402

POST, FOLLOW, PROFILE = "app.bsky.feed.post", "app.bsky.graph.follow", "app.bsky.actor.profile"
STEP_US = 200


def _iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1_000_000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class _Zipf:
    """Draw an index in [0, n) with weight 1/(rank+1) under a fixed shuffle of ranks."""

    def __init__(self, rng: random.Random, n: int):
        order = list(range(n))
        rng.shuffle(order)
        self.order = order
        self.cum = list(itertools.accumulate(1.0 / (r + 1) for r in range(n)))

    def draw(self, rng: random.Random) -> int:
        return self.order[bisect.bisect_left(self.cum, rng.random() * self.cum[-1])]


def realistic_log(n: int, *, dids: int = 2000, seed: int = 19, start_us: int = 1_760_000_000_000_000) -> list[dict]:
    rng = random.Random(seed)
    names = [f"did:plc:{rng.getrandbits(100):025x}"[:32] for _ in range(dids)]
    followed, active = _Zipf(rng, dids), _Zipf(rng, dids)
    posts: list[tuple[str, str]] = []
    follows: list[tuple[str, str, str]] = []
    following: set[tuple[str, str]] = set()  # live (follower, subject) pairs
    has_profile: set[str] = set()
    frames = []
    for i in range(n):
        t = start_us + STEP_US * i
        author = names[active.draw(rng)]
        roll = rng.random()
        subject = None
        if 0.55 <= roll < 0.75:
            # An app follows an account once: a pair already followed draws again, so a popular
            # account keeps its fan-in and the log has no duplicate follow records.
            for _ in range(8):
                subject = names[followed.draw(rng)]
                if subject != author and (author, subject) not in following:
                    break
            else:
                subject = None  # this author already follows everyone it draws: a post instead
        if roll < 0.55 or (roll < 0.75 and subject is None) or (roll < 0.90 and not posts):
            rkey = f"p{i:09d}"
            record = {"$type": POST, "text": f"post {i}", "createdAt": _iso(t), "langs": ["en"]}
            frames.append(make_commit(author, POST, rkey, "create", record=record, time_us=t))
            posts.append((author, rkey))
        elif roll < 0.75:
            rkey = f"f{i:09d}"
            record = {"$type": FOLLOW, "subject": subject, "createdAt": _iso(t)}
            frames.append(make_commit(author, FOLLOW, rkey, "create", record=record, time_us=t))
            follows.append((author, rkey, subject))
            following.add((author, subject))
        elif roll < 0.80:
            op = "update" if author in has_profile else "create"
            has_profile.add(author)
            record = {"$type": PROFILE, "displayName": f"user {i}", "createdAt": _iso(t)}
            frames.append(make_commit(author, PROFILE, "self", op, record=record, time_us=t))
        elif roll < 0.88:
            if rng.random() < 0.6 or not follows:
                did, rkey = posts.pop(rng.randrange(len(posts)))
                frames.append(make_commit(did, POST, rkey, "delete", time_us=t))
            else:
                did, rkey, subject = follows.pop(rng.randrange(len(follows)))
                following.discard((did, subject))
                frames.append(make_commit(did, FOLLOW, rkey, "delete", time_us=t))
        elif roll < 0.95:
            did, rkey = posts[rng.randrange(len(posts))]
            created = _iso(t - 1_000_000 * rng.randrange(1, 60)) if rng.random() < 0.33 else _iso(t)
            record = {"$type": POST, "text": f"edited {i}", "createdAt": created, "langs": ["en"]}
            frames.append(make_commit(did, POST, rkey, "update", record=record, time_us=t))
        else:
            frames.append(make_identity(author, handle=f"u{i}.test", time_us=t))
    return frames


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--dids", type=int, default=2000)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    frames = realistic_log(args.events, dids=args.dids)
    Path(args.out).write_text("".join(json.dumps(f) + "\n" for f in frames))


if __name__ == "__main__":
    main()
