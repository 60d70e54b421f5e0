"""Deterministic mixed Jetstream logs for ingest tests and benchmarks."""
from __future__ import annotations

import random

from tests.support.jetstream_wire import make_account, make_commit, make_identity

COLLECTIONS = ("app.bsky.feed.post", "app.bsky.graph.follow", "app.bsky.feed.like")


def mixed_log(n: int, *, dids: int = 50, seed: int = 7, start_us: int | None = None,
              identity_every: int = 0) -> list[dict]:
    """n frames: mostly creates, some updates and deletes of earlier records, in time order.

    With start_us, frames carry explicit time_us (start_us, start_us+1, …) so a log can be
    replayed and compared exactly; without it the server stamps them.
    """
    rng = random.Random(seed)
    live: list[tuple[str, str, str]] = []
    frames = []
    for i in range(n):
        t = None if start_us is None else start_us + i
        did = f"did:plc:user{rng.randrange(dids):04d}"
        if identity_every and i % identity_every == identity_every - 1:
            frames.append(make_identity(did, handle=f"u{i}.test", time_us=t) if i % 2
                          else make_account(did, active=bool(i % 3), status=None if i % 3 else "deactivated", time_us=t))
            continue
        roll = rng.random()
        if live and roll < 0.1:
            d, coll, rkey = live.pop(rng.randrange(len(live)))
            frames.append(make_commit(d, coll, rkey, "delete", time_us=t))
        elif live and roll < 0.2:
            d, coll, rkey = live[rng.randrange(len(live))]
            frames.append(make_commit(d, coll, rkey, "update", record={"$type": coll, "text": f"edit {i}",
                                                                       "createdAt": "2026-11-01T00:00:00Z"}, time_us=t))
        else:
            coll = COLLECTIONS[rng.randrange(len(COLLECTIONS))]
            rkey = f"r{i:09d}"
            record = {"$type": coll, "text": f"record {i}", "createdAt": "2026-11-01T00:00:00Z"}
            if coll == "app.bsky.graph.follow":
                record = {"$type": coll, "subject": f"did:plc:user{rng.randrange(dids):04d}",
                          "createdAt": "2026-11-01T00:00:00Z", "n": i}
            frames.append(make_commit(did, coll, rkey, "create", record=record, time_us=t))
            live.append((did, coll, rkey))
    return frames
