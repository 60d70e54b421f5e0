"""Admission and author backfills against Bluesky's reference PDS (the stream via the firehose bridge)."""
from __future__ import annotations

import json
import time

import pytest

from feather.db import db
from tests.fixtures.feeds.feedkit import feeds_app, feeds_subscription, rows, settled_us, toml
from tests.support.pds import create_session, tid_now, xrpc

pytestmark = pytest.mark.pds

FOLLOW, POST = "app.bsky.graph.follow", "app.bsky.feed.post"


def _create(pds, token, did, collection, record, rkey=None):
    body = {"repo": did, "collection": collection, "record": record}
    if rkey:
        body["rkey"] = rkey
    r = xrpc(pds.pds_url, "POST", "com.atproto.repo.createRecord", token=token, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _frame(js, did, collection, rkey, since_us):
    """The Jetstream frame of one commit, from the fake Jetstream the PDS firehose feeds."""
    import websocket

    ws = websocket.create_connection(js.subscribe_url(wantedCollections=collection, wantedDids=did, cursor=since_us),
                                     timeout=10)
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            frame = json.loads(ws.recv())
            if frame.get("kind") == "commit" and frame["commit"]["rkey"] == rkey:
                return json.dumps(frame)
    finally:
        ws.close()
    raise AssertionError(f"no frame for {did} {collection}/{rkey}")


def _app(make_app, tmp_path, pds, serve, actors=()):
    head = "actors = [" + ", ".join(f'"{a}"' for a in actors) + "]\n"
    return feeds_app(make_app, tmp_path, head + toml(), FEED_SERVE=serve,
                     FEATHERREADER_PLC_URL=pds.plc_url, FEATHERREADER_HANDLE_RESOLVER=pds.pds_url)


def test_a_new_follow_admits_the_author_and_backfills_their_posts_from_the_pds(make_app, tmp_path, pds_jetstream):
    from feather.feeds.tasks import authors
    from feather.jetstream.events import decode

    pds, js = pds_jetstream
    alice, bob, carol = (pds.accounts[n] for n in ("alice", "bob", "carol"))
    since = int(time.time() * 1_000_000) - 5_000_000
    bob_token, alice_token, carol_token = (create_session(pds, n) for n in ("bob", "alice", "carol"))
    made = [_create(pds, bob_token, bob.did, POST, {"$type": POST, "text": f"bob {i}",
                                                     "createdAt": "2026-11-30T00:00:0%d.000Z" % i})
            for i in range(3)]
    rkey = tid_now()
    _create(pds, alice_token, alice.did, FOLLOW, {"$type": FOLLOW, "subject": bob.did,
                                                  "createdAt": "2026-11-30T00:01:00.000Z"}, rkey=rkey)
    unrelated = _create(pds, carol_token, carol.did, POST, {"$type": POST, "text": "not followed",
                                                            "createdAt": "2026-11-30T00:02:00.000Z"})

    app = _app(make_app, tmp_path, pds, "signed-in", actors=[alice.did])
    sub = feeds_subscription(app.config["FEATHER"])
    events = [decode(_frame(js, alice.did, FOLLOW, rkey, since)),
              decode(_frame(js, carol.did, POST, unrelated["uri"].rsplit("/", 1)[-1], since))]
    with app.app_context(), db.connection_context(), db.atomic():
        sub.handlers[0].apply_batch(events)
    assert rows(app, "SELECT did FROM feed_records_post") == []  # carol's post never stored
    with app.app_context(), db.connection_context():
        assert authors.fetch_tick(app, app.extensions["feeds"], now_us=settled_us()) == 1
    assert rows(app, "SELECT uri FROM feed_items WHERE actor = ? ORDER BY time_us DESC", (alice.did,)) == [
        (m["uri"],) for m in reversed(made)]
    assert rows(app, "SELECT DISTINCT did FROM feed_records_post") == [(bob.did,)]


def test_list_records_by_actor_backfills_from_the_pds_and_profiles_carry_the_handle(make_app, tmp_path, pds):
    bob = pds.accounts["bob"]
    token = create_session(pds, "bob")
    made = _create(pds, token, bob.did, POST, {"$type": POST, "text": "listed", "createdAt": "2026-11-30T01:00:00.000Z"})
    app = _app(make_app, tmp_path, pds, "all")
    body = app.test_client().get(f"/xrpc/com.example.post.listRecords?actor={bob.handle}&profiles=true").json
    assert made["uri"] in [r["uri"] for r in body["records"]]
    assert [(p["did"], p["handle"]) for p in body["profiles"]] == [(bob.did, bob.handle)]
