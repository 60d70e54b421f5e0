"""A tiny test feature: mirrors every record it is sent, so tests can compare the database
with the state computed straight from the event log. Loaded through
FEATHERREADER_EXTRA_FEATURES=tests.support.mirror_feature (in-process or in a worker).

MIRROR_DIDS_FILE (env): when set, the subscription is DID-filtered to the DIDs listed in that
file, one a line, re-read on every membership poll; otherwise it takes every DID.
"""
from __future__ import annotations

import os
import time

from feather.db import current_dialect, db
from feather.feeds.store.records import chunks
from feather.jetstream.subscriptions import Handler, Subscription

COLLECTIONS = ["app.bsky.feed.post", "app.bsky.graph.follow", "app.bsky.feed.like"]
_ready = False
# Test knob: seconds the handler sleeps per batch (a slow writer, to fill the queue).
SLOW_WRITER_SECS = 0.0
# Test knob: an Event the handler waits on (at most a minute) per batch: a writer stuck until the
# test lets it go, however slow the machine (a timed sleep could end before the test looked).
WRITER_GATE = None
# Test knob: seconds the handler computes per batch without yielding (SQL-bound work holds the loop).
BUSY_WRITER_SECS = 0.0
batches_applied = 0
gaps: list[int] = []
# Test knobs: a batch holding a commit with rkey FAIL_RKEY raises after writing its rows, while
# fails_left > 0; COUNT_APPLIES counts, per URI, the applications that were committed.
FAIL_RKEY: str | None = None
fails_left = 0
COUNT_APPLIES = False


def _ensure_tables() -> None:
    global _ready
    if _ready:
        return
    db.execute_sql("CREATE TABLE IF NOT EXISTS test_mirror (uri TEXT PRIMARY KEY, cid TEXT NOT NULL)")
    db.execute_sql("CREATE TABLE IF NOT EXISTS test_identity (did TEXT PRIMARY KEY, handle TEXT, active TEXT)")
    db.execute_sql("CREATE TABLE IF NOT EXISTS test_apply_count (uri TEXT PRIMARY KEY, n INTEGER NOT NULL)")
    _ready = True


def apply_batch(events) -> None:
    """A batch's records in one multi-row delete and one multi-row upsert (each URI's last
    operation wins; chunked only past the database's parameter limit), as a real handler applies
    a batch; a statement per event would measure PostgreSQL's round trips, not the engine.
    Counting applications (a test knob) stays per event."""
    _ensure_tables()
    q = current_dialect().q
    last: dict[str, str | None] = {}  # uri -> cid after the batch, None when deleted
    for event in events:
        if event.kind == "commit":
            last.pop(event.uri, None)  # re-insert: the dict keeps each uri's last operation's order
            last[event.uri] = None if event.operation == "delete" else event.cid
            if COUNT_APPLIES and event.operation != "delete":
                db.execute_sql(q("INSERT INTO test_apply_count (uri, n) VALUES (?, 1) "
                                 "ON CONFLICT (uri) DO UPDATE SET n = test_apply_count.n + 1"), (event.uri,))
        elif event.kind == "identity":
            db.execute_sql(q("INSERT INTO test_identity (did, handle) VALUES (?, ?) "
                             "ON CONFLICT (did) DO UPDATE SET handle = excluded.handle"), (event.did, event.handle))
        elif event.kind == "account":
            db.execute_sql(q("INSERT INTO test_identity (did, active) VALUES (?, ?) "
                             "ON CONFLICT (did) DO UPDATE SET active = excluded.active"),
                           (event.did, f"{event.active}:{event.status}"))
    gone = [uri for uri, cid in last.items() if cid is None]
    kept = [(uri, cid) for uri, cid in last.items() if cid is not None]
    for chunk in chunks(gone, 1):
        db.execute_sql(q(f"DELETE FROM test_mirror WHERE uri IN ({', '.join('?' * len(chunk))})"), chunk)
    for chunk in chunks(kept, 2):
        db.execute_sql(q(f"INSERT INTO test_mirror (uri, cid) VALUES {', '.join(['(?, ?)'] * len(chunk))} "
                         "ON CONFLICT (uri) DO UPDATE SET cid = excluded.cid"), [v for row in chunk for v in row])
    global fails_left
    if fails_left and any(e.kind == "commit" and e.rkey == FAIL_RKEY for e in events):
        fails_left -= 1
        raise RuntimeError(f"planted handler failure on {FAIL_RKEY}")
    if SLOW_WRITER_SECS:
        time.sleep(SLOW_WRITER_SECS)
    if WRITER_GATE is not None:
        WRITER_GATE.wait(60)
    if BUSY_WRITER_SECS:
        until = time.perf_counter() + BUSY_WRITER_SECS
        while time.perf_counter() < until:
            pass
    global batches_applied
    batches_applied += 1


def _dids():
    path = os.environ["MIRROR_DIDS_FILE"]
    with open(path) as fh:
        return [line.strip() for line in fh if line.strip()]


def subscriptions(settings):
    handler = Handler("mirror", apply_batch, None, identity_and_account=True)
    if os.environ.get("MIRROR_DIDS_FILE"):
        return [Subscription("mirror", list(COLLECTIONS), [handler], dids=_dids,
                             max_lookback_us=int(os.environ.get("MIRROR_LOOKBACK_US", "0")) or None,
                             on_gap=gaps.append)]
    return [Subscription("global", list(COLLECTIONS), [handler])]


def expected_state(frames) -> tuple[dict, dict]:
    """Apply the log in order, the obvious way: what the database must end up holding."""
    records, identities = {}, {}
    for frame in frames:
        if frame.get("kind") == "commit":
            c = frame["commit"]
            if c["collection"] not in COLLECTIONS:
                continue
            uri = f"at://{frame['did']}/{c['collection']}/{c['rkey']}"
            if c["operation"] == "delete":
                records.pop(uri, None)
            else:
                records[uri] = c["cid"]
    return records, identities


def apply_counts() -> dict:
    if "test_apply_count" not in db.get_tables():
        return {}
    return dict(db.execute_sql("SELECT uri, n FROM test_apply_count").fetchall())


def mirror_rows() -> dict:
    # Never create the table from the reader side: it would wait on the writer's lock.
    if "test_mirror" not in db.get_tables():
        return {}
    return dict(db.execute_sql("SELECT uri, cid FROM test_mirror").fetchall())
